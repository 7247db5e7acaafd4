"""Host-to-device copies timed through the CUDA runtime itself (cudaMalloc,
cudaMemcpy), outside PyTorch's caching allocator.

MEM005's meter times each of a loader's first batches as it arrives, while the
program still holds the previous batch on the GPU: copies made with
`tensor.to("cuda")` doubled the program's allocated and reserved peaks under
verify (128 MiB instead of 64 MiB for 64 MiB batches). Device memory taken
from the runtime is invisible to PyTorch's statistics and is freed at once.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import torch

_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice
_runtime: ctypes.CDLL | None = None


def _cuda_runtime() -> ctypes.CDLL | None:
    """The CUDA runtime library PyTorch loaded into this process (read from
    /proc/self/maps: its file name carries the CUDA version), else None."""
    global _runtime
    if _runtime is None:
        torch.cuda.init()
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
        except OSError:
            return None
        for path in sorted(paths):
            try:
                _runtime = ctypes.CDLL(path)
                break
            except OSError:
                continue
    return _runtime


def copy_seconds(tensors: Sequence[torch.Tensor], repeats: int) -> float | None:
    """The fastest of `repeats` copies (after one to warm up) of `tensors`, host
    memory as they are (pageable or pinned), into one device buffer of their
    total size on the current GPU; None where the runtime cannot be reached."""
    runtime = _cuda_runtime()
    if runtime is None:
        return None
    sources = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    sizes = [t.numel() * t.element_size() for t in sources]
    buffer = ctypes.c_void_p()
    if runtime.cudaMalloc(ctypes.byref(buffer), ctypes.c_size_t(max(sum(sizes), 1))) != 0:
        return None
    base = buffer.value
    assert base is not None  # cudaMalloc succeeded
    try:
        best = float("inf")
        for _ in range(repeats + 1):
            runtime.cudaDeviceSynchronize()
            start = time.perf_counter()
            offset = 0
            for source, size in zip(sources, sizes):
                runtime.cudaMemcpy(ctypes.c_void_p(base + offset),
                                   ctypes.c_void_p(source.data_ptr()),
                                   ctypes.c_size_t(size), _HOST_TO_DEVICE)
                offset += size
            runtime.cudaDeviceSynchronize()
            best = min(best, time.perf_counter() - start)
        return best
    finally:
        runtime.cudaFree(buffer)
