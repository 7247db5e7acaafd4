"""Opening a file memlint did not make: a regular file only, never blocking.

A named pipe anywhere in a project (`logs/progress.json` fed by a running
job) would block whatever opened it forever, and `/dev/zero` never ends; so
every file memlint reads (checked, looked at around it, fixed) is opened
without blocking and checked on the open file, so that a path swapped in
between cannot slip through.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a folder; `strerror` says which."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_BINARY", 0))
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegular(0, f"it is {_kind(mode)}, not a regular file", str(path))
    return open(descriptor, "rb")


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file (`NotRegular` for anything else)."""
    with open_regular(path) as handle:
        return handle.read()


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "a special file")
