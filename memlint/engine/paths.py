"""check_paths: files and directories to findings, in parallel, one file's failure its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from memlint.engine.settings import Settings
from memlint.engine.source import RuleCrash, check_source, syntax_error
from memlint.finding import Finding, InternalError

PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIX = ".ipynb"

@dataclass
class Report:
    """What `check_paths` found: findings sorted by path, line, column, code;
    internal errors (memlint's own failures) kept apart so callers exit 2."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files: int = 0


def check_file(path: str, settings: Settings) -> tuple[list[Finding], InternalError | None]:
    """One file from disk; never raises."""
    try:
        if path.endswith(NOTEBOOK_SUFFIX):
            from memlint.engine.notebook import check_notebook
            return check_notebook(path, settings), None
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return [syntax_error(path, 1, 1, f"cannot read the file: {error.strerror or error}")], None
    except RuleCrash as crash:  # from a notebook's cells
        return [], InternalError(path, str(crash))
    try:
        return check_source(data, path, settings), None
    except RuleCrash as crash:
        return [], InternalError(path, str(crash))
    except Exception as error:  # memlint's own bug: report it for this file, check the rest
        return [], InternalError(path, f"{type(error).__name__}: {error}")


def _check_chunk(args: tuple[list[str], Settings]):
    paths, settings = args
    return [check_file(p, settings) for p in paths]


def check_paths(paths: Iterable[str], settings: Settings | None = None,
                jobs: int | None = None) -> Report:
    """Check files and directories (recursing, honouring excludes) in parallel."""
    settings = settings or Settings()
    files = sorted(set(discover(paths, settings)))
    report = Report(files=len(files))
    jobs = jobs or os.cpu_count() or 1
    results: Iterator[tuple[list[Finding], InternalError | None]]
    if jobs <= 1 or len(files) < 4:
        results = (check_file(p, settings) for p in files)
        for findings, error in results:
            _collect(report, findings, error)
    else:
        chunks = [files[i::jobs * 4] for i in range(jobs * 4)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for chunk in pool.map(_check_chunk, [(c, settings) for c in chunks if c]):
                for findings, error in chunk:
                    _collect(report, findings, error)
    report.findings.sort()
    report.errors.sort(key=lambda e: e.path)
    return report


def _collect(report: Report, findings: Sequence[Finding], error: InternalError | None) -> None:
    report.findings.extend(findings)
    if error is not None:
        report.errors.append(error)


def discover(paths: Iterable[str], settings: Settings) -> Iterator[str]:
    """Python files and notebooks under `paths`. A file named explicitly is
    always checked; excludes apply to what a directory walk finds."""
    for path in paths:
        if os.path.isdir(path):
            yield from _walk_directory(path, settings)
        else:
            yield path


def _walk_directory(top: str, settings: Settings) -> Iterator[str]:
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(top, followlinks=True):
        try:
            stat = os.stat(root)
        except OSError:
            dirs[:] = []
            continue
        if (stat.st_dev, stat.st_ino) in seen:  # a symlink loop
            dirs[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        dirs[:] = sorted(d for d in dirs if not settings.is_excluded(os.path.join(root, d)))
        for name in sorted(files):
            if name.endswith((*PYTHON_SUFFIXES, NOTEBOOK_SUFFIX)):
                full = os.path.join(root, name)
                if not settings.is_excluded(full):
                    yield full

