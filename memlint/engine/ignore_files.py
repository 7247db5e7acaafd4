""".gitignore and .ignore files, honoured by a directory walk as ruff honours them.

A copied run folder (`wandb/run-1/files/train.py`) or a vendored tree that git
ignores is not the project's code; checking it only adds findings nobody can
fix. The patterns are git's (via pathspec); a deeper file's patterns win over
its parents', and the last matching pattern of a file wins, `!` re-including.
"""

from __future__ import annotations

import os

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
        repository (its folders' ignore files and `.git/info/exclude`), none
        outside a repository."""
        folder = os.path.abspath(top)
        parents = []
        while True:
            parent = os.path.dirname(folder)
            if parent == folder:
                return cls()
            folder = parent
            parents.append(folder)
            if os.path.exists(os.path.join(folder, ".git")):
                break
        rules = cls(_specs(folder, [os.path.join(".git", "info", "exclude")]))
        for parent in reversed(parents):
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
        for folder, spec in reversed(self.specs):
            relative = os.path.relpath(absolute, folder).replace(os.sep, "/")
            verdict = spec.check_file(relative + "/" if is_folder else relative).include
            if verdict is not None:
                return verdict
        return False


def _specs(folder: str, names) -> tuple:
    """(folder, spec) for each readable ignore file of `folder` among `names`."""
    specs = []
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:  # absent, unreadable, or a folder by that name: git skips it too
            continue
        from pathspec import GitIgnoreSpec  # start-up: only a tree with ignore files needs it
        specs.append((folder, GitIgnoreSpec.from_lines(lines)))
    return tuple(specs)
