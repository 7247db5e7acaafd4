"""check_paths: files and directories to findings, in parallel, one file's failure its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from memlint.analysis.project import ModuleFacts, Project, module_name

from memlint.engine.settings import Settings
from memlint.engine.source import RuleCrash, analyse_source, syntax_error
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


class FileResult(NamedTuple):
    """One file's findings (some may wait on the project: `Finding.unless`),
    memlint's own failure on it if any, and the facts it gives the project."""

    findings: list[Finding]
    error: InternalError | None = None
    facts: ModuleFacts | None = None


def check_file(path: str, settings: Settings) -> tuple[list[Finding], InternalError | None]:
    """One file from disk, judged on what it shows; never raises."""
    result = analyse_file(path, settings)
    return Project([result.facts]).settle(result.findings), result.error


def analyse_file(path: str, settings: Settings, root: str | None = None) -> FileResult:
    """One file from disk as part of the project under `root`; never raises."""
    try:
        if path.endswith(NOTEBOOK_SUFFIX):
            from memlint.engine.notebook import check_notebook
            return FileResult(check_notebook(path, settings))  # a notebook is a program of its own
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return FileResult([syntax_error(path, 1, 1,
                                        f"cannot read the file: {error.strerror or error}")])
    except RuleCrash as crash:  # from a notebook's cells
        return FileResult([], InternalError(path, str(crash)))
    try:
        findings, facts = analyse_source(data, path, settings, module=module_name(path, root))
        return FileResult(findings, None, facts)
    except RuleCrash as crash:
        return FileResult([], InternalError(path, str(crash)))
    except Exception as error:  # memlint's own bug: report it for this file, check the rest
        return FileResult([], InternalError(path, f"{type(error).__name__}: {error}"))


def _check_chunk(args: tuple[list[str], Settings, dict[str, str]]) -> list[FileResult]:
    paths, settings, roots = args
    return [analyse_file(p, settings, roots.get(p)) for p in paths]


def check_paths(paths: Iterable[str], settings: Settings | None = None,
                jobs: int | None = None) -> Report:
    """Check files and directories (recursing, honouring excludes) in parallel."""
    settings = settings or Settings()
    roots = dict(discover_with_roots(paths, settings))
    files = sorted(roots)
    report = Report(files=len(files))
    jobs = jobs or os.cpu_count() or 1
    results: list[FileResult] = []
    if jobs <= 1 or len(files) < 4:
        results = [analyse_file(p, settings, roots[p]) for p in files]
    else:
        chunks = [files[i::jobs * 4] for i in range(jobs * 4)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for chunk in pool.map(_check_chunk, [(c, settings, roots) for c in chunks if c]):
                results.extend(chunk)
    # a tree checked whole is the project; files named one by one (a hook, an
    # editor) may be a few of a larger project's
    whole_trees = any(root is not None for root in roots.values())
    project = Project((result.facts for result in results), look_around=not whole_trees)
    report.findings = project.settle(f for result in results for f in result.findings)
    report.errors = sorted((r.error for r in results if r.error is not None), key=lambda e: e.path)
    return report


def discover(paths: Iterable[str], settings: Settings) -> Iterator[str]:
    """Python files and notebooks under `paths`. A file named explicitly is
    always checked; excludes apply to what a directory walk finds."""
    for path, _ in discover_with_roots(paths, settings):
        yield path


def discover_with_roots(paths: Iterable[str], settings: Settings) -> Iterator[tuple[str, str | None]]:
    """`discover`, with the directory each file was found under (its module
    name is relative to it); None for a file named on its own."""
    for path in paths:
        if os.path.isdir(path):
            for found in _walk_directory(path, settings):
                yield found, path
        else:
            yield path, None


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

