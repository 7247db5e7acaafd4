"""The size of a CUDA context, measured the same way every time: what NVML
shows for a fresh process that has made its context on the GPU and allocated
nothing (`torch.cuda.synchronize()` makes it; no tensor is created).

Read off the run itself, the context was unstable (518 vs 610 MiB in two runs
of one program; 30-104 MiB under torchrun, the rest called "other"): the
process's first allocation comes with the context, in the same call, so no
sample sees the context alone. Lazily loaded kernels, cuBLAS workspaces and
the like are what the run adds beyond it: the account's "other".
"""

from __future__ import annotations

import functools
import subprocess

_PROBE = r"""
import os, sys, time
import pynvml, torch
index = int(sys.argv[1])
torch.cuda.set_device(index)
torch.cuda.synchronize()
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(index)
readings = []
for _ in range(40):  # NVML's figure settles a little after the context is made
    used = [p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.pid == os.getpid()]
    readings.append(used[0] if used else 0)
    if len(readings) >= 3 and readings[-1] == readings[-2] == readings[-3] > 0:
        break
    time.sleep(0.05)
print(readings[-1])
"""


@functools.cache
def context_bytes(device: str, python: str) -> int | None:
    """The context size on `device` (`cuda:N`), from a probe process run with
    `python` (once per device and interpreter: `verify --fix` and several
    scripts reuse it); None where it cannot be measured (no NVML, no GPU)."""
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    try:
        done = subprocess.run([python, "-c", _PROBE, str(index)], capture_output=True,
                              text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return int(text[0]) if text and text[0].isdigit() and int(text[0]) > 0 else None
