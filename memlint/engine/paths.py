"""check_paths: files and directories to findings, in parallel, one file's failure its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from memlint.analysis.project import ModuleFacts, Project, module_name
from memlint.engine.cache import ResultCache, content_digest
from memlint.engine.ignore_files import IgnoreRules
from memlint.engine.settings import Settings
from memlint.engine.source import analyse_source
from memlint.engine.syntax import RuleCrash, syntax_error
from memlint.analysis.files import NotRegular, open_regular
from memlint.finding import Finding, InternalError

PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SUFFIX = ".ipynb"
#: A notebook's file is mostly its outputs (plots inline as base64): its
#: limit is this many times max-file-size, so the limit still bounds the code.
NOTEBOOK_SIZE_FACTOR = 32

@dataclass
class Report:
    """What `check_paths` found: findings sorted by path, line, column, code;
    internal errors (memlint's own failures) kept apart so callers exit 2."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)
    files: int = 0
    #: files answered from the result cache, not analysed again
    cached: int = 0
    #: the digest of the bytes each file was checked on (`content_digest`):
    #: `--fix` changes those bytes only
    digests: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Source:
    """One file to check: a path on disk, or `data` already read (stdin) shown
    as `path`; `root` is the directory it was found under (its module name in
    the project is relative to it), None for a file named on its own."""

    path: str
    data: bytes | None = None
    root: str | None = None


class FileResult(NamedTuple):
    """One file's findings (some may wait on the project: `Finding.unless`),
    memlint's own failure on it if any, and the facts it gives the project."""

    findings: list[Finding]
    error: InternalError | None = None
    facts: ModuleFacts | None = None
    digest: bytes | None = None  #: of the bytes checked; None when none were read


def check_file(path: str, settings: Settings,
               data: bytes | None = None) -> tuple[list[Finding], InternalError | None]:
    """One file, from disk or from `data`, judged on what it shows; never
    raises. Runs in the calling process: `check_paths` is what survives a file
    that kills its process."""
    result = analyse_file(Source(path, data), settings)
    return Project([result.facts]).settle(result.findings), result.error


def analyse_file(source: Source, settings: Settings) -> FileResult:
    """One file as part of a project; never raises."""
    path, data = source.path, source.data
    limit = settings.max_file_size_mb
    if limit is not None and path.endswith(NOTEBOOK_SUFFIX):
        limit *= NOTEBOOK_SIZE_FACTOR
    try:
        if data is None:
            data = read_regular_file(path, limit)
        elif limit is not None and _larger_than(data, limit):
            raise Unreadable(too_large(limit))
        module = module_name(path, source.root)
        if path.endswith(NOTEBOOK_SUFFIX):  # imported here: most runs check no notebook
            from memlint.engine.notebook import analyse_notebook_source
            findings, facts = analyse_notebook_source(data, path, settings, module=module)
        else:
            findings, facts = analyse_source(data, path, settings, module=module)
        return FileResult(findings, None, facts, content_digest(data))
    except Unreadable as problem:
        return FileResult([syntax_error(path, 1, 1, f"cannot read the file: {problem}")])
    except OSError as error:
        return FileResult([syntax_error(path, 1, 1,
                                        f"cannot read the file: {error.strerror or error}")])
    except RuleCrash as crash:
        return FileResult([], InternalError(path, str(crash)))
    except Exception as error:  # memlint's own bug: report it for this file, check the rest
        return FileResult([], InternalError(path, f"{type(error).__name__}: {error}"))


class Unreadable(Exception):
    """A path memlint will not read: not a regular file, or over the size limit."""


def read_regular_file(path: str, max_size_mb: float | None) -> bytes:
    """The file's bytes. Anything but a regular file (a FIFO would block forever,
    /dev/zero never ends) and anything over the size limit raise `Unreadable`;
    opened without blocking and checked on the open file, so a path swapped in
    between cannot slip through."""
    try:
        handle = open_regular(path)
    except NotRegular as error:
        raise Unreadable(error.strerror) from None
    with handle:
        data = handle.read() if max_size_mb is None else handle.read(size_limit(max_size_mb) + 1)
    if max_size_mb is not None and _larger_than(data, max_size_mb):
        raise Unreadable(too_large(max_size_mb))
    return data


def size_limit(max_size_mb: float) -> int:
    """In bytes; a caller reading a stream reads one byte more, to tell "over" from "at"."""
    return int(max_size_mb * 2**20)


def _larger_than(data: bytes, max_size_mb: float) -> bool:
    return len(data) > size_limit(max_size_mb)


def too_large(max_size_mb: float) -> str:
    return (f"it is larger than {max_size_mb:g} MB (max-file-size); exclude it or raise the "
            f"limit with --max-file-size")


def _check_one(source: Source, settings: Settings) -> FileResult:
    return analyse_file(source, settings)


def check_paths(paths: Iterable[str], settings: Settings | None = None,
                jobs: int | None = None) -> Report:
    """Check files and directories (recursing, honouring excludes) in parallel."""
    settings = settings or Settings()
    return check_sources(discover_sources(paths, settings), settings, jobs)


def discover_sources(paths: Iterable[str], settings: Settings,
                     unreadable: list[tuple[str, str]] | None = None) -> list[Source]:
    """`discover`'s files as sources, each with the directory it was found
    under; a folder that cannot be read is added to `unreadable` with why."""
    roots: dict[str, str | None] = {}
    for path in paths:
        if os.path.isdir(path):
            for found in _walk_directory(path, settings, unreadable):
                roots.setdefault(found, path)
        else:
            roots.setdefault(path, None)
    return [Source(path, root=roots[path]) for path in sorted(roots)]


def check_sources(sources: Sequence[Source], settings: Settings,
                  jobs: int | None = None, cache: ResultCache | None = None) -> Report:
    """Check files in supervised worker processes (see `isolation`): a file that
    crashes, hangs or swamps its worker is one MEM000 finding, the others are
    checked as if it were not there. `jobs` is capped at the CPUs and the files.
    With a `cache`, a file whose bytes it knows is not analysed again (the
    project's verdict is settled afresh either way)."""
    report = Report(files=len(sources))
    outcomes: list = [None] * len(sources)  # FileResult, or isolation's Failure
    keys: dict[int, tuple[str, str, bytes]] = {}
    if cache is not None:
        for index, source in enumerate(sources):
            key = _cache_key(source, settings)
            if key is not None:
                keys[index] = key
                outcomes[index] = cache.get(*key)
    missing = [i for i, outcome in enumerate(outcomes) if outcome is None]
    report.cached = len(sources) - len(missing)
    tasks = [Source(sources[i].path, keys[i][2], sources[i].root) if i in keys else sources[i]
             for i in missing]  # the bytes already read travel with the task
    fresh = _check_supervised(tasks, settings, jobs) if tasks else []
    for index, outcome in zip(missing, fresh):
        outcomes[index] = outcome
        if cache is not None and index in keys and isinstance(outcome, FileResult) \
                and outcome.error is None:
            cache.put(*keys[index], outcome)
    findings: list[Finding] = []
    facts: list[ModuleFacts | None] = []
    for source, outcome in zip(sources, outcomes):
        if not isinstance(outcome, FileResult):  # the worker died, hung or hoarded
            findings.append(syntax_error(source.path, 1, 1,
                                         f"cannot check the file: {outcome.reason}"))
            continue
        findings.extend(outcome.findings)
        facts.append(outcome.facts)
        if outcome.digest is not None:
            report.digests[source.path] = outcome.digest
        if outcome.error is not None:
            report.errors.append(outcome.error)
    # a tree checked whole is the project; files named one by one (a hook, an
    # editor) may be a few of a larger project's
    whole_trees = any(source.root is not None for source in sources)
    report.findings = Project(facts, look_around=not whole_trees).settle(findings)
    report.errors.sort(key=lambda e: e.path)
    return report


def _check_supervised(tasks: list[Source], settings: Settings, jobs: int | None) -> list:
    """Each task's FileResult, or the Failure of the worker that had it.
    Imported here: a run answered whole from the cache starts no worker."""
    from memlint.engine.isolation import Budget, run_supervised

    budget = Budget(seconds=settings.file_timeout_s, memory_mb=settings.max_file_memory_mb)
    return run_supervised(partial(_check_one, settings=settings), tasks,
                          useful_jobs(jobs, len(tasks)), budget)


def _cache_key(source: Source, settings: Settings) -> tuple[str, str, bytes] | None:
    """(path, module name, bytes) of a file the cache can answer for; None for
    one that cannot be read here (its worker reports why)."""
    data = source.data
    if data is None:
        limit = settings.max_file_size_mb
        if limit is not None and source.path.endswith(NOTEBOOK_SUFFIX):
            limit *= NOTEBOOK_SIZE_FACTOR
        try:
            data = read_regular_file(source.path, limit)
        except (Unreadable, OSError):
            return None
    return source.path, module_name(source.path, source.root), data


def useful_jobs(jobs: int | None, files: int) -> int:
    """More processes than CPUs or than files only cost start-up and memory."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(jobs or cpus or 1, cpus or 1, files))


def discover(paths: Iterable[str], settings: Settings) -> Iterator[str]:
    """Python files and notebooks under `paths`. A file named explicitly is
    always checked; excludes apply to what a directory walk finds."""
    for path in paths:
        if os.path.isdir(path):
            yield from _walk_directory(path, settings)
        else:
            yield path


def _walk_directory(top: str, settings: Settings,
                    unreadable: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """Python files and notebooks under `top`, skipping excluded paths and,
    with `respect-gitignore`, those that .gitignore or .ignore files name;
    following links (each folder once, so a link loop ends), without
    recursion (a tree may nest thousands deep). A folder that cannot be read
    is added to `unreadable` with why."""
    seen: set[tuple[int, int]] = set()
    folders = [(top, IgnoreRules.for_walk(top) if settings.respect_gitignore else None)]
    while folders:
        folder, rules = folders.pop()
        try:
            status = os.stat(folder)
            if (status.st_dev, status.st_ino) in seen:
                continue
            seen.add((status.st_dev, status.st_ino))
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as error:
            if unreadable is not None:
                unreadable.append((folder, error.strerror or str(error)))
            continue
        if rules is not None:
            rules = rules.inside(folder, {e.name for e in entries if not _is_folder(e)})
        subfolders = []
        for entry in entries:
            if _is_folder(entry):
                if _kept(entry.path, True, settings, rules):
                    subfolders.append((entry.path, rules))
            elif entry.name.endswith((*PYTHON_SUFFIXES, NOTEBOOK_SUFFIX)) \
                    and _kept(entry.path, False, settings, rules):
                yield entry.path
        folders.extend(reversed(subfolders))


def _kept(path: str, is_folder: bool, settings: Settings, rules: IgnoreRules | None) -> bool:
    return not settings.is_excluded(path) and (rules is None or not rules.ignores(path, is_folder))


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
