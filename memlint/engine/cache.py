"""The result cache: what each file gave the last run, so an unchanged file is
not parsed again.

What is kept per file is its own analysis (findings, some still waiting on
the project, and the facts it gives the project), never the project's verdict:
that depends on the other files and is settled again on every run from the
facts of all of them, cached or not. So a change in `utils.py` re-analyses
`utils.py` alone, and the findings of `train.py` that wait on what `utils.py`
does are decided again with its new facts.

An entry is keyed by the file's bytes, its path and module name, the settings
that shape findings, and memlint itself (its version and the size and time of
each of its files, so an edited rule is a different memlint). Entries are
written atomically (a temporary file renamed into place), so parallel jobs and
concurrent runs never see half an entry; an entry that cannot be read is
ignored and written again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
from pathlib import Path

from memlint.engine.settings import Settings
from memlint.version import __version__

CACHE_DIR_NAME = ".memlint_cache"
#: the files memlint is made of, for the cache key (measured once per process)
_PACKAGE = Path(__file__).resolve().parent.parent


def default_cache_dir(settings: Settings) -> Path:
    """`.memlint_cache` in the project root: the folder of the configuration
    in use, else the current directory."""
    return Path(settings.root) / CACHE_DIR_NAME


class ResultCache:
    """Per-file results under `folder`, for one memlint and one set of settings."""

    def __init__(self, folder: str | os.PathLike, settings: Settings) -> None:
        self.folder = Path(folder)
        self.hits = 0
        self._prefix = _run_key(settings)
        self._ready = False

    def get(self, path: str, module: str, data: bytes):
        """The result stored for this file's bytes, or None."""
        entry = self._entry(path, module, data)
        try:
            with open(entry, "rb") as handle:
                result = pickle.load(handle)
        except FileNotFoundError:
            return None
        except Exception:  # a corrupt or foreign entry: ignored, written again
            return None
        self.hits += 1
        return result

    def put(self, path: str, module: str, data: bytes, result) -> None:
        """Store `result`; a cache that cannot be written only costs speed."""
        entry = self._entry(path, module, data)
        try:
            self._prepare()
            entry.parent.mkdir(exist_ok=True)
            temporary = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")  # one per process
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                with os.fdopen(handle, "wb") as stream:
                    pickle.dump(result, stream, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(temporary, entry)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError:
            pass

    def _entry(self, path: str, module: str, data: bytes) -> Path:
        digest = hashlib.blake2b(self._prefix, digest_size=20)
        digest.update(os.fsencode(path) + b"\0" + os.fsencode(module) + b"\0")
        digest.update(data)
        name = digest.hexdigest()
        return self.folder / name[:2] / name

    def _prepare(self) -> None:
        """Create the folder with a `.gitignore` that keeps it out of version control."""
        if self._ready:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        ignore = self.folder / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# created by memlint\n*\n", encoding="utf-8")
        self._ready = True


def clean(folder: str | os.PathLike) -> bool:
    """Remove a cache folder memlint made; False when there is none."""
    import shutil  # only `memlint clean` needs it
    folder = Path(folder)
    if not (folder / ".gitignore").is_file():
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


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
