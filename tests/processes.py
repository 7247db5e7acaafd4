"""Which processes a test left behind: the children a process started, and
whether each is gone (Linux's /proc)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process `pid` started, and theirs, as /proc lists them now."""
    found, queue = [], [pid]
    while queue:
        for task in Path(f"/proc/{queue.pop()}/task").glob("*"):
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:  # gone meanwhile
                continue
            found += children
            queue += children
    return found


def gone(pid: int) -> bool:
    """Dead, or a zombie waiting for a reaper that may never come in a container."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def left_after(pids: list[int], seconds: float = 30) -> list[int]:
    """Those of `pids` still alive after waiting up to `seconds`; killed, so
    that a failing test leaves nothing behind either."""
    deadline = time.monotonic() + seconds
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if not gone(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left
