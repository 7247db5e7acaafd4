"""MEM005's fix: pin the loader's memory."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.loaders import PIN_MEMORY_POSITION
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan
from memlint.rules.rewrites import with_keyword


def pin_fix(loader: cst.Call, host_dataset: bool, device_chosen_at_run_time: bool,
            ctx: Context) -> FixPlan:
    """`pin_memory=True` changes no value, only where the host keeps a batch:
    safe for data sets known to give host tensors (a project's own might
    give CUDA ones, which cannot be pinned). A device picked at run time may
    be the CPU, where pinning warns: `pin_memory=torch.cuda.is_available()`."""
    torch = ctx.names.local_name_of("torch")
    value = f"{torch}.cuda.is_available()" if device_chosen_at_run_time and torch else "True"
    return FixPlan(SAFE if host_dataset else UNSAFE, f"pass pin_memory={value}",
                   ((loader, with_keyword(loader, "pin_memory", value, PIN_MEMORY_POSITION)),))
