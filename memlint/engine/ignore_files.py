""".gitignore and .ignore files, honoured by a directory walk as ruff honours them.

A copied run folder (`wandb/run-1/files/train.py`) or a vendored tree that git
ignores is not the project's code; checking it only adds findings nobody can
fix. The patterns are git's (gitignore(5)): a deeper file's patterns win over
its parents', the last matching pattern of a file wins, `!` re-includes, and
a folder once ignored is not entered (so nothing under it is re-included).
Matched with a few regular expressions of our own: pathspec would cost a
run answered from the cache a tenth of its start-up.
"""

from __future__ import annotations

import os
import re

IGNORE_FILES = (".gitignore", ".ignore")


class IgnoreRules:
    """The ignore patterns in force in one folder: (folder, its spec) pairs,
    outermost first."""

    def __init__(self, specs: tuple = ()) -> None:
        self.specs = specs

    @classmethod
    def for_walk(cls, top: str) -> IgnoreRules:
        """The rules a walk of `top` starts with; none when `top` is itself
        ignored, since a folder named on the command line is meant."""
        rules = cls.above(top)
        return cls() if rules.ignores(top, is_folder=True) else rules

    @classmethod
    def above(cls, top: str) -> IgnoreRules:
        """The patterns the folders above `top` set for it: those of its git
        repository (its folders' ignore files up to the root, and the root's
        `.git/info/exclude`), none outside a repository. `top`'s own ignore
        files are read by the walk."""
        folder = os.path.abspath(top)
        chain = [folder]
        while not os.path.exists(os.path.join(folder, ".git")):
            parent = os.path.dirname(folder)
            if parent == folder:
                return cls()
            folder = parent
            chain.append(folder)
        rules = cls(_specs(folder, [os.path.join(".git", "info", "exclude")]))
        for parent in reversed(chain[1:]):
            rules = rules.inside(parent, IGNORE_FILES)
        return rules

    def inside(self, folder: str, names) -> IgnoreRules:
        """These rules and those of `folder`'s own ignore files among `names`."""
        found = [name for name in IGNORE_FILES if name in names]
        if not found:
            return self
        return IgnoreRules(self.specs + _specs(os.path.abspath(folder), found))

    def ignores(self, path: str, is_folder: bool) -> bool:
        absolute = os.path.abspath(path)
        for folder, patterns in reversed(self.specs):
            relative = os.path.relpath(absolute, folder).replace(os.sep, "/")
            verdict = _verdict(patterns, relative, is_folder)
            if verdict is not None:
                return verdict
        return False


def _specs(folder: str, names) -> tuple:
    """(folder, its patterns) for each readable ignore file of `folder` among `names`."""
    specs = []
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:  # absent, unreadable, or a folder by that name: git skips it too
            continue
        specs.append((folder, [p for p in map(_pattern, lines) if p is not None]))
    return tuple(specs)


def _verdict(patterns, relative: str, is_folder: bool) -> bool | None:
    """True (ignored) or False (re-included) by the last pattern that matches, or None."""
    for regex, negated, folders_only in reversed(patterns):
        if (is_folder or not folders_only) and regex.match(relative):
            return not negated
    return None


def _pattern(line: str):
    """One line of an ignore file as (regex, negated, folders only), or None."""
    line = re.sub(r"(?<!\\) +$", "", line)
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line[1:] if negated else line
    folders_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    body = _glob(line.lstrip("/"))
    return re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.S), negated, folders_only


def _glob(pattern: str) -> str:
    """A gitignore glob as a regular expression: `*` and `?` stop at `/`,
    `**/` is any folders (none included), a final `/**` everything inside."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i) and i + 2 == len(pattern) and pattern[i - 1:i] == "/":
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            members = pattern[i + 1:end]
            negated = members[:1] in ("!", "^")
            members = members[1:] if negated else members
            out.append("[" + "^" * negated + members.replace("\\", "\\\\") + "]")
            i = end + 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)
