"""The memory account of a verify run: where the device memory that
nvidia-smi shows for each process goes.

The CUDA context is measured before the run, in a probe process that makes
its context and allocates nothing (verify/context_probe.py): the same way
every time. For the main process, a thread in the child samples, at the same instant,
what NVML says the process uses on the device and what PyTorch has reserved
and allocated there. The peak is the allocator's own (`max_memory_reserved`,
`max_memory_allocated`: exact, where 20 ms samples miss short spikes); the
account at the peak = CUDA context (the probe's figure; where it could not be
measured, NVML's largest figure before PyTorch's first reserve) + PyTorch's peak
reserve (of which allocated) + the rest (other libraries' buffers: cuBLAS
workspaces, NCCL, a second context: NVML minus context and reserve at NVML's
largest sample). Every figure is checked before it is printed: allocated <=
reserved <= process total. DataLoader workers and other processes of the run
come from the parent's NVML watch of the child's session; processes on the
device that are not the run's are shown apart.
"""

from __future__ import annotations

import os
import threading
import time

from memlint.verify.judges import human_bytes, size_range


class AccountSampler:
    """In the child: NVML's figure for this process beside PyTorch's reserved
    and allocated bytes, sampled together every `interval` seconds."""

    def __init__(self, torch_device, context: int | None = None,
                 interval: float = 0.02) -> None:
        import torch

        self.torch = torch
        self.device = torch_device
        self.interval = interval
        #: the context's size, measured beforehand in a probe process
        #: (verify/context_probe.py); None: estimated from the samples
        self.context = context
        self.query = _own_usage_query(torch_device.index or 0)
        self.start = time.perf_counter()
        self.samples: list[tuple[float, int, int, int]] = []  # t, nvml, reserved, allocated
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.allocator = allocator_reader(torch, torch_device)
        self._last_reserved: int | None = None
        self._last_query = -1.0
        self._changed = True
        #: called with the allocator's figures on every tick (the peak recorder)
        self.on_tick = None

    def begin(self) -> None:
        """Sample until `end`. Nothing is allocated for it: the context is read
        off the samples before PyTorch's first reserve."""
        if self.query is None:
            return
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample(force=False)

    #: NVML is asked at least this often; more often while the reserve changes
    NVML_EVERY = 0.25

    def sample(self, force: bool = True) -> None:
        """One tick: the allocator's figures (cheap), and NVML's where the
        reserve changed since its last answer, on the tick after (NVML's figure
        can lag a reserve), or NVML_EVERY has passed. Asking NVML on every
        tick cost the program itself time (issue 28, item 7)."""
        try:
            reserved, allocated = self.allocator()
            if self.on_tick is not None:
                self.on_tick(reserved, allocated)
            now = time.perf_counter() - self.start
            changed = reserved != self._last_reserved
            if not (force or changed or self._changed or now - self._last_query
                    >= self.NVML_EVERY):
                return
            self._changed, self._last_reserved, self._last_query = changed, reserved, now
            used = self.query()
            if used is None:
                return
            self.samples.append((now, used, reserved, allocated))
        except Exception:  # noqa: BLE001 - a failed sample is skipped
            pass

    def end(self) -> dict | None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
        if self.query is None:
            return None
        self.sample()  # at exit
        return self.summary()

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        peak = max(self.samples, key=lambda s: s[1])
        last = self.samples[-1]
        # the context once made, before PyTorch reserved anything and other
        # libraries added buffers: the largest figure of the samples before the
        # first reserve (the very first can catch the context half made); a
        # minimum over the run is not it either: NVML's figure can lag a reserve
        before = [used for _, used, reserved, _ in self.samples if reserved == 0]
        _, used, reserved, _ = self.samples[0]
        context = max(before) if before else max(used - reserved, 0)
        # two equal figures before the first reserve: the context was whole
        settled = len(before) >= 2 and before[-1] == before[-2]
        measured = getattr(self, "context", None)
        if measured is not None:
            context, settled = measured, True
        exact_reserved, exact_allocated = self._allocator_peaks()
        peak_reserved = max(exact_reserved, *(s[2] for s in self.samples))
        peak_allocated = max(exact_allocated, *(s[3] for s in self.samples))
        others = max(peak[1] - context - peak[2], 0)
        return {"pid": os.getpid(), "device": str(self.device), "context_bytes": context,
                "context_settled": settled,
                "at_peak": _row(peak), "at_exit": _row(last),
                "peak_reserved": peak_reserved, "peak_allocated": peak_allocated,
                "other_bytes": others,
                "process_peak_bytes": max(peak[1], context + peak_reserved + others),
                "timeline": [(round(t, 4), n, r) for t, n, r, _ in self.samples[::5]]}

    def _allocator_peaks(self) -> tuple[int, int]:
        """PyTorch's own peaks on the device so far (reserved, allocated)."""
        torch = getattr(self, "torch", None)
        if torch is None:
            return 0, 0
        return (torch.cuda.max_memory_reserved(self.device),
                torch.cuda.max_memory_allocated(self.device))


def _row(sample: tuple[float, int, int, int]) -> dict:
    t, used, reserved, allocated = sample
    return {"t": round(t, 4), "nvml": used, "reserved": reserved, "allocated": allocated}


def allocator_reader(torch, device):
    """A function giving (reserved, allocated) bytes of PyTorch's allocator on
    `device`, read from its nested stats: `memory_reserved()` and
    `memory_allocated()` each flatten every statistic into a new dict, which a
    sampler thread pays, holding the GIL, on every tick."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_memoryStats", None)

    def read() -> tuple[int, int]:
        if raw is None:
            return torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)
        stats = raw(index)
        return (stats["reserved_bytes"]["all"]["current"],
                stats["allocated_bytes"]["all"]["current"])
    return read


def with_context(account: dict | None, context: int | None) -> dict | None:
    """The child's account with the context measured beside the run (the
    parent's probe runs while the script does: run before it, the probe's
    process start and CUDA context cost every verify run seconds); the parts
    that follow from the context are derived again."""
    if account is None or context is None:
        return account
    peak = account["at_peak"]
    others = max(peak["nvml"] - context - peak["reserved"], 0)
    return {**account, "context_bytes": context, "context_settled": True,
            "other_bytes": others,
            "process_peak_bytes": max(peak["nvml"], context + account["peak_reserved"] + others)}


def _own_usage_query(index: int):
    """A function giving NVML's device-memory figure for this process on GPU
    `index` (None where NVML cannot be used: no nvidia-ml-py, no driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - nvidia-ml-py missing or no driver
        return None
    pid = os.getpid()

    def query() -> int | None:
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid:
                return process.usedGpuMemory or 0
        return None
    return query


def account_rows(main: dict | None, contexts: dict | None, findings_by_code: dict,
                 ranks: bool = False, pid: int | None = None,
                 device: str | None = None) -> list[str]:
    """The account as text rows: the main process split into its parts, each
    other process of the run (DataLoader workers, or in a launched job of
    `ranks` the other ranks too), and memory held by processes not ours.
    `pid` and `device` name the process and its own GPU where its account
    is empty (a rank that held nothing on its own GPU)."""
    rows = []
    if main is not None:
        pid, device = main["pid"], main.get("device")
        rows.extend(_main_process_rows(main))
    elif pid is not None and device is not None:
        rows.append(f"  main process (pid {pid}): nothing on its own GPU, {device}")
    if pid is not None:
        devices = (contexts or {}).get("devices_by_pid", {}).get(str(pid), {})
        for gpu, used in sorted(devices.items()):
            if gpu != device:
                rows.append(f"    also on {gpu}, not its own GPU: {human_bytes(used)}"
                            + (" (a CUDA context, at least)" if used >= 256 * 2**20 else ""))
    own = str(pid) if pid is not None else None
    workers = {other: used for other, used
               in (contexts or {}).get("worker_context_bytes", {}).items()
               if used > 0 and other != own}
    if workers:
        what = "the other ranks, their DataLoader workers" if ranks else "DataLoader workers"
        because = None if ranks else findings_by_code.get("MEM002")
        rows.append(f"  {len(workers)} other process{'es' if len(workers) != 1 else ''} of the "
                    f"run ({what}): {size_range(workers.values())} each, "
                    f"{human_bytes(sum(workers.values()))} in all"
                    + (f" -- MEM002 at {because}" if because else ""))
    foreign = (contexts or {}).get("foreign_bytes")
    if foreign:
        rows.append(f"  processes that are not the run's: {human_bytes(foreign)} on the device")
    return rows


def peak_parts(main: dict) -> dict[str, int]:
    """The main process at its peak, in parts that add up and never contradict
    each other, by construction: allocated <= reserved (the allocator's peaks,
    or a sample's where it saw more), context + reserved + other <= total
    (NVML's largest sample, or those parts where the samples missed the peak)."""
    context = main.get("context_bytes") or 0
    sampled = main["at_peak"]
    reserved = max(main.get("peak_reserved", 0), sampled["reserved"])
    allocated = min(max(main.get("peak_allocated", 0), sampled["allocated"]), reserved)
    others = main.get("other_bytes", max(sampled["nvml"] - context - sampled["reserved"], 0))
    total = max(main.get("process_peak_bytes", 0), sampled["nvml"], context + reserved + others)
    return {"context": context, "reserved": reserved, "allocated": allocated,
            "other": others, "total": total}


def _main_process_rows(main: dict) -> list[str]:
    parts = peak_parts(main)
    sampled = main["at_peak"]
    settled = main.get("context_settled", True)
    return [
        f"  main process (pid {main['pid']}), at its peak {human_bytes(parts['total'])} "
        f"(NVML's largest sample: {human_bytes(sampled['nvml'])}, {sampled['t']:.1f} s "
        "into the run):",
        f"    CUDA context            {human_bytes(parts['context']):>12}"
        + ("" if settled else "   at least: the script reserved memory before "
           "NVML saw the whole context, the rest is in \"other\""),
        f"    PyTorch reserved        {human_bytes(parts['reserved']):>12}"
        f"   of which allocated {human_bytes(parts['allocated'])} (the allocator's peaks)",
        f"    other (libraries)       {human_bytes(parts['other']):>12}"]


def gpu_rows(contexts: dict | None, ranks_by_pid: dict[str, int],
             selected: dict[str, str] | None = None) -> list[str]:
    """A launched run's memory per GPU: the most the run's processes held
    there together, and each process's own most (NVML per process, the
    figure nvidia-smi's `--query-compute-apps` prints), named by rank.
    `selected` (pid -> the rank's own GPU) adds the GPUs ranks chose and
    left empty: where their memory should have been."""
    by_pid = (contexts or {}).get("devices_by_pid") or {}
    lines = (contexts or {}).get("gpu_timeline") or {}
    selected = selected or {}
    gpus = sorted({gpu for devices in by_pid.values() for gpu in devices} | set(lines)
                  | set(selected.values()))
    rows = []
    for gpu in gpus:
        held = [(pid, devices[gpu]) for pid, devices in sorted(
            by_pid.items(), key=lambda item: (ranks_by_pid.get(item[0], len(by_pid)), int(item[0])))
            if gpu in devices]
        if not held:
            owners = ", ".join(_process_name(pid, ranks_by_pid)
                               for pid, own in sorted(selected.items()) if own == gpu)
            rows.append(f"  {gpu}: nothing from the run, though {owners} selected it")
            continue
        together = max((b for _, b in lines.get(gpu, ())), default=sum(b for _, b in held))
        who = ", ".join(f"{_process_name(pid, ranks_by_pid)} {human_bytes(used)}"
                        for pid, used in held)
        rows.append(f"  {gpu}: {human_bytes(together)} at most together -- {who}")
    return rows


def _process_name(pid: str, ranks_by_pid: dict[str, int]) -> str:
    rank = ranks_by_pid.get(pid)
    return f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"
