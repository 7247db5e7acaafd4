"""Supervised checking: every file is checked in a worker process that the parent
watches, so that a file that kills its worker (libcst's native parser overflows
its stack on some deeply chained code), hangs it, or swamps its memory costs that
file one MEM000 finding naming the reason, never the run and never another
file's findings; with one job as with many.

The parent hands each worker one file at a time, so when a worker dies or is
stopped the file it was on is known; a fresh worker takes the rest. A small
next task is sent ahead, while the worker is still on the current one, so the
worker never waits for the parent between files (the parent reads, unpickles
and records a result while the next file is being checked); the file a worker
was on is still the first one it has not answered, and a task sent ahead to a
worker that died goes back to the queue.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

Task = TypeVar("Task")
Result = TypeVar("Result")

#: how often a busy worker's memory is measured
_MEMORY_POLL_S = 0.1
#: how often a worker looks for its parent where the kernel cannot tell it
_PARENT_POLL_S = 0.5
#: prctl option: the signal a process gets when its parent dies (Linux)
_PR_SET_PDEATHSIG = 1
#: the longest the parent waits at once (a timeout the system can take)
_LONGEST_WAIT_S = 3600.0
#: a task sent ahead must fit the pipe's buffer, so that sending it never
#: blocks the parent while the worker blocks sending a large result
_AHEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class Budget:
    """What one file may cost its worker; None is no limit."""

    seconds: float | None = None
    memory_mb: float | None = None


@dataclass(frozen=True)
class Failure:
    """Why a worker gave no result for a task: the sentence that ends
    "cannot check the file: ...". """

    reason: str


class Workers:
    """Workers that outlive one run, for a long-lived caller (the editor
    server): what a worker keeps between tasks (the top-level statements it
    parsed, `engine/chunks.py`) serves the next version of a file, and no
    process is forked per run. A worker that died or went over its budget
    is replaced as in any run; `close` stops them all."""

    def __init__(self, check: Callable[[Any], Any]) -> None:
        self.check = check
        self.pool: list[_Worker] = []

    def take(self, count: int) -> list[_Worker]:
        """`count` workers, started where fewer are alive (one that died
        between runs, killed from outside, is let go of: its pipe closed)."""
        for worker in [w for w in self.pool if not w.process.is_alive()]:
            worker.stop()
        self.pool = [w for w in self.pool if w.process.is_alive()]
        self.pool += [_Worker(self.check) for _ in range(count - len(self.pool))]
        return self.pool[:count]

    def close(self) -> None:
        for worker in self.pool:
            worker.ask_to_stop()
        for worker in self.pool:
            worker.stop()
        self.pool = []


def run_supervised(check: Callable[[Task], Result], tasks: Sequence[Task], workers: int,
                   budget: Budget, kept: Workers | None = None) -> list[Result | Failure]:
    """`check(task)` for every task, in `workers` processes (those `kept`
    between runs, whose own `check` then applies); a task whose worker died
    or went over its budget gets a `Failure` in its place."""
    results: list[Result | Failure | None] = [None] * len(tasks)
    pending = deque(range(len(tasks)))
    count = min(workers, len(tasks))
    pool = kept.take(count) if kept is not None else [_Worker(check) for _ in range(count)]
    try:
        for worker in pool:
            worker.take(pending, tasks)
        while any(w.task is not None for w in pool):
            busy = [w for w in pool if w.task is not None]
            ready = wait([o for w in busy for o in (w.connection, w.process.sentinel)],
                         timeout=_wait_seconds(busy, budget))
            for worker in busy:
                outcome = worker.outcome(ready, budget)
                if outcome is None or worker.task is None:
                    continue
                results[worker.task] = outcome
                worker.next_task(pending, failed=isinstance(outcome, Failure))
                worker.take(pending, tasks)
    finally:
        # a kept worker stays for the next run, unless a task of this one is
        # still on it (Ctrl-C, an error in the parent)
        ending = [w for w in pool if kept is None or w.task is not None]
        for worker in ending:
            worker.ask_to_stop()
        for worker in ending:
            worker.stop()
        if kept is not None:
            kept.pool = [w for w in kept.pool if w not in ending]
    return results  # type: ignore[return-value]


def _wait_seconds(busy: list[_Worker], budget: Budget) -> float | None:
    waits = []
    if budget.memory_mb is not None and _CAN_MEASURE_MEMORY:
        waits.append(_MEMORY_POLL_S)
    if budget.seconds is not None:
        now = time.monotonic()
        waits += [min(max(w.started + budget.seconds - now, 0), _LONGEST_WAIT_S) for w in busy]
    return min(waits, default=None)


class _Worker:
    """One worker process and the task it is on."""

    def __init__(self, check: Callable[[Task], Result]) -> None:
        self.check = check
        self.task: int | None = None
        self.ahead: int | None = None  # sent ahead, to start when `task` is answered
        self.started = 0.0
        self._start()

    def _start(self) -> None:
        self.connection, child_end = _CONTEXT.Pipe()
        _PARENT_ENDS.add(self.connection)
        self.process = _CONTEXT.Process(target=_serve, daemon=True,
                                        args=(child_end, self.check, os.getpid(), _prctl()))
        self.process.start()
        child_end.close()

    def take(self, pending: deque[int], tasks: Sequence[Task]) -> None:
        """Start a task if idle, and send a small next one ahead."""
        if self.task is None and pending:
            self.task = pending.popleft()
            self.started = time.monotonic()
            self.connection.send_bytes(pickle.dumps(tasks[self.task]))
        if self.task is not None and self.ahead is None and pending:
            data = pickle.dumps(tasks[pending[0]])
            if len(data) <= _AHEAD_BYTES:
                try:
                    self.connection.send_bytes(data)
                except OSError:  # died on its current task: `outcome` says so
                    return
                self.ahead = pending.popleft()

    def next_task(self, pending: deque[int], failed: bool) -> None:
        """The current task is answered: the one sent ahead starts now, or, when
        the worker failed, goes back to the front of the queue for a fresh one."""
        if failed:
            self.replace()
            if self.ahead is not None:
                pending.appendleft(self.ahead)
            self.task, self.ahead = None, None
            return
        self.task, self.ahead = self.ahead, None
        self.started = time.monotonic()

    def outcome(self, ready: list, budget: Budget) -> Result | Failure | None:
        """The result of the current task, a Failure, or None while it runs."""
        if self.connection in ready:
            try:
                return self.connection.recv()
            except (EOFError, OSError):  # died while sending: judged by its exit below
                self.process.join()
        if self.process.sentinel in ready or not self.process.is_alive():
            self.process.join()
            return Failure(_death(self.process.exitcode))
        if budget.seconds is not None and time.monotonic() - self.started >= budget.seconds:
            return Failure(f"gave up after {budget.seconds:g} s (file-timeout); exclude the "
                           f"file or raise the limit with --file-timeout")
        pid = self.process.pid
        rss = _rss_bytes(pid) if budget.memory_mb is not None and pid is not None else None
        if rss is not None and budget.memory_mb is not None and rss > budget.memory_mb * 2**20:
            return Failure(f"it needed more than {budget.memory_mb:g} MB of memory "
                           f"(max-file-memory); exclude the file or raise the limit with "
                           f"--max-file-memory")
        return None

    def replace(self) -> None:
        """A fresh process for the remaining tasks, after a death or a budget overrun."""
        self.stop()
        self._start()

    def ask_to_stop(self) -> None:
        """An idle worker leaves at once; a busy one is killed by `stop`."""
        if self.task is None and self.process.is_alive():
            try:
                self.connection.send(None)
            except OSError:
                pass

    def stop(self) -> None:
        self.process.join(timeout=0.05 if self.task is None else 0)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.connection.close()
        _PARENT_ENDS.discard(self.connection)


#: the parent's ends of the workers' pipes: a forked worker closes its copies,
#: so that its own pipe ends (EOF) when the parent is gone
_PARENT_ENDS: set[Connection] = set()


def _serve(connection: Connection, check: Callable, parent: int, prctl) -> None:
    """A worker's loop: one task in, its result out, until told to stop. Ctrl-C is
    the parent's to handle: it stops the workers. A worker never outlives its
    parent (killed, cancelled, out of memory), even in the middle of a file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for end in _PARENT_ENDS:
        end.close()
    _exit_with(parent, prctl)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent is gone
            return
        if task is None:
            return
        connection.send(check(task))


@functools.lru_cache(maxsize=None)
def _prctl():
    """Linux's prctl, found in the parent: a forked child must import nothing
    (another thread of the parent, an editor's server, may have held the
    import lock when it forked)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _exit_with(parent: int, prctl) -> None:
    """Be killed when `parent` dies: by the kernel on Linux, else by a thread
    that watches who the parent is."""
    asked = prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:  # died before it could be asked
        os._exit(1)
    if not asked:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os._exit(1)


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if name == "SIGKILL":
            return ("the process checking it was killed (SIGKILL; the system may have run "
                    "out of memory)")
        return (f"the parser crashed on it ({name}); libcst's native parser does on some "
                f"deeply nested or chained code")
    return f"the process checking it exited unexpectedly (status {exitcode})"


def _rss_bytes(pid: int) -> int | None:
    """Resident memory of a process, where the system says (Linux); else None."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CAN_MEASURE_MEMORY = os.path.exists("/proc/self/statm")

#: fork where there is one: a forked worker starts in milliseconds with memlint
#: and libcst already imported, where a spawned one imports them again (a few
#: hundred ms), which a one-file pre-commit run would pay each time.
_CONTEXT = multiprocessing.get_context(
    "fork" if "fork" in multiprocessing.get_all_start_methods() else None)
