"""The child's process group, from the parent's side: start it in its own
session, stop it on timeout (SIGTERM to the child so it writes its results,
then SIGKILL to the whole group, DataLoader workers included), and watch
which of its processes hold a CUDA context (NVML, else nvidia-smi)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from typing import NamedTuple

GRACE_SECONDS = 10.0


def _stat_field(pid: int, index: int) -> int | None:
    """A numeric field of /proc/PID/stat after the command name (0: state,
    1: ppid, 2: pgrp, 3: session); None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[index])


def session_of(pid: int) -> int | None:
    """The session id of a process, from /proc (None if it is gone)."""
    return _stat_field(pid, 3)


def parent_of(pid: int) -> int | None:
    return _stat_field(pid, 1)


def descends_from(pid: int, root: int) -> bool:
    """Whether `pid` is `root` or one of its descendants (torchrun's ranks
    start sessions of their own, so the session alone does not tell)."""
    for _ in range(32):
        if pid == root:
            return True
        parent = parent_of(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


def processes_in_session(session: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and session_of(int(entry)) == session:
            pids.append(int(entry))
    return pids


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: how long the child gets to write its Python stacks after SIGUSR1
STACK_DUMP_SECONDS = 0.5
#: the window, at the timeout, over which a run that used no CPU and kept the
#: same stack is called stuck rather than still running
STILL_SECONDS = 1.0
#: below this share of one CPU over that window the main process did no work
_IDLE_CPU_SHARE = 0.05


class ChildEnd(NamedTuple):
    status: int | None
    timed_out: bool
    #: at the timeout, whether the main process was still computing (CPU time
    #: over STILL_SECONDS); None where the run ended by itself or it cannot be read
    busy: bool | None = None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of one process so far (Linux /proc), else None."""
    user, system = _stat_field(pid, 11), _stat_field(pid, 12)
    if user is None or system is None:
        return None
    return (user + system) / os.sysconf("SC_CLK_TCK")


class Prestarted:
    """A child started before its spec is written (issue 28, item 7): it
    imports torch (~3.5 s) while the parent checks the script and asks NVML,
    which cost every run ~1 s on the wall clock before it, then waits on a pipe
    (`--wait-fd=N`, child.main) until `go`. Its log is `work/child.log`; the
    run that `claim`s it writes its spec into `work`."""

    def __init__(self, command: list[str], env: dict, work: str) -> None:
        self.command, self.work = command, work
        read, self._go = os.pipe()
        with open(os.path.join(work, "child.log"), "wb") as log:
            self.child = subprocess.Popen([*command, f"--wait-fd={read}"], stdout=log,
                                          stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True, pass_fds=(read,))
        os.close(read)
        self._claimed = self._went = False

    @property
    def available(self) -> bool:
        return not self._claimed

    def claim(self, command: list[str]) -> Prestarted | None:
        """This child, once, for the run of `command` (None if already
        claimed or started for another command)."""
        if self._claimed or command != self.command:
            return None
        self._claimed = True
        return self

    def go(self) -> None:
        """Let the child read its spec (written by now) and run."""
        self._went = True
        try:
            os.write(self._go, b"go")
        finally:
            os.close(self._go)

    def close(self) -> None:
        """End a child that was never let go (the pipe closed unread tells it
        to exit; the group is killed all the same) and remove `work`."""
        if not self._went:
            os.close(self._go)
            kill_group(self.child.pid)
            self.child.wait()
            self._went = True
        shutil.rmtree(self.work, ignore_errors=True)


def run_child(command: list[str], timeout: float, env: dict, log_path: str,
              on_start=None, stack_path: str | None = None,
              early: Prestarted | None = None) -> ChildEnd:
    """Run `command` in a new session (or let go `early`, the same command
    started beforehand, logging to `log_path`) and wait for it or the timeout.

    On timeout, a child that has set up `stack_path` (its first line written)
    is asked for its Python stacks twice (SIGUSR1), STILL_SECONDS apart, while
    its CPU time is read, then to stop (SIGTERM).
    The whole process group is killed on the way out, so no worker outlives
    the run."""
    if early is not None:
        if on_start is not None:
            on_start(early.child.pid)
        early.go()
        return _wait_child(early.child, timeout, stack_path)
    with open(log_path, "wb") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        if on_start is not None:
            on_start(child.pid)
        return _wait_child(child, timeout, stack_path)


def _wait_child(child: subprocess.Popen, timeout: float, stack_path: str | None) -> ChildEnd:
    timed_out, busy = False, None
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        if stack_path is not None and os.path.exists(stack_path) \
                and os.path.getsize(stack_path) > 0:
            busy = _dump_stacks_twice(child)
        try:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    finally:
        kill_group(child.pid)
        child.wait()
    return ChildEnd(child.returncode, timed_out, busy)


def _dump_stacks_twice(child: subprocess.Popen) -> bool | None:
    """Ask for the child's stacks at the start and the end of STILL_SECONDS;
    whether it spent CPU time in between."""
    before = cpu_seconds(child.pid)
    child.send_signal(signal.SIGUSR1)
    time.sleep(STILL_SECONDS)
    after = cpu_seconds(child.pid)
    child.send_signal(signal.SIGUSR1)
    time.sleep(STACK_DUMP_SECONDS)
    if before is None or after is None:
        return None
    return after - before >= _IDLE_CPU_SHARE * STILL_SECONDS


class ContextWatcher:
    """Samples the GPU's compute processes and keeps, for each process of the
    child's session, the most device memory it was seen to hold."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.session: int | None = None
        self.memory_by_pid: dict[int, int] = {}
        self.session_pids: set[int] = set()
        self.foreign_max = 0  # the most device memory seen held by processes not the run's
        #: (pid, GPU index) -> the most memory seen (NVML only; nvidia-smi's query sums)
        self.memory_by_pid_device: dict[tuple[int, int], int] = {}
        #: per sample: seconds since start, and per GPU index the memory the
        #: run's processes hold there together (NVML only)
        self.gpu_timeline: list[tuple[float, dict[int, int]]] = []
        self._last_sample: dict[tuple[int, int], int] = {}
        self._started = time.monotonic()
        self.source = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._query = self._nvml_query() or self._smi_query()

    def _nvml_query(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - nvidia-ml-py missing or no driver: try nvidia-smi
            return None

        def query() -> dict[int, int]:
            used: dict[int, int] = {}
            self._last_sample = {}
            for index, handle in enumerate(handles):
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used[proc.pid] = used.get(proc.pid, 0) + (proc.usedGpuMemory or 0)
                    key = (proc.pid, index)
                    self._last_sample[key] = proc.usedGpuMemory or 0
                    self.memory_by_pid_device[key] = max(proc.usedGpuMemory or 0,
                                                         self.memory_by_pid_device.get(key, 0))
            return used

        self.source = "nvml"
        return query

    def _smi_query(self):
        def query() -> dict[int, int]:
            output = subprocess.run(
                ["nvidia-smi", "--query-compute-apps=pid,used_memory",
                 "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10).stdout
            used: dict[int, int] = {}
            for row in output.splitlines():
                parts = [p.strip() for p in row.split(",")]
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    used[int(parts[0])] = used.get(int(parts[0]), 0) + int(parts[1]) * 2**20
            return used

        self.source = "nvidia-smi"
        return query

    def start(self, session: int) -> None:
        self.session = session
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._watch, args=(session,), daemon=True)
        self._thread.start()

    def _watch(self, session: int) -> None:
        while not self._stop.is_set():
            try:
                self.session_pids.update(processes_in_session(session))
                foreign = 0
                for pid, used in self._query().items():
                    if pid in self.session_pids or session_of(pid) == session \
                            or descends_from(pid, session):
                        self.session_pids.add(pid)
                        self.memory_by_pid[pid] = max(used, self.memory_by_pid.get(pid, 0))
                    elif not descends_from(pid, os.getpid()):  # memlint's context probe
                        foreign += used
                self.foreign_max = max(self.foreign_max, foreign)
                self._note_gpus()
            except Exception:  # noqa: BLE001 - a failed sample is skipped
                pass
            self._stop.wait(self.interval)

    def _note_gpus(self) -> None:
        """One point per GPU of the timeline: what the run's processes hold there."""
        per_gpu: dict[int, int] = {}
        for (pid, index), used in self._last_sample.items():
            if pid in self.session_pids:
                per_gpu[index] = per_gpu.get(index, 0) + used
        if per_gpu or self.gpu_timeline:
            self.gpu_timeline.append((round(time.monotonic() - self._started, 3), per_gpu))

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        main = self.session
        # main_process_bytes: all the main process holds (NVML), context included;
        # other_processes: every other process of the run (DataLoader workers and
        # whatever multiprocessing starts beside them: a forkserver, a resource tracker)
        return {"source": self.source, "main_pid": main,
                "main_process_bytes": self.memory_by_pid.get(main, 0) if main is not None else 0,
                "other_processes": len(self.session_pids - {main}),
                "worker_context_bytes": {str(pid): used for pid, used in
                                         sorted(self.memory_by_pid.items()) if pid != main},
                "foreign_bytes": self.foreign_max,
                "devices_by_pid": self._devices_by_pid(),
                "gpu_timeline": self._gpu_lines()}

    def _gpu_lines(self) -> dict[str, list[tuple[float, int]]]:
        """`cuda:i` -> [(seconds, bytes of the run on GPU i)], for every GPU
        the run touched: one line per GPU, zero where it held nothing."""
        touched = sorted({i for _, per_gpu in self.gpu_timeline for i in per_gpu})
        return {f"cuda:{i}": [(t, per_gpu.get(i, 0)) for t, per_gpu in self.gpu_timeline]
                for i in touched}

    def _devices_by_pid(self) -> dict[str, dict[str, int]]:
        """For each process of the run, the most memory seen on each GPU."""
        found: dict[str, dict[str, int]] = {}
        for (pid, index), used in sorted(self.memory_by_pid_device.items()):
            if pid in self.session_pids and used > 0:
                found.setdefault(str(pid), {})[f"cuda:{index}"] = used
        return found


def wait_until_gone(pids, timeout: float = 5.0) -> bool:
    """True once none of `pids` exists any more (used by the tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") for pid in pids):
            return True
        time.sleep(0.05)
    return False
