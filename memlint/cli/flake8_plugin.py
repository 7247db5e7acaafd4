"""memlint as a flake8 plugin, so editors that run flake8 show memlint's findings.

A thin adapter over the engine: the same rules, `# noqa` handling and
project (the rest of the file's project read for its facts, cached) as
`memlint check FILE`, fed the lines flake8 already read (flake8 also checks
stdin, where there is no file to re-read). The codes chosen in the
nearest `[tool.memlint]` (`select`, `ignore`, `extend-select`,
`per-file-ignores`) apply, so the editor shows what `memlint check` in CI
reports; flake8's own `--select`/`--ignore` filter on top. Which files are
checked is flake8's `exclude`, as for every plugin.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Sequence
from functools import lru_cache

from memlint.version import __version__
from memlint.engine.config import ConfigError, find_pyproject, load_settings
from memlint.engine import RuleCrash, size_limit
from memlint.engine.paths import check_in_project, too_large
from memlint.engine.source import source_bytes
from memlint.analysis.files import read_regular
from memlint.rules import SYNTAX_ERROR_CODE
from memlint.engine.settings import Settings
from memlint.finding import Finding

_Result = tuple[int, int, str, type]
_STDIN_NAMES = ("stdin", "-")


class MemlintChecker:
    """flake8's "tree" plugin type; the tree is unused (memlint parses with libcst)."""

    name = "memlint"
    version = __version__

    #: set from flake8's options once per run, in `parse_options`
    honour_memlint_noqa = True

    #: the tree of the file last checked. flake8 hands every registered tree
    #: plugin the same tree object; an environment where two distributions
    #: register this checker (a stale install of the project under its old name)
    #: would otherwise print every finding twice.
    _last_tree: ast.AST | None = None

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename

    @classmethod
    def parse_options(cls, options) -> None:
        # With `--disable-noqa` flake8 shows what noqa comments hide; memlint must not
        # hide those findings first.
        cls.honour_memlint_noqa = not getattr(options, "disable_noqa", False)
        # editors run flake8 again and again in one process: re-read the
        # configuration on each run, so an edited [tool.memlint] applies
        _settings_of_folder.cache_clear()

    def run(self) -> Iterator[_Result]:
        if self.tree is not None and self.tree is MemlintChecker._last_tree:
            return
        MemlintChecker._last_tree = self.tree
        settings = _settings_for(self.filename)
        if isinstance(settings, ConfigError):
            yield (1, 0, f"{SYNTAX_ERROR_CODE} memlint configuration error: {settings}", type(self))
            return
        source = self._source()
        limit = settings.max_file_size_mb
        if limit is not None and len(source) > size_limit(limit):
            yield (1, 0, f"{SYNTAX_ERROR_CODE} cannot read the file: {too_large(limit)}",
                   type(self))
            return
        findings = _findings(source, self.filename, settings, self.honour_memlint_noqa)
        if isinstance(findings, str):
            # flake8 aborts the whole run, every plugin's results with it, when a
            # plugin raises; one finding on this file keeps the editor working.
            yield (1, 0, f"{SYNTAX_ERROR_CODE} memlint internal error on this file, a memlint "
                         f"bug (please report it): {findings}", type(self))
            return
        for finding in findings:
            # flake8 wants a 0-based column and adds 1 when it prints
            yield (finding.line, finding.column - 1,
                   f"{finding.code} {finding.message}", type(self))


    def _source(self) -> str | bytes:
        """The text flake8 read; but the file's own bytes where flake8 read them
        as latin-1 because they are not valid in the file's encoding, so that the
        editor shows the MEM000 that `memlint check` reports."""
        text = "".join(self.lines)
        if text.isascii() or self.filename in _STDIN_NAMES:
            return text
        try:
            as_latin1 = text.encode("latin-1")
            data = read_regular(self.filename)
        except (UnicodeEncodeError, OSError):  # decoded past latin-1, or not on disk
            return text
        # flake8 reads with universal newlines
        return data if data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") == as_latin1 else text


def _findings(source: str | bytes, path: str, settings: Settings,
              noqa: bool) -> list[Finding] | str:
    """The findings `memlint check FILE` gives the file (its project read
    around it, each file within the per-file budgets), or why memlint failed
    on it (its own bug)."""
    try:
        return check_in_project(path, source_bytes(source) if isinstance(source, str) else source,
                                settings, noqa=noqa)
    except Exception as error:
        return str(error) if isinstance(error, RuleCrash) else f"{type(error).__name__}: {error}"


def _settings_for(filename: str) -> Settings | ConfigError:
    """The `[tool.memlint]` that `memlint check` would use for this file."""
    if filename in _STDIN_NAMES:
        return _settings_of_folder(os.getcwd())
    return _settings_of_folder(os.path.dirname(os.path.abspath(filename)))


@lru_cache(maxsize=None)
def _settings_of_folder(folder: str) -> Settings | ConfigError:
    """Read once per folder: flake8 calls the plugin for every file."""
    try:
        return load_settings(find_pyproject(folder))
    except ConfigError as error:
        return error
