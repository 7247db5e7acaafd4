"""Judging what a probe measured: the verdicts, the helpers every rule's
`verify.py` shares, and the dispatch to the rule's own judge.

Each judge takes the meter's raw record and the run's facts and says
`confirmed`, `not-confirmed` (the line ran, the impact was below the
threshold: a likely false positive, said plainly) or `not-reached`. Judges
only read numbers; they never estimate one that was not measured.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from memlint.rules.catalogue import PACKAGES_BY_CODE

CONFIRMED = "confirmed"
NOT_CONFIRMED = "not-confirmed"
NOT_REACHED = "not-reached"
ERROR = "error"

#: what a meter recorded for one flagged line, as read back from the child's
#: JSON: which keys it has depends on the meter
Record = dict[str, Any]
#: what a judge read from a record, for the report and a fix's effect (JSON values)
Numbers = dict[str, Any]

#: share of steps in which memory must not shrink for growth to be "steady"
STEADY_SHARE = 0.75


@dataclass
class Judgement:
    verdict: str
    measured: str
    numbers: Numbers = field(default_factory=dict)


@dataclass
class RunFacts:
    """What the runner knows about the whole run, beyond one meter."""

    min_bytes: int
    device: str
    outcome: dict[str, Any] = field(default_factory=dict)  #: the child's, from its JSON
    contexts: dict[str, Any] | None = None  #: ContextWatcher.stop(), through JSON
    worker_hits: int = 0  #: executions of this finding's line in worker processes
    worker_errors: list[str] = field(default_factory=list)  #: what it raised there


@dataclass(frozen=True)
class Quantity:
    """What a rule's fix should lower (or raise), read from its judge's numbers."""

    what: str
    read: Callable[[Numbers], float | None]
    unit: str  # "bytes", "GB/s" or "graph nodes"
    lower_is_better: bool = True
    #: whether this is the quantity a run's finding was confirmed on (a rule
    #: confirmed on host graph nodes compares nodes, not device bytes)
    applies: Callable[[Numbers], bool] = lambda numbers: True


def human_bytes(size: float) -> str:
    sign = "-" if size < 0 else ""
    size = abs(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{sign}{size:.0f} {unit}" if unit == "B" else f"{sign}{size:.2f} {unit}"
        size /= 1024
    return f"{sign}{size:.2f} GiB"


def size_range(sizes: Iterable[float]) -> str:
    """`612.00 MiB`, or `518.00 MiB-612.00 MiB` when the sizes differ."""
    ordered = sorted(sizes)
    if ordered[0] == ordered[-1]:
        return human_bytes(ordered[0])
    return f"{human_bytes(ordered[0])}-{human_bytes(ordered[-1])}"


def loaded_on_gpu(loads: list[dict[str, int]]) -> dict[str, int]:
    """Bytes that `torch.load` calls put on each CUDA device (LoadedDevicesMeter's records)."""
    on_gpu: dict[str, int] = {}
    for load in loads:
        for device, size in load.items():
            if device.startswith("cuda"):
                on_gpu[device] = on_gpu.get(device, 0) + size
    return on_gpu


def times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def too_small(what: str, facts: RunFacts) -> str:
    return f"{what}, below --min-bytes {human_bytes(facts.min_bytes)}: too small to confirm"


def judge_growth(record: Record, facts: RunFacts) -> Judgement:
    after = record.get("allocated_after", [])
    numbers = {"hits": record["hits"], "samples": len(after)}
    if len(after) < 3:
        return Judgement(NOT_CONFIRMED, f"the line ran {len(after)} time(s): too few "
                         "executions to measure growth", numbers)
    steps = [b - a for a, b in zip(after[1:], after[2:])]  # the first execution warms up
    growth = after[-1] - after[1]
    per_step = growth / len(steps)
    steady = sum(1 for s in steps if s >= 0) / len(steps)
    numbers.update({"growth_bytes": growth, "per_execution_bytes": per_step,
                    "non_shrinking_share": steady})
    what = f"{human_bytes(per_step)} retained per iteration over {len(steps)} iterations " \
           f"({human_bytes(growth)} in all)"
    what = "+" + what if per_step >= 0 else what
    host = host_graph_growth(record, numbers)
    if growth >= facts.min_bytes and steady >= STEADY_SHARE:
        numbers["confirmed_on"] = "device"
        return Judgement(CONFIRMED, what + (f"; {host}" if host else ""), numbers)
    if host:
        numbers["confirmed_on"] = "host"
        return Judgement(CONFIRMED, f"{host}; on the device {what}", numbers)
    if growth >= facts.min_bytes:
        return Judgement(NOT_CONFIRMED, f"{what}, but not steadily (grew in "
                         f"{steady:.0%} of steps)", numbers)
    return Judgement(NOT_CONFIRMED, too_small(what, facts), numbers)


def judge_kept_growth(record: Record, facts: RunFacts) -> Judgement:
    """MEM010: the container's CUDA bytes grow by a steady step per iteration
    (its first executions, measured on the container itself); the device's
    allocated bytes after the last execution say what the loop left behind.
    Without a readable container, the allocated growth alone decides, as for
    MEM003."""
    kept = record.get("kept_on_device_after", [])
    if len(kept) < 3:
        return judge_growth(record, facts)
    steps = [b - a for a, b in zip(kept[1:], kept[2:])]
    per_step = (kept[-1] - kept[1]) / len(steps)
    steady = sum(1 for step in steps if step > 0) / len(steps)
    after = record.get("allocated_after", [])
    numbers = {"hits": record["hits"], "samples": len(kept), "per_execution_bytes": per_step,
               "kept_on_device_bytes": kept[-1], "growing_share": steady}
    left = ""
    if len(after) >= 2:
        numbers["loop_growth_bytes"] = after[-1] - after[0]
        left = f"; the device's allocation grew {human_bytes(after[-1] - after[0])} over " \
               f"{len(after)} iterations"
    what = (f"+{human_bytes(per_step)} kept on the device per iteration "
            f"({human_bytes(kept[-1])} held after {len(kept)} iterations{left})")
    if per_step * len(steps) >= facts.min_bytes and steady >= STEADY_SHARE:
        return Judgement(CONFIRMED, what, numbers)
    if per_step > 0 and steady >= STEADY_SHARE:
        return Judgement(NOT_CONFIRMED, too_small(what, facts), numbers)
    return Judgement(NOT_CONFIRMED, f"the container's device bytes did not grow steadily "
                                    f"(grew in {steady:.0%} of steps): {what}", numbers)


def host_graph_growth(record: Record, numbers: Numbers) -> str:
    """'+7 autograd graph nodes kept alive per iteration ...' when the live
    graph grew at (nearly) every sampled execution, else ''. Nodes are counted,
    not sized (they are C++ objects); the resident memory is shown beside."""
    nodes = record.get("graph_nodes_after", [])
    if len(nodes) < 4:
        return ""
    steps = [b - a for a, b in zip(nodes[1:], nodes[2:])]
    per_step = (nodes[-1] - nodes[1]) / len(steps)
    growing = sum(1 for s in steps if s > 0) / len(steps)
    numbers.update({"graph_nodes_per_execution": per_step, "graph_nodes_growing_share": growing})
    if per_step < 1 or growing < STEADY_SHARE:
        return ""
    text = f"+{per_step:.0f} autograd graph nodes kept alive per iteration on the host " \
           f"({nodes[1]} -> {nodes[-1]} over {len(steps)} iterations)"
    resident = record.get("resident_after", [])
    if len(resident) == len(nodes) and resident[-1] > resident[1]:
        numbers["resident_growth_bytes"] = resident[-1] - resident[1]
        text += f", resident memory +{human_bytes(resident[-1] - resident[1])}"
    return text


def rule_verify(code: str) -> ModuleType:
    """The rule's `verify.py`: its `METER` (a class in meters.py), `judge`, and
    `QUANTITIES` (what its fix changes, the first that applies to the run as
    written; empty where a fix changes no number)."""
    return importlib.import_module(f"{PACKAGES_BY_CODE[code]}.verify")


def judge(code: str, record: Record | None, facts: RunFacts) -> Judgement:
    """The verdict for one finding; rules judged from the run as a whole (MEM002's
    workers, MEM005's batches) are judged even when the line never ran here."""
    if record is None:
        record = {"hits": 0}
    plugin = rule_verify(code)
    if record["hits"] == 0 and not getattr(plugin, "JUDGED_WITHOUT_HITS", False):
        return Judgement(NOT_REACHED, "the line never ran", {"hits": 0})
    verdict: Judgement = plugin.judge(record, facts)
    return verdict
