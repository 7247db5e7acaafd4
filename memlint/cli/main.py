"""The `memlint` command: `check`, `rules`, `rule CODE`, and `verify` (handed over).

Exit status of `check`: 0 clean, 1 findings, 2 a usage or configuration
error, a path that does not exist, or an internal error on some file (the
other files are still checked and reported). `--exit-zero` turns 1 into 0 only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

from memlint import __version__
from memlint.cli.config import (ConfigError, apply_overrides, common_parent, find_pyproject,
                            load_settings, parse_codes)
from memlint.engine import Report, RuleCrash, check_paths, check_source
from memlint.finding import InternalError
from memlint.cli.reporters import FORMATS, statistics
from memlint.rules import NAMES_BY_CODE
from memlint.engine.settings import Settings

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
_MACHINE_FORMATS = ("json", "sarif")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line, not a usage block."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _code_list(ignoring: bool = False):
    def parse(text: str) -> list[str]:
        try:
            return parse_codes(text, "", ignoring=ignoring)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix(": ")) from None
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
    check.add_argument("--extend-exclude", type=lambda s: [p for p in s.split(",") if p],
                       metavar="PATTERNS", help="comma-separated glob patterns to exclude "
                                                "in addition")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply excludes to files named on the command line too "
                            "(pre-commit passes every staged file by name)")
    check.add_argument("--format", choices=tuple(FORMATS), default="text",
                       help="output format (default: text)")
    check.add_argument("--exit-zero", action="store_true",
                       help="exit 0 even when there are findings (errors still exit 2)")
    check.add_argument("--statistics", action="store_true",
                       help="count the findings per code after the findings")
    check.add_argument("-j", "--jobs", type=_jobs, default=0, metavar="N",
                       help="processes to check with (default 0: one per CPU)")
    check.add_argument("--stdin-filename", metavar="PATH",
                       help="the name of the file read from stdin: shown in findings and "
                            "used to find its config and per-file-ignores")
    config = check.add_mutually_exclusive_group()
    config.add_argument("--config", metavar="PYPROJECT",
                        help="read [tool.memlint] from this file instead of searching for one")
    config.add_argument("--no-config", action="store_true",
                        help="ignore every pyproject.toml; use the defaults and the flags")

    commands.add_parser("rules", help="list the rules: code, name, summary",
                        description="List the rules: code, name, summary.")
    rule = commands.add_parser("rule", help="print a rule's reference page",
                               description="Print a rule's reference page.")
    rule.add_argument("code", metavar="CODE", help="a code (MEM003) or a name "
                                                   "(tensor-history-kept)")
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
        if options.command == "rules":
            return _list_rules()
        if options.command == "rule":
            return _show_rule(options.code)
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
    paths = options.paths or ["."]
    reads_stdin = "-" in paths
    settings = _settings(options, paths)
    missing = [p for p in paths if p != "-" and not os.path.lexists(p)]
    for path in missing:
        print(f"memlint: {path}: no such file or directory", file=sys.stderr)
    on_disk = [p for p in paths if p != "-" and p not in missing]
    if options.force_exclude:
        on_disk = [p for p in on_disk if not settings.is_excluded(p)]
    try:
        report = check_paths(on_disk, settings, jobs=options.jobs or None) if on_disk \
            else Report()
    except BrokenProcessPool as error:
        print(f"memlint: internal error: a worker process died ({error}); "
              f"run with -j 1 to find the file", file=sys.stderr)
        return EXIT_ERROR
    if reads_stdin:
        _check_stdin(options, settings, report)
    for error in report.errors:
        print(f"memlint: internal error while checking {error.path}: {error.message} "
              f"(a memlint bug; the other files were checked)", file=sys.stderr)
    _write(FORMATS[options.format](report, __version__))
    if options.statistics and report.findings:
        counts = statistics(report)
        if options.format in _MACHINE_FORMATS:  # keep stdout one parseable document
            sys.stderr.write(counts)
        else:
            _write(counts)
    if report.errors or missing:
        return EXIT_ERROR
    if report.findings and not options.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _settings(options: argparse.Namespace, paths: list[str]) -> Settings:
    if options.no_config:
        settings = Settings(root=os.getcwd())
    elif options.config:
        if not os.path.isfile(options.config):
            raise ConfigError(f"--config {options.config}: no such file")
        from pathlib import Path
        settings = load_settings(Path(options.config))
    else:
        anchors = [options.stdin_filename if p == "-" and options.stdin_filename else p
                   for p in paths]
        settings = load_settings(find_pyproject(common_parent(anchors)))
    return apply_overrides(settings, select=options.select, ignore=options.ignore,
                           extend_select=options.extend_select,
                           extend_ignore=options.extend_ignore,
                           extend_exclude=options.extend_exclude)


def _check_stdin(options: argparse.Namespace, settings: Settings, report: Report) -> None:
    name = options.stdin_filename or "-"
    if options.force_exclude and options.stdin_filename and settings.is_excluded(name):
        return
    data = sys.stdin.buffer.read()
    try:
        findings = check_source(data, name, settings)
    except RuleCrash as crash:
        report.errors.append(InternalError(name, str(crash)))
        return
    report.findings = sorted([*report.findings, *findings])
    report.files += 1


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


# -- rules and rule pages -----------------------------------------------------------

def _list_rules() -> int:
    from memlint.cli.pages import summary

    rows = [(code, name, summary(code)) for code, name in NAMES_BY_CODE.items()]
    width = max(len(name) for _, name, _ in rows)
    _write("".join(f"{code}  {name:<{width}}  {summary}\n" for code, name, summary in rows))
    return EXIT_CLEAN


def _show_rule(code_or_name: str) -> int:
    from memlint.cli.pages import page, resolve_code

    code = resolve_code(code_or_name)
    if code is None:
        print(f"memlint rule: error: unknown rule {code_or_name!r}; "
              f"known codes are {', '.join(NAMES_BY_CODE)}", file=sys.stderr)
        return EXIT_ERROR
    _write(page(code))
    return EXIT_CLEAN
