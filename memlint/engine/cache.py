"""The result cache: what each file gave the last run, so an unchanged file is
not parsed again.

What is kept per file is its own analysis (findings, some still waiting on
the project, and the facts it gives the project), never the project's verdict:
that depends on the other files and is settled again on every run from the
facts of all of them, cached or not. So a change in `utils.py` re-analyses
`utils.py` alone, and the findings of `train.py` that wait on what `utils.py`
does are decided again with its new facts.

The cache holds one folder per memlint and settings (its version, the size
and time of each of its files, so an edited rule is a different memlint, and
the settings that shape findings); only the few most recently used are kept.
In it each file has one entry, keyed by its path and module name, that holds
the digest of the bytes it was made from: a changed file replaces its entry,
so the cache never grows past the project. Entries are written atomically (a
temporary file renamed into place), so parallel jobs and concurrent runs never
see half an entry; an entry that cannot be read is ignored and written again.

The folder is marked as memlint's by a `CACHEDIR.TAG`; memlint writes into,
and `memlint clean` removes, only a folder that is new, empty, or so marked
and holding nothing else, never a project.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import re
import sys
import time
from pathlib import Path

from memlint.engine.settings import Settings
from memlint.version import __version__

CACHE_DIR_NAME = ".memlint_cache"
#: the files memlint is made of, for the cache key (measured once per process)
_PACKAGE = Path(__file__).resolve().parent.parent
#: https://bford.info/cachedir/: backup tools skip a folder holding this file
TAG_NAME = "CACHEDIR.TAG"
TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
       "# This file is a cache directory tag created by memlint.\n")
_GITIGNORE = "# created by memlint\n*\n"
#: the folders of other memlints or settings kept besides the one in use
KEPT_RUN_FOLDERS = 4
#: a run folder unused this long is removed
MAX_AGE_S = 30 * 24 * 3600
_RUN_FOLDER = re.compile(r"[0-9a-f]{16}")
_OLD_ENTRY_FOLDER = re.compile(r"[0-9a-f]{2}")  # memlint before CACHEDIR.TAG


def default_cache_dir(settings: Settings) -> Path:
    """`.memlint_cache` in the project root: the folder of the configuration
    in use, else the current directory."""
    return Path(settings.root) / CACHE_DIR_NAME


def project_cache(settings: Settings) -> ResultCache | None:
    """The cache in its default folder, for a front end with no cache option
    (flake8, the editor server); None where that folder is not memlint's."""
    folder = default_cache_dir(settings)
    return ResultCache(folder, settings) if folder_problem(folder) is None else None


class ResultCache:
    """Per-file results under `folder`, for one memlint and one set of settings."""

    def __init__(self, folder: str | os.PathLike, settings: Settings) -> None:
        self.folder = Path(folder)
        self.hits = 0
        run_key = _run_key(settings)
        self._prefix = run_key
        self._run_folder = self.folder / hashlib.blake2b(run_key, digest_size=8).hexdigest()
        self._ready: bool | None = None  # None: not yet prepared; False: not usable

    def get(self, path: str, module: str, data: bytes):
        """The result stored for this file's bytes, or None."""
        try:
            with open(self._entry(path, module), "rb") as handle:
                if pickle.load(handle) != content_digest(data):
                    return None
                result = pickle.load(handle)
        except Exception:  # none, stale, corrupt or foreign: analysed and written again
            return None
        self.hits += 1
        return result

    def put(self, path: str, module: str, data: bytes, result) -> None:
        """Store `result` in place of what this file had; a cache that cannot
        be written only costs speed."""
        entry = self._entry(path, module)
        try:
            if not self._prepare():
                return
            entry.parent.mkdir(exist_ok=True)
            temporary = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")  # one per process
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                with os.fdopen(handle, "wb") as stream:
                    pickle.dump(content_digest(data), stream, protocol=pickle.HIGHEST_PROTOCOL)
                    pickle.dump(result, stream, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, entry)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass

    def _entry(self, path: str, module: str) -> Path:
        digest = hashlib.blake2b(self._prefix, digest_size=20)
        digest.update(os.fsencode(path) + b"\0" + os.fsencode(module))
        name = digest.hexdigest()
        return self._run_folder / name[:2] / name

    def _prepare(self) -> bool:
        """Make the folder memlint's (marked, kept out of version control) and
        drop the run folders of other memlints and settings past the newest
        few; False when the folder is not memlint's to write."""
        if self._ready is None:
            self._ready = folder_problem(self.folder) is None
            if self._ready:
                _mark(self.folder)
                self._run_folder.mkdir(exist_ok=True)
                os.utime(self._run_folder)
                _drop_old_run_folders(self.folder)
        return self._ready


def folder_problem(folder: str | os.PathLike) -> str | None:
    """Why memlint must not use `folder` as its cache (it holds something
    memlint did not make: a project, say), or None."""
    folder = Path(folder)
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "it is not a folder"
    try:
        foreign = _foreign_entries(folder)
    except OSError as error:
        return f"cannot read it: {error.strerror or error}"
    if foreign:
        return (f"it holds files memlint did not make ({', '.join(sorted(foreign)[:3])}); "
                f"name a new or empty folder")
    return None


def _foreign_entries(folder: Path) -> list[str]:
    """What `folder` holds besides a memlint cache's own files."""
    names = os.listdir(folder)
    if not names or not _marked(folder):
        return names
    return [name for name in names if name not in (TAG_NAME, ".gitignore")
            and not (_RUN_FOLDER.fullmatch(name) or _OLD_ENTRY_FOLDER.fullmatch(name))]


def _marked(folder: Path) -> bool:
    """Made by memlint: its tag, or the `.gitignore` of a memlint before tags."""
    return _read(folder / TAG_NAME) == TAG or _read(folder / ".gitignore") == _GITIGNORE


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None


def _mark(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ((TAG_NAME, TAG), (".gitignore", _GITIGNORE)):
        if _read(folder / name) != text:
            (folder / name).write_text(text, encoding="utf-8")


def _drop_old_run_folders(folder: Path) -> None:
    import shutil  # only a run that writes the cache gets here

    entries = [entry for entry in os.scandir(folder) if entry.is_dir()]
    runs = sorted(((entry.stat().st_mtime, entry.path) for entry in entries
                   if _RUN_FOLDER.fullmatch(entry.name)), reverse=True)
    oldest_kept = time.time() - MAX_AGE_S
    stale = [path for index, (used, path) in enumerate(runs)
             if index > KEPT_RUN_FOLDERS or used < oldest_kept]
    stale += [entry.path for entry in entries if _OLD_ENTRY_FOLDER.fullmatch(entry.name)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)


def clean(folder: str | os.PathLike) -> bool:
    """Remove a cache folder memlint made; False when there is none. Raises
    `ValueError` for a folder that holds anything memlint did not make."""
    import shutil  # only `memlint clean` needs it
    folder = Path(folder)
    if not folder.is_dir() or not _marked(folder):
        return False
    problem = folder_problem(folder)
    if problem is not None:
        raise ValueError(problem)
    shutil.rmtree(folder, ignore_errors=True)
    return True


def content_digest(data: bytes) -> bytes:
    """What identifies a file's bytes: its cache entry's, and the ones `--fix` may change."""
    return hashlib.blake2b(data, digest_size=20).digest()


def _run_key(settings: Settings) -> bytes:
    """What every entry of this run shares: memlint as installed, the Python
    that pickled it, and the settings that change a file's findings (not
    which files are found, nor which findings fail the run)."""
    shaping = dataclasses.replace(settings, exclude=(), extend_exclude=(), fail_on="note")
    parts = [__version__, sys.version, repr(shaping), *_package_stamp()]
    return "\n".join(parts).encode()


def _package_stamp() -> list[str]:
    stamp = []
    for file in sorted(_PACKAGE.rglob("*.py")):
        try:
            status = file.stat()
        except OSError:
            continue
        stamp.append(f"{file.relative_to(_PACKAGE)} {status.st_size} {status.st_mtime_ns}")
    return stamp
