"""Which rules run on which file: the resolved form of CLI flags and `[tool.memlint]`."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePath

from memlint.rules import (ALL_CODES, PREVIEW_CODES, SEVERITIES, SEVERITY_BY_CODE,
                           SYNTAX_ERROR_CODE)

DEFAULT_EXCLUDES = (".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", ".env",
                    "env", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                    "build", "dist", "site-packages", "node_modules", ".eggs", "*.egg-info",
                    ".ipynb_checkpoints", ".memlint_cache")


@dataclass(frozen=True)
class Settings:
    """`select`/`ignore` hold codes or prefixes (`MEM00`), as in flake8 and ruff."""

    select: tuple[str, ...] = ("MEM",)
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    rule_options: dict[str, dict] = field(default_factory=dict)
    #: where relative `exclude` / `per-file-ignores` patterns are anchored
    root: str = "."
    #: budgets of one file (None: no limit). libcst needs about 1 GB of memory
    #: per MB of dense code and minutes for some shapes, so one odd file
    #: (generated tables, minified code) must not stall or swamp a run.
    max_file_size_mb: float | None = 2.0
    file_timeout_s: float | None = 60.0
    max_file_memory_mb: float | None = 2048.0
    #: code -> severity, over the rules' defaults (`[tool.memlint.severity]`)
    severities: dict[str, str] = field(default_factory=dict)
    #: the least severity that makes the run fail (exit 1): every finding by default
    fail_on: str = "note"
    #: a directory walk skips what .gitignore and .ignore files name, as ruff's does
    respect_gitignore: bool = True
    #: run the rules in preview too (`memlint rules` says which those are)
    preview: bool = False
    #: the rules this process walks (None: all): the editor server splits a
    #: file's rules over its workers (`paths.KEPT_SHARES`) and joins their results
    walked: frozenset[str] | None = None

    def severity_of(self, code: str, reported: str | None = None) -> str:
        """The project's setting, else the finding's own (`reported`), else the rule's."""
        return self.severities.get(code, reported or SEVERITY_BY_CODE.get(code, "warning"))

    def shows_preview(self, code: str) -> bool:
        """Whether a finding a rule marks as preview is kept: with preview on,
        or when its code is selected by name, as for a whole rule in preview."""
        return self.preview or code in (*self.select, *self.extend_select)

    @cached_property
    def selected_anywhere(self) -> frozenset[str]:
        """The codes some file of the run may be checked for (`per-file-ignores`
        only take away): a rule's facts are read only by its own findings, so
        a rule selected nowhere has nothing to tell other files."""
        return self.selected_codes()

    def walks(self, code: str) -> bool:
        """Whether this process walks rule `code` (selected or giving facts)."""
        return self.walked is None or code in self.walked

    def fails(self, severity: str) -> bool:
        """Whether a finding of `severity` sets exit code 1."""
        return SEVERITIES.index(severity) >= SEVERITIES.index(self.fail_on)

    def selected_codes(self, path: str | None = None) -> frozenset[str]:
        """The rule codes that apply to `path`; MEM000 always does."""
        ignore = list(self.ignore)
        if path is not None:
            for pattern, codes in self.per_file_ignores.items():
                if path_matches(path, pattern, self.root):
                    ignore.extend(codes)
        chosen = {SYNTAX_ERROR_CODE}
        selectors = (*self.select, *self.extend_select)
        for code in ALL_CODES:
            if code in PREVIEW_CODES and not self.preview and code not in selectors:
                continue  # a rule in preview runs when asked for by preview or by its code
            selected = _longest_prefix(code, selectors)
            ignored = _longest_prefix(code, ignore)
            if selected > ignored:
                chosen.add(code)
        return frozenset(chosen)

    def is_excluded(self, path: str) -> bool:
        return self._exclusion.matches(path)

    @cached_property
    def _exclusion(self) -> _PatternSet:
        """All exclude patterns compiled once: discovery asks for every file."""
        return _PatternSet((*self.exclude, *self.extend_exclude), self.root)


def _longest_prefix(code: str, prefixes) -> int:
    """Most specific match wins, so `--select MEM003 --ignore MEM` keeps MEM003."""
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def path_matches(path: str, pattern: str, root: str = ".") -> bool:
    """Whether one pattern matches `path` (see `_PatternSet` for the rules)."""
    return _PatternSet((pattern,), root).matches(path)


class _PatternSet:
    """Glob patterns that match the path as given, the path relative to `root`,
    or one folder or file name inside `root` (`build` excludes every folder
    named build).

    Folders above `root` never match by name: a project that lives under
    `~/env/` or `/build/` is not excluded as a whole.
    """

    def __init__(self, patterns: tuple[str, ...], root: str) -> None:
        patterns = tuple(p.rstrip("/") for p in patterns)
        self.root = os.path.abspath(root)
        self.whole = _any_of(patterns)
        self.by_name = _any_of(tuple(p for p in patterns if "/" not in p))

    def matches(self, path: str) -> bool:
        if self.whole is None:
            return False
        absolute = os.path.abspath(path)
        try:
            relative = os.path.relpath(absolute, self.root)
        except ValueError:  # another drive (Windows)
            relative = absolute
        inside = not relative.startswith(os.pardir) and not os.path.isabs(relative)
        candidates = (PurePath(path).as_posix(),
                      PurePath(relative if inside else absolute).as_posix())
        if any(self.whole.match(c) for c in candidates):
            return True
        if self.by_name is None:
            return False
        names = PurePath(relative).parts if inside else (PurePath(absolute).name,)
        return any(self.by_name.match(name) for name in names)


def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(fnmatch.translate(os.path.normcase(p)) for p in patterns))
