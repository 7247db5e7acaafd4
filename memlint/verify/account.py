"""The memory account of a verify run: where the device memory that
nvidia-smi shows for each process goes.

For the main process, a thread in the child samples, at the same instant,
what NVML says the process uses on the device and what PyTorch has reserved
and allocated there; the account is read at the sample where NVML's figure
peaked: NVML total = CUDA context (NVML-minus-reserved at the first sample,
before other libraries add their buffers) + PyTorch reserved (of
which allocated) + the rest (other libraries' buffers: cuBLAS workspaces,
NCCL, a second context). DataLoader workers and other processes of the run
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

    def __init__(self, torch_device, interval: float = 0.02) -> None:
        import torch

        self.torch = torch
        self.device = torch_device
        self.interval = interval
        self.query = _own_usage_query(torch_device.index or 0)
        self.start = time.perf_counter()
        self.samples: list[tuple[float, int, int, int]] = []  # t, nvml, reserved, allocated
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def begin(self) -> None:
        """Sample until `end`. Nothing is allocated for it: the context is read
        off the first sample (NVML's figure minus reserved, before other
        libraries add buffers of their own)."""
        if self.query is None:
            return
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        try:
            used = self.query()
            if used is None:
                return
            self.samples.append((time.perf_counter() - self.start, used,
                                 self.torch.cuda.memory_reserved(self.device),
                                 self.torch.cuda.memory_allocated(self.device)))
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
        # the first sample, before other libraries add buffers of their own (a
        # minimum over the run is not: NVML's figure can lag a large reserve)
        _, used, reserved, _ = self.samples[0]
        context = max(used - reserved, 0)
        return {"pid": os.getpid(), "device": str(self.device), "context_bytes": context,
                "at_peak": _row(peak), "at_exit": _row(last),
                "peak_reserved": max(s[2] for s in self.samples),
                "peak_allocated": max(s[3] for s in self.samples),
                "timeline": [(round(t, 4), n, r) for t, n, r, _ in self.samples[::5]]}


def _row(sample: tuple[float, int, int, int]) -> dict:
    t, used, reserved, allocated = sample
    return {"t": round(t, 4), "nvml": used, "reserved": reserved, "allocated": allocated}


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
                 ranks: bool = False) -> list[str]:
    """The account as text rows: the main process split into its parts, each
    other process of the run (DataLoader workers, or in a launched job of
    `ranks` the other ranks too), and memory held by processes not ours."""
    rows = []
    if main is not None:
        peak = main["at_peak"]
        context = main.get("context_bytes") or 0
        rest = peak["nvml"] - context - peak["reserved"]
        rows.append(f"  main process (pid {main['pid']}), at its NVML peak "
                    f"{human_bytes(peak['nvml'])} ({peak['t']:.1f} s into the run):")
        rows.append(f"    CUDA context            {human_bytes(context):>12}")
        rows.append(f"    PyTorch reserved        {human_bytes(peak['reserved']):>12}"
                    f"   of which allocated {human_bytes(peak['allocated'])}")
        rows.append(f"    other (libraries)       {human_bytes(max(rest, 0)):>12}")
        rows.append(f"    run's peaks: reserved {human_bytes(main['peak_reserved'])}, "
                    f"allocated {human_bytes(main['peak_allocated'])}")
        devices = (contexts or {}).get("devices_by_pid", {}).get(str(main["pid"]), {})
        for device, used in sorted(devices.items()):
            if device != main.get("device"):
                rows.append(f"    also on {device}, not its own GPU: {human_bytes(used)}"
                            + (" (a CUDA context, at least)" if used >= 256 * 2**20 else ""))
    own = str(main["pid"]) if main is not None else None
    workers = {pid: used for pid, used in (contexts or {}).get("worker_context_bytes", {}).items()
               if used > 0 and pid != own}
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
