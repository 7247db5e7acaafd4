"""Which project a file belongs to: the tree its cross-file facts come from.

A file's findings must not depend on how it was named (`check .`, `check
FILE`, a hook, an editor), so its project is a property of the file: the
outermost folder above it that holds a project marker (`pyproject.toml`,
`setup.py`, `setup.cfg`, `.git`). A folder that project ignores (git-ignored
or excluded: a vendored tree, an unpacked wheel, exported repositories side
by side) holds projects of its own, one per folder directly inside it. With
no marker above it, a file found under a named folder belongs to that folder,
a file named alone to its own folder.
"""

from __future__ import annotations

import os
from functools import lru_cache

from memlint.engine.ignore_files import IgnoreRules
from memlint.engine.settings import Settings

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
#: the most files of a project read for a file checked without the rest;
#: past it the project is too big to read each time, and is taken as unknown
MAX_PROJECT_FILES = 5000


def project_folder(path: str, settings: Settings, found_under: str | None = None) -> str:
    """The root of the project `path` (a file) belongs to, as an absolute
    path; `found_under` is the folder named on the command line that it was
    found in, if any. Of nested markers the outermost counts (`lib/setup.py`
    that builds a repository's extensions is part of that repository), up to
    a project that ignores the way down to the file."""
    folder = os.path.dirname(os.path.abspath(path))
    outermost = None
    above = _marked_above(folder)
    while above is not None:
        inside = _ignored_inside(above, folder, settings)
        if inside is not None:
            return inside
        outermost = above
        parent = os.path.dirname(above)
        above = _marked_above(parent) if parent != above else None
    if outermost is None:
        return os.path.abspath(found_under) if found_under is not None else folder
    return outermost


@lru_cache(maxsize=4096)
def _marked_above(folder: str) -> str | None:
    """The nearest folder at or above `folder` that holds a project marker."""
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _ignored_inside(root: str, folder: str, settings: Settings) -> str | None:
    """When a folder between `root` and `folder` (inclusive) is one the
    project's own walk skips, the folder directly inside the outermost such
    one on the way to `folder` (or `folder` itself, when it is that one)."""
    relative = os.path.relpath(folder, root)
    if relative == os.curdir:
        return None
    parts = relative.split(os.sep)
    current = root
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        if _skipped(current, settings):
            return os.path.join(current, parts[index + 1]) if index + 1 < len(parts) else current
    return None


def _skipped(folder: str, settings: Settings) -> bool:
    if settings.is_excluded(folder):
        return True
    return settings.respect_gitignore and _ignore_rules(os.path.dirname(folder)).ignores(
        folder, is_folder=True)


@lru_cache(maxsize=4096)
def _ignore_rules(folder: str) -> IgnoreRules:
    """The ignore patterns in force for the entries of `folder`."""
    return IgnoreRules.above(folder).inside(folder, os.listdir(folder) if os.path.isdir(folder)
                                            else ())
