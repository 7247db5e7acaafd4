"""The `memlint` command: `check`, `rules`, `rule CODE`, and `verify` (handed over).

Exit status of `check`: 0 clean, 1 findings, 2 a usage or configuration
error, a path that does not exist, or an internal error on some file (the
other files are still checked and reported). `--exit-zero` turns 1 into 0 only.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from memlint.version import __version__
from memlint.analysis.source_lines import split_lines
from memlint.engine.config import (BUDGETS, NOTHING_SELECTED, ConfigError, apply_overrides, budget,
                                   common_parent, describe_settings, find_pyproject,
                                   load_settings, parse_codes)
from memlint.engine import Source, check_sources, discover_sources, size_limit
from memlint.engine.paths import useful_jobs
from memlint.engine.cache import ResultCache, content_digest, default_cache_dir, folder_problem
from memlint.engine.cache import clean as clean_cache
from memlint.engine.source import Undecodable, decode
from memlint.analysis.files import read_regular
from memlint.cli.reporters import (FORMATS, closing_line, display_path, full_text,
                                   statistics)
from memlint.cli.reporters import text as concise_text
from memlint.cli.baseline import load_baseline, without_known
from memlint.rules import NAMES_BY_CODE, how_it_runs
from memlint.engine.settings import Settings

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_MACHINE_FORMATS = ("json", "sarif", "gitlab", "junit")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line, not a usage block."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _code_list(ignoring: bool = False):
    """Codes for --select and friends; an empty selection is a mistake, an empty
    ignore list clears the config's."""
    def parse(text: str) -> list[str]:
        try:
            codes = parse_codes(text, "", ignoring=ignoring)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix(": ")) from None
        if not codes and not ignoring:
            raise argparse.ArgumentTypeError(NOTHING_SELECTED)
        return codes
    return parse


def _budget(unit: str):
    def parse(text: str) -> float | None:
        try:
            return budget(float(text), "", unit)
        except (ValueError, ConfigError):
            raise argparse.ArgumentTypeError(f"expected a number of {unit} (0: no limit), "
                                             f"got {text!r}") from None
    return parse


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of processes (0 = one per CPU), "
                                         f"got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memlint", description="Find GPU-memory anti-patterns in PyTorch code.")
    parser.add_argument("--version", action="version", version=f"memlint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = commands.add_parser("check", help="check files, directories, notebooks or stdin",
                                description="Check Python files, directories (recursively) "
                                            "and notebooks; '-' reads stdin.")
    check.add_argument("paths", nargs="*", metavar="PATH", default=None,
                       help="files, directories, or - for stdin (default: .)")
    check.add_argument("--select", type=_code_list(), metavar="CODES",
                       help="comma-separated codes or prefixes to check (replaces the config's)")
    check.add_argument("--ignore", type=_code_list(ignoring=True), metavar="CODES",
                       help="comma-separated codes or prefixes to skip (replaces the config's)")
    check.add_argument("--extend-select", type=_code_list(), metavar="CODES",
                       help="codes or prefixes to check in addition")
    check.add_argument("--extend-ignore", type=_code_list(ignoring=True), metavar="CODES",
                       help="codes or prefixes to skip in addition")
    check.add_argument("--preview", action="store_true",
                       help="also run the rules in preview, those not yet precise enough on "
                            "unseen code to run by default (memlint rules lists them)")
    check.add_argument("--extend-exclude", type=lambda s: [p for p in s.split(",") if p],
                       metavar="PATTERNS", help="comma-separated glob patterns to exclude "
                                                "in addition")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply excludes to files named on the command line too "
                            "(pre-commit passes every staged file by name)")
    check.add_argument("--respect-gitignore", action="store_true", default=None,
                       help="skip what .gitignore and .ignore files name in a directory walk "
                            "(the default; [tool.memlint] respect-gitignore sets it too)")
    check.add_argument("--no-respect-gitignore", dest="respect_gitignore",
                       action="store_false", help="check ignored files too")
    check.add_argument("--output-format", "--format", dest="format", choices=tuple(FORMATS),
                       default="text", help="output format (default: text)")
    check.add_argument("--fail-on", choices=("error", "warning", "note"), default=None,
                       help="the least severity that makes the exit status 1 (default: note, "
                            "every finding; [tool.memlint] fail-on sets it too)")
    check.add_argument("--show-source", action="store_true", default=None,
                       help="show the flagged code under each finding (the default on a "
                            "terminal, for the text format)")
    check.add_argument("--no-show-source", dest="show_source", action="store_false",
                       help="one line per finding, even on a terminal")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                       help="colour the text output: auto (a terminal, unless NO_COLOR is "
                            "set; FORCE_COLOR forces it), always, never")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print the findings only: no summary line")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="also say on stderr which configuration was used and how many "
                            "files were checked, from the cache, in how long")
    check.add_argument("--show-files", action="store_true",
                       help="list the files that would be checked, and check nothing")
    check.add_argument("--show-settings", action="store_true",
                       help="print the settings in force (configuration file and flags "
                            "resolved), and check nothing")
    check.add_argument("-o", "--output-file", metavar="PATH",
                       help="write the report to this file instead of stdout")
    check.add_argument("--exit-zero", action="store_true",
                       help="exit 0 even when there are findings (errors still exit 2)")
    check.add_argument("--statistics", action="store_true",
                       help="count the findings per code after the findings")
    check.add_argument("-j", "--jobs", type=_jobs, default=0, metavar="N",
                       help="processes to check with (default 0: one per CPU)")
    check.add_argument("--max-file-size", type=_budget("MB"), default=argparse.SUPPRESS,
                       metavar="MB", help="a larger file is one MEM000 finding, not read "
                                          "(default 2; 0: no limit)")
    check.add_argument("--file-timeout", type=_budget("seconds"), default=argparse.SUPPRESS,
                       metavar="SECONDS", help="stop checking a file after this long: one MEM000 "
                                               "finding (default 60; 0: no limit)")
    check.add_argument("--max-file-memory", type=_budget("MB"), default=argparse.SUPPRESS,
                       metavar="MB", help="stop checking a file that needs more memory: one "
                                          "MEM000 finding (default 2048; 0: no limit)")
    check.add_argument("--fix", action="store_true",
                       help="apply the safe fixes (those that cannot change what the program "
                            "computes); with '-' the fixed source goes to stdout")
    check.add_argument("--unsafe-fixes", action="store_true",
                       help="with --fix or --diff, also apply the fixes that might change what "
                            "the program does (review them)")
    check.add_argument("--diff", action="store_true",
                       help="print a unified diff of what --fix would change and write nothing "
                            "(exit 1 when there is a change)")
    check.add_argument("--baseline", metavar="FILE",
                       help="report only findings that FILE (written by --format json -o "
                            "FILE) does not hold, so only new ones fail the run")
    check.add_argument("--add-noqa", action="store_true",
                       help="add a '# noqa: CODE' comment for every finding (to adopt memlint "
                            "on a large codebase), and report nothing else")
    check.add_argument("--stdin-filename", metavar="PATH",
                       help="the name of the file read from stdin: shown in findings, "
                            "used to find its config and per-file-ignores; a name ending in "
                            ".ipynb reads a notebook")
    check.add_argument("--no-cache", action="store_true",
                       help="analyse every file again, neither reading nor writing the cache")
    check.add_argument("--cache-dir", metavar="PATH", default=os.environ.get("MEMLINT_CACHE_DIR"),
                       help="where results are cached (default: .memlint_cache in the project "
                            "root; also MEMLINT_CACHE_DIR)")
    config = check.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="PYPROJECT",
                        help="read [tool.memlint] from this file instead of searching for one")
    config.add_argument("--no-config", action="store_true",
                        help="ignore every pyproject.toml; use the defaults and the flags")

    clean = commands.add_parser("clean", help="remove the result cache",
                                description="Remove the result cache (.memlint_cache in the "
                                            "project root of the current directory, or "
                                            "--cache-dir).")
    clean.add_argument("--cache-dir", metavar="PATH", default=os.environ.get("MEMLINT_CACHE_DIR"),
                       help="the cache to remove (default: .memlint_cache in the project root)")
    commands.add_parser("rules", help="list the rules: code, name, summary",
                        description="List the rules: code, name, summary.")
    rule = commands.add_parser("rule", help="print a rule's reference page",
                               description="Print a rule's reference page.")
    rule.add_argument("code", metavar="CODE", help="a code (MEM003) or a name "
                                                   "(tensor-history-kept)")
    commands.add_parser("server", help="run the Language Server editors talk to (stdio; "
                                       "needs the extra 'server')",
                        description="Run memlint's Language Server over stdin/stdout: "
                                    "diagnostics on open and after edits and saves, quick "
                                    "fixes, # noqa actions. Needs pygls: pip install "
                                    "'pygls>=2,<3'.")
    commands.add_parser("verify", help="run a script on a GPU and measure each finding "
                                       "(memlint verify --help)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verify"]:  # its own parser, and `--` passes arguments to the script
        from memlint.verify.cli import main as verify_main
        return verify_main(argv[1:])
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        if options.command == "check":
            return _check(options)
        if options.command == "clean":
            return _clean(options)
        if options.command == "rules":
            return _list_rules()
        if options.command == "rule":
            return _show_rule(options.code)
        if options.command == "server":
            from memlint.cli.server import main as serve
            return serve()
    except ConfigError as error:
        print(f"memlint: {error}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `memlint check . | head`
        sys.stderr.close()
        return EXIT_CLEAN
    except KeyboardInterrupt:
        return 130
    parser.print_help(sys.stderr)
    return EXIT_ERROR


# -- check -----------------------------------------------------------------------

def _check(options: argparse.Namespace) -> int:
    started = time.perf_counter()
    paths = options.paths or ["."]
    pyproject = _pyproject(options, paths)
    settings = _settings(options, pyproject)
    if options.show_settings:
        _write(describe_settings(settings, pyproject))
        return EXIT_CLEAN
    sources, problems = _sources(paths, options, settings)
    if options.show_files:
        _write("".join(f"{display_path(source.path)}\n" for source in sources))
        return EXIT_ERROR if problems else EXIT_CLEAN
    stdin = _stdin(options, settings) if "-" in paths else None
    if stdin is not None and stdin.checked:
        sources.append(stdin.source)
    cache = None if options.no_cache else _cache(options.cache_dir, settings)
    known = load_baseline(options.baseline) if options.baseline else None
    output = _output_file(options.output_file) if options.output_file else None
    try:
        report = check_sources(sources, settings, jobs=options.jobs or None, cache=cache)
        if options.verbose:
            _say_what_was_done(pyproject, report, options.jobs, started)
        if options.add_noqa:
            return _add_noqa(report, sources)
        status = _finish(options, settings, report, sources, stdin, problems, cache, output,
                         known)
        if output is not None:
            output.commit()
        return status
    finally:
        if output is not None:
            output.discard()


def _sources(paths: list[str], options: argparse.Namespace, settings: Settings):
    """The files to check, and how many named paths could not be (each said in one line)."""
    missing = [p for p in paths if p != "-" and not os.path.lexists(p)]
    for path in missing:
        _say_problem(path, "no such file or directory")
    on_disk = [p for p in paths if p != "-" and p not in missing]
    if options.force_exclude:
        on_disk = [p for p in on_disk if not settings.is_excluded(p)]
    unreadable: list[tuple[str, str]] = []
    sources = discover_sources(on_disk, settings, unreadable)
    for folder, reason in unreadable:
        _say_problem(folder, f"cannot read the folder: {reason}")
    if not sources and on_disk and "-" not in paths:
        print("memlint: warning: no Python files found under the given paths", file=sys.stderr)
    return sources, len(missing) + len(unreadable)


def _say_problem(path: str, reason: str) -> None:
    print(f"memlint: {display_path(path)}: {reason}", file=sys.stderr)


def _finish(options, settings: Settings, report, sources: list[Source], stdin,
            problems: int, cache, output, known) -> int:
    """Fix or diff, then report; the exit status."""
    unsafe = options.unsafe_fixes

    def check_again(fixed_sources: list[Source]):
        return check_sources(fixed_sources, settings, jobs=options.jobs or None, cache=cache)
    if options.diff:
        fixed, after, _, unfixable = _fix_until_settled(report, sources, settings, unsafe,
                                                        check_again, write=False)
        _diff(sources, after, fixed, output.write if output is not None else _write)
        return EXIT_ERROR if problems or unfixable else EXIT_FINDINGS if fixed else EXIT_CLEAN
    fixed = unfixable = 0
    if options.fix:
        fixed, sources, report, unfixable = _fix_until_settled(report, sources, settings,
                                                               unsafe, check_again)
    if known is not None:
        report = without_known(report, known)
    for error in report.errors:
        print(f"memlint: internal error while checking {display_path(error.path)}: "
              f"{error.message} (a memlint bug; the other files were checked)", file=sys.stderr)
    if report.errors or problems or unfixable:
        status = EXIT_ERROR
    elif not options.exit_zero and any(settings.fails(f.severity) for f in report.findings):
        status = EXIT_FINDINGS
    else:
        status = EXIT_CLEAN
    fixed_input = _fixed_input(stdin, sources) if options.fix and stdin is not None else None
    try:
        _report(options, report, sources, fixed_input, fixed, output)
    except BrokenPipeError:  # `memlint check . | head`: the findings still fail the run
        _silence_stdout()
    except OSError as error:  # a full disk
        _silence_stdout()
        raise ConfigError(f"cannot write the report: {error.strerror or error}") from None
    return status


def _report(options, report, sources: list[Source], fixed_input: bytes | None, fixed: int,
            output) -> None:
    """The findings, the summary and the statistics, where they belong; with
    `--fix -`, stdout is `fixed_input` and nothing else."""
    to_stderr = fixed_input is not None
    if fixed_input is not None:
        _write_bytes(fixed_input)
    say = output.write if output is not None else _say_stderr if to_stderr else _write
    terminal = output is None and not to_stderr and sys.stdout.isatty()
    show_source = terminal if options.show_source is None else options.show_source
    if options.format == "text" and show_source:
        say(full_text(report, _lines_by_source(sources), _colour(options.color, terminal)))
    elif options.format == "text":
        say(concise_text(report, __version__, _colour(options.color, terminal)))
    else:
        say(FORMATS[options.format](report, __version__))
    if options.format == "text" and not options.quiet and sources:
        say(closing_line(report, fixed, options.unsafe_fixes))
    if options.statistics and report.findings:
        counts = statistics(report)
        if options.format in _MACHINE_FORMATS or to_stderr:  # stdout: one document
            _say_stderr(counts)
        else:
            _write(counts)


def _fixed_input(stdin: _Stdin, sources: list[Source]) -> bytes:
    """What `--fix -` prints: the whole input, fixed, or as it came when
    nothing was fixed (stdin not checked, over the size limit, clean)."""
    checked = sources[-1] if stdin.checked else stdin.source
    return stdin.whole if checked is stdin.source else checked.data or b""


def _say_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _silence_stdout() -> None:
    """After a broken pipe: nothing more reaches stdout, and Python's last
    flush at exit must not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _cache(folder: str | None, settings: Settings) -> ResultCache:
    """The result cache, in a folder that is memlint's to fill: never a project."""
    location = folder or default_cache_dir(settings)
    problem = folder_problem(location)
    if problem is not None:
        raise ConfigError(f"cache folder {display_path(str(location))}: {problem} "
                          f"(or --no-cache)")
    return ResultCache(location, settings)


def _clean(options: argparse.Namespace) -> int:
    folder = options.cache_dir or default_cache_dir(load_settings(find_pyproject(os.getcwd())))
    try:
        removed = clean_cache(folder)
    except ValueError as problem:
        raise ConfigError(f"{display_path(str(folder))}: not removed: {problem}") from None
    if removed:
        _write(f"Removed {display_path(str(folder))}\n")
    else:
        _write(f"No memlint cache at {display_path(str(folder))}\n")
    return EXIT_CLEAN


def _colour(choice: str, terminal: bool) -> bool:
    """`--color`, with the conventions of NO_COLOR and FORCE_COLOR for `auto`."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or terminal


def _lines_by_source(sources: list[Source]):
    """A finding's lines for its code frame: the text that was checked (stdin's
    included), a notebook's cell; None when it cannot be read."""
    data = {source.path: source.data for source in sources}
    cache: dict[str, list | None] = {}

    def lines_of(finding) -> list[str] | None:
        if finding.path not in cache:
            try:
                raw = data.get(finding.path) or read_regular(finding.path)
                cache[finding.path] = _text_lines(finding.path, decode(raw))
            except (OSError, ValueError):
                cache[finding.path] = None
        lines = cache[finding.path]
        if lines is not None and finding.cell is not None:
            return lines[finding.cell - 1] if finding.cell <= len(lines) else None
        return lines
    return lines_of


def _text_lines(path: str, text: str):
    """The file's lines; for a notebook, each cell's lines (indexed by cell)."""
    if not path.endswith(".ipynb"):
        return split_lines(text)
    import json

    from memlint.engine.notebook import cell_text
    return [cell_text(cell).splitlines(keepends=True) for cell in json.loads(text)["cells"]]


def _output_file(path: str) -> _ReportFile:
    """`-o PATH`: the report goes there (UTF-8), whole, at the end."""
    try:
        return _ReportFile(path)
    except OSError as error:
        raise ConfigError(f"-o {path}: cannot write it: {error.strerror or error}") from None


class _ReportFile:
    """A report written beside its file and renamed over it by `commit`, so
    that a run that fails or is interrupted leaves the previous report whole.
    What is not a regular file (`/dev/stdout`, a pipe) is written directly."""

    def __init__(self, path: str) -> None:
        self.target = os.path.realpath(path)  # a link keeps pointing at the report
        self.temporary = None
        if os.path.exists(self.target) and not os.path.isfile(self.target):
            self.stream = open(self.target, "w", encoding="utf-8", newline="\n")
            return
        import tempfile  # start-up: only -o needs it
        handle, self.temporary = tempfile.mkstemp(prefix=".memlint-report-", suffix=".tmp",
                                                  dir=os.path.dirname(self.target))
        self.stream = open(handle, "w", encoding="utf-8", newline="\n")

    def write(self, text: str) -> None:
        self.stream.write(text)

    def commit(self) -> None:
        try:
            self.stream.close()
            if self.temporary is not None:
                os.chmod(self.temporary, _mode_for(self.target))
                os.replace(self.temporary, self.target)
                self.temporary = None
        except OSError as error:
            raise ConfigError(f"-o {display_path(self.target)}: cannot write the report: "
                              f"{error.strerror or error}") from None

    def discard(self) -> None:
        """Nothing happens to the report's file unless `commit` ran."""
        if not self.stream.closed:
            try:
                self.stream.close()
            except OSError:
                pass
        if self.temporary is not None:
            os.unlink(self.temporary)
            self.temporary = None


def _mode_for(path: str) -> int:
    """An existing file's mode, else what `open` would give a new one."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fixable(report, unsafe: bool):
    """The findings whose fixes `--fix` applies, by file."""
    from memlint.engine.fixes import wanted  # start-up: like every fixing step, on demand
    by_path: dict[str, list] = {}
    for finding in report.findings:
        if wanted(finding, unsafe):
            by_path.setdefault(finding.path, []).append(finding)
    return by_path


class _NotFixed(Exception):
    """Why a file keeps its text, in one line; `error` when memlint could not
    even read it (exit 2), not only chose to leave it (its findings stand)."""

    def __init__(self, reason: str, error: bool = False) -> None:
        super().__init__(reason)
        self.error = error


def _fixed_text(source: Source, report, findings, settings: Settings, unsafe: bool):
    """The bytes that were checked, their text, and the text with the fixes applied."""
    from memlint.engine.fixes import fix_text
    from memlint.engine.notebook import check_notebook_source, fix_notebook
    from memlint.engine.source import check_source

    original = _checked_bytes(source, report)
    try:
        text = decode(original)
    except Undecodable as error:
        raise _NotFixed(f"cannot decode it{error.reason}", error=True) from None
    if source.path.endswith(".ipynb"):
        result = fix_notebook(text, findings, unsafe,
                              lambda fixed: check_notebook_source(fixed, source.path, settings))
    else:
        result = fix_text(text, findings, unsafe,
                          lambda fixed: check_source(fixed, source.path, settings))
    return original, text, result


def _checked_bytes(source: Source, report) -> bytes:
    """The bytes the findings were computed on: stdin's (or a fixed text not
    written), or the file's as long as it has not changed since (fixes placed
    on other bytes would undo an edit saved meanwhile)."""
    if source.data is not None:
        return source.data
    try:
        data = read_regular(source.path)
    except OSError as error:
        raise _NotFixed(f"cannot read it: {error.strerror or error}", error=True) from None
    if content_digest(data) != report.digests.get(source.path):
        raise _NotFixed("it changed on disk after it was checked")
    return data


#: `--fix` rounds (fix, check again) before giving up on reaching a fixed point
MAX_FIX_ROUNDS = 10


def _fix_until_settled(report, sources: list[Source], settings: Settings, unsafe: bool,
                       check, write: bool = True):
    """Fix, check again, fix what the fixes exposed (a `.detach()` leaves a
    tensor on the GPU for MEM010 to flag), until no fix is left to apply, as
    ruff does; each later round only touches the files the last one changed.
    Without `write` the fixed text stays in the sources (`--diff`). Returns
    the findings fixed, the sources, the report of what is left, and how many
    files could not even be read."""
    fixed, unreadable, changed = 0, 0, None
    for _ in range(MAX_FIX_ROUNDS):
        count, sources, changed, failed = _fix(report, sources, settings, unsafe, changed, write)
        unreadable += failed
        if not count:
            return fixed, sources, report, unreadable
        fixed += count
        report = check(sources)
    if any(path in (changed or ()) for path in _fixable(report, unsafe)):
        print(f"memlint: fixes did not settle after {MAX_FIX_ROUNDS} rounds (each exposed "
              f"another); review the changes and run --fix again", file=sys.stderr)
    return fixed, sources, report, unreadable


def _fix(report, sources: list[Source], settings: Settings, unsafe: bool,
         only: set[str] | None, write: bool):
    """Apply the fixes, file by file (only to the paths in `only`, if given); a
    file that cannot be fixed keeps its text and says why in one line. stdin's
    source, and every source without `write`, gets its fixed bytes instead.
    Returns how many findings were fixed, the sources, the paths changed, and
    how many files could not even be read."""
    by_path = _fixable(report, unsafe)
    fixed, unreadable, updated, changed = 0, 0, [], set()
    for source in sources:
        findings = by_path.get(source.path) if only is None or source.path in only else None
        if findings:
            try:
                source, count = _fix_one(source, report, findings, settings, unsafe, write)
            except _NotFixed as reason:
                _say_problem(source.path, f"not fixed: {reason}")
                unreadable += reason.error
            else:
                if count:
                    changed.add(source.path)
                    fixed += count
        updated.append(source)
    return fixed, updated, changed, unreadable


def _fix_one(source: Source, report, findings, settings: Settings, unsafe: bool, write: bool):
    """One file fixed: (the source to check again, how many findings were fixed)."""
    from memlint.engine.fixes import FileChanged, fixed_bytes, write_fixed

    original, _, result = _fixed_text(source, report, findings, settings, unsafe)
    if result.refused:
        _say_problem(source.path, f"not fixed: {result.refused}")
    if not result.changed:
        return source, 0
    if source.data is not None or not write:
        return replace(source, data=fixed_bytes(original, result.text)), len(result.fixed)
    try:
        write_fixed(source.path, original, result.text)
    except FileChanged:
        raise _NotFixed("it changed on disk after it was checked") from None
    except OSError as error:
        raise _NotFixed(error.strerror or str(error)) from None
    return source, len(result.fixed)


def _add_noqa(report, sources: list[Source]) -> int:
    """`--add-noqa`: comment every file's findings away, as ruff's does."""
    from memlint.engine.add_noqa import add_noqa
    by_path: dict[str, list] = {}
    for finding in report.findings:
        by_path.setdefault(finding.path, []).append(finding)
    added = 0
    for source in sources:
        findings = by_path.get(source.path)
        if not findings:
            continue
        if source.data is not None or source.path.endswith(".ipynb"):
            what = "stdin" if source.data is not None else "notebooks yet"
            print(f"memlint: {display_path(source.path)}: not changed: --add-noqa does not "
                  f"edit {what}", file=sys.stderr)
            continue
        original = read_regular(source.path)
        text, lines = add_noqa(decode(original), findings)
        if lines and _written(source.path, original, text):
            added += lines
    print(f"Added {added} noqa comment{'s' * (added != 1)}.", file=sys.stderr)
    return EXIT_ERROR if report.errors else EXIT_CLEAN


def _written(path: str, original: bytes, text: str) -> bool:
    """Write the fixed text, or say in one line why the file keeps its own."""
    from memlint.engine.fixes import FileChanged, write_fixed

    try:
        write_fixed(path, original, text)
    except FileChanged:
        print(f"memlint: {display_path(path)}: changed on disk while it was checked; "
              f"not fixed", file=sys.stderr)
        return False
    except OSError as error:
        print(f"memlint: {display_path(path)}: not fixed: {error.strerror or error}",
              file=sys.stderr)
        return False
    return True


def _diff(before: list[Source], after: list[Source], fixed: int, say) -> None:
    """`--diff`: what `--fix` would change, as a unified diff; nothing written."""
    for old, new in zip(before, after):
        if new.data is None or new.data is old.data:  # not fixed
            continue
        name = display_path(old.path)
        old_text = decode(old.data if old.data is not None else read_regular(old.path))
        for label, was, becomes in _changed_parts(name, old_text, decode(new.data)):
            say(_unified_diff(label, was, becomes))
    count = f"{fixed} finding{'s' * (fixed != 1)}"
    print(f"Would fix {count}." if fixed else "No fixes available.", file=sys.stderr)


def _unified_diff(label: str, before: str, after: str) -> str:
    """A diff `patch` and `git apply` take: a last line without a line break
    is marked as such, instead of running into the next line of the diff."""
    import difflib
    lines = difflib.unified_diff(_patch_lines(before), _patch_lines(after),
                                 fromfile=label, tofile=label)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def _patch_lines(text: str) -> list[str]:
    """Lines as `patch` counts them: split at LF only (a form feed or a lone
    CR inside a line is not a break there), each keeping its ending."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _changed_parts(name: str, before: str, after: str):
    """(label, before, after) of what a fix changed: the file, or in a
    notebook each changed cell's code (`nb.ipynb:cell 3`), not its JSON."""
    if not name.endswith(".ipynb"):
        return [(name, before, after)]
    import json

    from memlint.engine.notebook import cell_text
    cells = zip(json.loads(before)["cells"], json.loads(after)["cells"])
    return [(f"{name}:cell {number}", cell_text(old), cell_text(new))
            for number, (old, new) in enumerate(cells, start=1)
            if cell_text(old) != cell_text(new)]


def _write_bytes(data: bytes) -> None:
    sys.stdout.flush()
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        sys.stdout.write(data.decode("utf-8", "replace"))
    else:
        stream.write(data)
    sys.stdout.flush()


def _pyproject(options: argparse.Namespace, paths: list[str]):
    """The pyproject.toml whose [tool.memlint] is read, or None (the defaults)."""
    if options.no_config:
        return None
    if options.config:
        if not os.path.exists(options.config):
            raise ConfigError(f"--config {options.config}: no such file")
        if not os.path.isfile(options.config):
            raise ConfigError(f"--config {options.config}: not a regular file (--no-config "
                              f"uses the defaults)")
        from pathlib import Path
        return Path(options.config)
    anchors = [options.stdin_filename if p == "-" and options.stdin_filename else p
               for p in paths]
    return find_pyproject(common_parent(anchors))


def _say_what_was_done(pyproject, report, jobs: int, started: float) -> None:
    """`-v`: the configuration used, and what the check cost."""
    config = display_path(str(pyproject)) if pyproject else "none (the defaults)"
    analysed = report.files - report.cached
    processes = useful_jobs(jobs or None, analysed) if analysed else 0
    print(f"memlint: configuration: {config}", file=sys.stderr)
    print(f"memlint: checked {report.files} file{'s' * (report.files != 1)} "
          f"({report.cached} from the cache) in {time.perf_counter() - started:.2f} s "
          f"with {processes} worker process{'es' * (processes != 1)}", file=sys.stderr)


def _settings(options: argparse.Namespace, pyproject) -> Settings:
    settings = load_settings(pyproject)
    given = vars(options)  # a budget flag not given is absent (argparse.SUPPRESS)
    flags = {field: given[key.replace("-", "_")] for key, (field, _) in BUDGETS.items()
             if key.replace("-", "_") in given}
    settings = apply_overrides(settings, select=options.select, ignore=options.ignore,
                               extend_select=options.extend_select,
                               extend_ignore=options.extend_ignore,
                               extend_exclude=options.extend_exclude,
                               preview=options.preview, budgets=flags)
    if options.fail_on is not None:
        settings = replace(settings, fail_on=options.fail_on)
    if options.respect_gitignore is not None:
        settings = replace(settings, respect_gitignore=options.respect_gitignore)
    return settings


class _Stdin(NamedTuple):
    """What `-` gave: the source to check (up to one byte past the size limit),
    the whole input (what `--fix -` prints when it fixes nothing), and whether
    it is checked at all (not when `--force-exclude` excludes its name)."""

    source: Source
    whole: bytes
    checked: bool


def _stdin(options: argparse.Namespace, settings: Settings) -> _Stdin:
    name = options.stdin_filename or "-"
    checked = not (options.force_exclude and options.stdin_filename
                   and settings.is_excluded(name))
    limit = settings.max_file_size_mb
    try:
        stream = sys.stdin.buffer
        data = stream.read() if limit is None else stream.read(size_limit(limit) + 1)
        over = limit is not None and len(data) > size_limit(limit)
        rest = stream.read() if options.fix and over else b""  # printed back, not checked
    except (AttributeError, OSError, ValueError) as error:  # no stdin at all: `<&-`
        reason = "it is closed" if sys.stdin is None else (
            getattr(error, "strerror", None) or str(error))
        raise ConfigError(f"cannot read stdin ('-'): {reason}") from None
    return _Stdin(Source(name, data), data + rest, checked)


def _write(text: str) -> None:
    """Always UTF-8, whatever the locale or PYTHONIOENCODING say: reports are read
    by tools, and a character the terminal's encoding lacks must not end the run."""
    sys.stdout.flush()
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        sys.stdout.write(text)
    else:
        stream.write(text.encode("utf-8", "backslashreplace"))
    sys.stdout.flush()


# -- rules and rule pages -----------------------------------------------------------

def _list_rules() -> int:
    """Code, name, default or preview, how often right on unseen code, summary."""
    from memlint.cli.pages import summary
    from memlint.rules.measured import SOURCE, frequency_of, verdict_of

    rows = [(code, name, how_it_runs(code), verdict_of(code),
             frequency_of(code), summary(code)) for code, name in NAMES_BY_CODE.items()]
    header = ("code", "name", "runs", "precision on unseen code", "per 1k files", "summary")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(5)]
    _write("".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths))
                   + f"  {row[5]}\n" for row in (header, *rows))
           + f"\nprecision: {SOURCE}; preview rules run with --preview or their code in "
             "--select\n")
    return EXIT_CLEAN


def _show_rule(code_or_name: str) -> int:
    from memlint.cli.pages import page, resolve_code

    code = resolve_code(code_or_name)
    if code is None:
        from memlint.engine.config import did_you_mean
        hint = did_you_mean(code_or_name, (*NAMES_BY_CODE, *NAMES_BY_CODE.values()))
        print(f"memlint rule: error: unknown rule {code_or_name!r}{hint}; "
              f"known codes are {', '.join(NAMES_BY_CODE)}", file=sys.stderr)
        return EXIT_ERROR
    if not sys.stdout.isatty():
        _write(page(code))  # piped: the Markdown itself, for tools and files
        return EXIT_CLEAN
    from memlint.cli.pages import for_terminal
    text = for_terminal(page(code), _colour("auto", True))
    import shutil  # start-up: only a page shown on a terminal needs it
    if text.count("\n") > shutil.get_terminal_size().lines:
        import pydoc
        os.environ.setdefault("LESS", "-R")  # let less show the colours
        pydoc.pager(text)
    else:
        _write(text)
    return EXIT_CLEAN
