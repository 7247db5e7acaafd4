"""check_paths: files and directories to findings, in parallel, one file's failure its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from memlint.analysis.project import ModuleFacts, Project, joined_facts, module_name
from memlint.engine.cache import ResultCache, content_digest
from memlint.engine.ignore_files import IgnoreRules
from memlint.engine.projects import MAX_PROJECT_FILES, project_folder
from memlint.engine.settings import Settings
from memlint.engine.source import analyse_source
from memlint.engine.syntax import RuleCrash, syntax_error
from memlint.analysis.files import NotRegular, open_regular
from memlint.finding import Finding, InternalError

if TYPE_CHECKING:  # multiprocessing only for a run that starts workers
    from memlint.engine.isolation import Budget, Workers

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
    """One file to check: a path on disk, or `data` already read (stdin, an
    editor's text) shown as `path`; `root` is the folder named on the command
    line it was found under (None for a file named on its own); `project`
    the root of the project it belongs to (`engine/projects.py`), found when
    not given; `LONE` for text with no project around it (stdin)."""

    path: str
    data: bytes | None = None
    root: str | None = None
    project: str | None = None


#: `Source.project` of text with no tree around it: stdin without a file name
LONE = ""


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
    return Project([result.facts], complete=False).settle(
        result.findings, settings.shows_preview), result.error


def analyse_file(source: Source, settings: Settings, noqa: bool = True) -> FileResult:
    """One file as part of its project (named by its path under
    `source.project`); never raises."""
    path, data = source.path, source.data
    limit = settings.max_file_size_mb
    if limit is not None and path.endswith(NOTEBOOK_SUFFIX):
        limit *= NOTEBOOK_SIZE_FACTOR
    try:
        if data is None:
            data = read_regular_file(path, limit)
        elif limit is not None and _larger_than(data, limit):
            raise Unreadable(too_large(limit))
        module = module_name(path, source.project or None)
        if path.endswith(NOTEBOOK_SUFFIX):  # imported here: most runs check no notebook
            from memlint.engine.notebook import analyse_notebook_source
            findings, facts = analyse_notebook_source(data, path, settings, module=module)
        else:
            findings, facts = analyse_source(data, path, settings, noqa, module=module)
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


def _check_one(source: Source, settings: Settings, noqa: bool = True) -> FileResult:
    return analyse_file(source, settings, noqa)


def check_paths(paths: Iterable[str], settings: Settings | None = None,
                jobs: int | None = None) -> Report:
    """Check files and directories (recursing, honouring excludes) in parallel."""
    settings = settings or Settings()
    return check_sources(discover_sources(paths, settings), settings, jobs)


def discover_sources(paths: Iterable[str], settings: Settings,
                     unreadable: list[tuple[str, str]] | None = None) -> list[Source]:
    """`discover`'s files as sources, each with the directory it was found
    under and its project; a folder that cannot be read is added to
    `unreadable` with why."""
    roots: dict[str, str | None] = {}
    for path in paths:
        if os.path.isdir(path):
            for found in _walk_directory(path, settings, unreadable):
                roots.setdefault(found, path)
        else:
            roots.setdefault(path, None)
    projects: dict[tuple[str, str | None], str] = {}  # by (folder, found under): one look each

    def project_of(path: str) -> str:
        key = (os.path.dirname(path), roots[path])
        if key not in projects:
            projects[key] = project_folder(path, settings, roots[path])
        return projects[key]

    return [Source(path, root=roots[path], project=project_of(path)) for path in sorted(roots)]


def check_sources(sources: Sequence[Source], settings: Settings,
                  jobs: int | None = None, cache: ResultCache | None = None,
                  noqa: bool = True, kept: Workers | None = None) -> Report:
    """Check files in supervised worker processes (see `isolation`): a file that
    crashes, hangs or swamps its worker is one MEM000 finding, the others are
    checked as if it were not there. `jobs` is capped at the CPUs and the files.
    Each file is judged with the facts of its whole project: the project's
    other files are read too (facts only: their findings are not reported)
    unless the run checks them anyway. With a `cache`, a file whose bytes it
    knows is not analysed again (the project's verdict is settled afresh
    either way). `noqa=False` keeps what `# noqa` comments hide (flake8's
    `--disable-noqa`; the checked files then bypass the cache). `kept`:
    workers that live across runs (the editor server's, `check_keeping_pieces`)."""
    sources = [s if s.project is not None else replace(s, project=_project_of(s, settings))
               for s in sources]
    projects = _projects(sources, settings)
    others = [Source(path, project=root) for root, (_, rest) in projects.items() for path in rest]
    report = Report(files=len(sources))
    outcomes = _outcomes([*sources, *others], settings, jobs, cache, len(sources), noqa, report,
                         kept)
    settled: list[Finding] = []
    findings: dict[str, list[Finding]] = {}
    facts: dict[str, list[ModuleFacts | None]] = {}
    for index, (source, outcome) in enumerate(zip([*sources, *others], outcomes)):
        checked = index < len(sources)
        if not isinstance(outcome, FileResult):  # the worker died, hung or hoarded
            if checked:
                settled.append(syntax_error(source.path, 1, 1,
                                            f"cannot check the file: {outcome.reason}"))
            continue
        project = source.project or LONE
        if project == LONE:  # text with no tree around it: a project of its own
            settled.extend(Project([outcome.facts], complete=False).settle(
                outcome.findings, settings.shows_preview))
        else:
            facts.setdefault(project, []).append(outcome.facts)
            if checked:
                findings.setdefault(project, []).extend(outcome.findings)
        if not checked:
            continue
        if outcome.digest is not None:
            report.digests[source.path] = outcome.digest
        if outcome.error is not None:
            report.errors.append(outcome.error)
    for root, found in findings.items():
        settled.extend(Project(facts[root], complete=projects[root][0]).settle(
            found, settings.shows_preview))
    report.findings = sorted(settled)
    report.errors.sort(key=lambda e: e.path)
    return report


def check_in_project(path: str, data: bytes | None, settings: Settings,
                     noqa: bool = True, kept: Workers | None = None) -> list[Finding]:
    """One file as `memlint check FILE` checks it, for a front end that
    checks one file at a time (an editor, flake8): the rest of its project
    read for its facts, through the result cache in the project root where
    memlint may keep one. An internal error is raised as `RuleCrash`."""
    from memlint.engine.cache import project_cache

    report = check_sources([Source(path, data)], settings, jobs=1,
                           cache=project_cache(settings), noqa=noqa, kept=kept)
    if report.errors:
        raise RuleCrash(report.errors[0].message)
    return [f for f in report.findings if f.path == path]


def _project_of(source: Source, settings: Settings) -> str:
    """The project of a file given without one: text named `-` or shown
    under a path whose folder does not exist has none (`LONE`)."""
    folder = os.path.dirname(os.path.abspath(source.path))
    if source.data is not None and (source.path in STDIN_NAMES or not os.path.isdir(folder)):
        return LONE
    return project_folder(source.path, settings, source.root)


#: what stdin is called when no file name is given for it
STDIN_NAMES = ("-", "<stdin>", "stdin")


def _projects(sources: Sequence[Source], settings: Settings
              ) -> dict[str, tuple[bool, list[str]]]:
    """Per project of the checked files: whether all of it is known, and its
    files that the run does not check. A project checked from its root down
    is all there; another is walked as the run would walk its root, up to
    `MAX_PROJECT_FILES` (past it, taken as unknown)."""
    found: dict[str, tuple[bool, list[str]]] = {}
    walked = {os.path.abspath(s.root) for s in sources if s.root is not None}
    for root in dict.fromkeys(s.project for s in sources):
        if root == LONE or root is None:  # (None: never, once `check_sources` found each)
            continue
        if root in walked:
            found[root] = (True, [])
            continue
        checked = {os.path.abspath(s.path) for s in sources if s.project == root}
        rest: list[str] = []
        for path in _walk_directory(root, settings):
            if path not in checked:
                rest.append(path)
                if len(rest) > MAX_PROJECT_FILES:
                    break
        found[root] = (True, rest) if len(rest) <= MAX_PROJECT_FILES else (False, [])
    return found


def _outcomes(sources: list[Source], settings: Settings, jobs: int | None,
              cache: ResultCache | None, checked: int, noqa: bool, report: Report,
              kept: Workers | None = None) -> list:
    """Each source's FileResult (from the cache where it knows the bytes), or
    isolation's Failure for a file whose worker died, hung or hoarded."""
    outcomes: list = [None] * len(sources)
    stamps = {index: _stamp(source) for index, source in enumerate(sources) if index >= checked}
    for index, stamp in stamps.items():
        known = _KNOWN.get((sources[index].path, sources[index].project))
        if stamp is not None and known is not None and known[0] == stamp and known[1] == settings:
            outcomes[index] = known[2]
    keys: dict[int, tuple[str, str, bytes]] = {}
    if cache is not None:
        for index, source in enumerate(sources):
            if (not noqa and index < checked) or outcomes[index] is not None:
                continue
            key = _cache_key(source, settings)
            if key is not None:
                keys[index] = key
                outcomes[index] = cache.get(*key)
    missing = [i for i, outcome in enumerate(outcomes) if outcome is None]
    report.cached = sum(1 for i in range(checked) if outcomes[i] is not None)
    tasks = [replace(sources[i], data=keys[i][2]) if i in keys else sources[i]
             for i in missing]  # the bytes already read travel with the task
    fresh = _check_supervised(tasks, settings, jobs, noqa, kept) if tasks else []
    for index, outcome in zip(missing, fresh):
        outcomes[index] = outcome
        if cache is not None and index in keys and isinstance(outcome, FileResult) \
                and outcome.error is None and (noqa or index >= checked):
            cache.put(*keys[index], outcome)
    for index, stamp in stamps.items():
        if stamp is not None and isinstance(outcomes[index], FileResult):
            _KNOWN[sources[index].path, sources[index].project] = (stamp, settings,
                                                                   outcomes[index])
    return outcomes


#: the project files a long-lived process (flake8, the editor server) read
#: last, by (path, project): their size and time, the settings, the result;
#: each file checked alone reads the rest of its project again
_KNOWN: dict[tuple[str, str | None], tuple[tuple[int, int], Settings, FileResult]] = {}


def _stamp(source: Source) -> tuple[int, int] | None:
    """A file's size and modification time, None for text given or unreadable."""
    if source.data is not None:
        return None
    try:
        status = os.stat(source.path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


def _check_supervised(tasks: list[Source], settings: Settings, jobs: int | None,
                      noqa: bool = True, kept: Workers | None = None) -> list:
    """Each task's FileResult, or the Failure of the worker that had it.
    Imported here: a run answered whole from the cache starts no worker. A
    daemonic process (flake8 -j runs plugins in a pool of them) may start
    none: there each file is checked in the process itself."""
    import multiprocessing

    check = partial(_check_one, settings=settings, noqa=noqa)
    if multiprocessing.current_process().daemon:
        return [check(task) for task in tasks]
    from memlint.engine.isolation import Budget, run_supervised

    budget = Budget(seconds=settings.file_timeout_s, memory_mb=settings.max_file_memory_mb)
    jobs = useful_jobs(jobs, len(tasks))
    if kept is not None:  # its workers' check takes the settings with each task
        return _check_in_shares(tasks, settings, noqa, jobs, budget, kept)
    return run_supervised(check, tasks, jobs, budget)


#: the kept workers (the editor server's) one file's rules are split over,
#: where there are CPUs for them: each walks its share of the rules
#: (`RuleEntry.walk_cost`) at the same time as the others, and their results
#: are joined. An edit of a 300 KB file took the server's path 0.70 s in one
#: worker, 0.56 s in two, 0.46 s in three, on the GPU machine's 16 CPUs
#: (`bench/soak_phases.py --shares N`); each worker keeps ~80 MiB.
KEPT_SHARES = 3


def _check_in_shares(tasks: list[Source], settings: Settings, noqa: bool, jobs: int,
                     budget: Budget, kept: Workers) -> list:
    """Each task's FileResult (or Failure), its rules walked in
    `KEPT_SHARES` kept workers at once where there are CPUs for them."""
    from memlint.engine.isolation import run_supervised
    from memlint.rules.catalogue import walk_shares

    count = useful_jobs(KEPT_SHARES, KEPT_SHARES)
    shares = [None] if count == 1 else walk_shares(count)
    split = [(task, replace(settings, walked=share), noqa) for task in tasks for share in shares]
    outcomes = run_supervised(kept.check, split, useful_jobs(jobs * len(shares), len(split)),
                              budget, kept)
    return [_joined(outcomes[at:at + len(shares)]) for at in range(0, len(split), len(shares))]


def _joined(outcomes: list) -> object:
    """One file's result from those of its shares: the first failure, else
    every share's findings (a MEM000 every share reports, once) and facts."""
    failed = [outcome for outcome in outcomes if not isinstance(outcome, FileResult)]
    if failed or len(outcomes) == 1:
        return failed[0] if failed else outcomes[0]
    findings: list[Finding] = []
    for outcome in outcomes:
        findings += [finding for finding in outcome.findings if finding not in findings]
    error = next((o.error for o in outcomes if o.error is not None), None)
    return FileResult(findings, error, joined_facts(o.facts for o in outcomes),
                      outcomes[0].digest)


def check_keeping_pieces(task: tuple[Source, Settings, bool]) -> FileResult:
    """The check of a worker kept across runs (`isolation.Workers`): the
    top-level statements of the text it is given are parsed here and kept,
    so the next version of the text parses only what an edit changed
    (`engine/chunks.py`); in the worker, so that a statement that crashes
    libcst's parser costs the worker, not the editor's server.

    The kept trees are a million objects that live as long as the worker:
    the cyclic collector runs nowhere in the check, and what is kept after it
    is frozen out of the collector's sight. A full collection that scans them
    took 0.1-0.3 s, every few edits, inside the time an editor waits."""
    import gc

    from memlint.engine.parsed import collector_paused

    source, settings, noqa = task
    with collector_paused():
        if source.data is not None and not source.path.endswith(NOTEBOOK_SUFFIX):
            from memlint.engine.chunks import PIECES
            from memlint.engine.source import Undecodable, decode

            try:
                PIECES.prepare(decode(source.data))
            except Undecodable:
                pass  # `analyse_file` reports it
        result = _check_one(source, settings, noqa)
        gc.freeze()  # before the collector is back: it finds nothing young to scan
    return result


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
    return source.path, module_name(source.path, source.project or None), data


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
