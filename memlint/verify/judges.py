"""Per-rule judges: from what a probe measured to a verdict with units.

Each judge takes the meter's raw record and the run's facts and says
`confirmed`, `not-confirmed` (the line ran, the impact was below the
threshold: a likely false positive, said plainly) or `not-reached`. Judges
only read numbers; they never estimate one that was not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONFIRMED = "confirmed"
NOT_CONFIRMED = "not-confirmed"
NOT_REACHED = "not-reached"
ERROR = "error"

#: pinned copies must be at least this much faster to count
PINNED_SPEEDUP = 1.2
#: share of steps in which memory must not shrink for growth to be "steady"
STEADY_SHARE = 0.75


@dataclass
class Judgement:
    verdict: str
    measured: str
    numbers: dict = field(default_factory=dict)


@dataclass
class RunFacts:
    """What the runner knows about the whole run, beyond one meter."""

    min_bytes: int
    device: str
    outcome: dict = field(default_factory=dict)
    contexts: dict | None = None  #: ContextWatcher.stop()
    worker_hits: int = 0  #: executions of this finding's line in worker processes
    worker_errors: list = field(default_factory=list)  #: what it raised there


def human_bytes(size: float) -> str:
    sign = "-" if size < 0 else ""
    size = abs(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{sign}{size:.0f} {unit}" if unit == "B" else f"{sign}{size:.2f} {unit}"
        size /= 1024
    return f"{sign}{size:.2f} GiB"


def size_range(sizes) -> str:
    """`612.00 MiB`, or `518.00 MiB-612.00 MiB` when the sizes differ."""
    ordered = sorted(sizes)
    if ordered[0] == ordered[-1]:
        return human_bytes(ordered[0])
    return f"{human_bytes(ordered[0])}-{human_bytes(ordered[-1])}"


def loaded_on_gpu(loads: list[dict]) -> dict[str, int]:
    """Bytes that `torch.load` calls put on each CUDA device (LoadedDevicesMeter's records)."""
    on_gpu: dict[str, int] = {}
    for load in loads:
        for device, size in load.items():
            if device.startswith("cuda"):
                on_gpu[device] = on_gpu.get(device, 0) + size
    return on_gpu


def times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _too_small(what: str, facts: RunFacts) -> str:
    return f"{what}, below --min-bytes {human_bytes(facts.min_bytes)}: too small to confirm"


def judge_whole_dataset(record: dict, facts: RunFacts) -> Judgement:
    kept = max(record.get("allocated_delta", []), default=0)
    created = max(record.get("created_bytes", []), default=0)
    largest = max(kept, created)
    live = record.get("live_bytes_at_end", 0)
    numbers = {"allocated_delta_max": kept, "created_bytes_max": created,
               "live_bytes_at_end": live, "hits": record["hits"]}
    where = record.get("device") or facts.device
    if largest >= facts.min_bytes:
        if kept < facts.min_bytes:
            state = "freed within the statement"
        elif live >= facts.min_bytes:
            state = "still live at exit"
        else:
            state = "freed before exit"
        return Judgement(CONFIRMED, f"put {human_bytes(largest)} on {where}, {state}", numbers)
    return Judgement(NOT_CONFIRMED, _too_small(f"put {human_bytes(largest)} on {where}", facts),
                     numbers)


_FORK_ERROR = "Cannot re-initialize CUDA in forked subprocess"


def judge_worker_cuda(record: dict, facts: RunFacts) -> Judgement:
    contexts = facts.contexts or {}
    workers = {pid: used for pid, used in contexts.get("worker_context_bytes", {}).items()
               if used > 0}
    error = facts.outcome.get("error", {}).get("message", "")
    fork_errors = [e for e in facts.worker_errors if _FORK_ERROR in e]
    numbers = {"worker_errors": len(facts.worker_errors), "worker_contexts": len(workers),
               "worker_context_bytes": workers,
               "main_context_bytes": contexts.get("main_context_bytes", 0),
               "hits_in_main": record["hits"], "hits_in_workers": facts.worker_hits,
               "source": contexts.get("source")}
    if workers:
        each = size_range(workers.values())
        return Judgement(CONFIRMED, f"{len(workers)} worker process"
                         f"{'es' if len(workers) > 1 else ''} each created a CUDA context, "
                         f"{each} each", numbers)
    if fork_errors:
        return Judgement(CONFIRMED, f"raised '{_FORK_ERROR}' {times(len(fork_errors))} in "
                         "DataLoader workers (under spawn/forkserver, the default from "
                         "Python 3.14, each worker holds its own CUDA context instead)", numbers)
    if _FORK_ERROR in error:
        return Judgement(CONFIRMED, f"a DataLoader worker failed with '{_FORK_ERROR}' (under "
                         "spawn/forkserver, the default from Python 3.14, each worker holds "
                         "its own CUDA context instead)", numbers)
    if record["hits"] == 0 and facts.worker_hits == 0:
        return Judgement(NOT_REACHED, "the line never ran in this process or a forked worker "
                         "(spawned workers run the file unprobed)", numbers)
    if facts.worker_hits == 0:
        return Judgement(NOT_CONFIRMED, f"ran {times(record['hits'])} in the main process "
                         "(no worker processes): no extra CUDA context measured", numbers)
    return Judgement(NOT_CONFIRMED, f"ran {times(facts.worker_hits)} in worker processes, "
                     "but no worker was seen holding a CUDA context", numbers)


def judge_history_kept(record: dict, facts: RunFacts) -> Judgement:
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
    host = _host_graph_growth(record, numbers)
    if growth >= facts.min_bytes and steady >= STEADY_SHARE:
        return Judgement(CONFIRMED, what + (f"; {host}" if host else ""), numbers)
    if host:
        return Judgement(CONFIRMED, f"{host}; on the device {what}", numbers)
    if growth >= facts.min_bytes:
        return Judgement(NOT_CONFIRMED, f"{what}, but not steadily (grew in "
                         f"{steady:.0%} of steps)", numbers)
    return Judgement(NOT_CONFIRMED, _too_small(what, facts), numbers)


def judge_kept_on_device(record: dict, facts: RunFacts) -> Judgement:
    """MEM010: the container's CUDA bytes grow by a steady step per iteration
    (its first executions, measured on the container itself); the device's
    allocated bytes after the last execution say what the loop left behind.
    Without a readable container, the allocated growth alone decides, as for
    MEM003."""
    kept = record.get("kept_on_device_after", [])
    if len(kept) < 3:
        return judge_history_kept(record, facts)
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
        return Judgement(NOT_CONFIRMED, _too_small(what, facts), numbers)
    return Judgement(NOT_CONFIRMED, f"the container's device bytes did not grow steadily "
                                    f"(grew in {steady:.0%} of steps): {what}", numbers)


def _host_graph_growth(record: dict, numbers: dict) -> str:
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


def judge_grad_in_inference(record: dict, facts: RunFacts) -> Judgement:
    saved = record.get("saved", [])
    numbers = {"hits": record["hits"]}
    if not saved:
        return Judgement(NOT_REACHED, "the call never ran", numbers)
    activations = [s["activation_bytes"] for s in saved]
    largest = max(activations)
    total = sum(activations)
    numbers.update({"activation_bytes_max": largest, "activation_bytes_total": total,
                    "parameter_bytes_max": max(s["parameter_bytes"] for s in saved),
                    "tensors_max": max(s["tensors"] for s in saved),
                    "grad_enabled": any(s["grad_enabled"] for s in saved)})
    what = f"autograd saved {human_bytes(largest)} of activations for backward in one call, " \
           f"ran {times(len(saved))}, {human_bytes(total)} in all"
    if not numbers["grad_enabled"]:
        return Judgement(NOT_CONFIRMED, f"grad mode was off in all {len(saved)} calls: nothing "
                         "was saved for backward", numbers)
    if largest >= facts.min_bytes:
        return Judgement(CONFIRMED, what, numbers)
    return Judgement(NOT_CONFIRMED, _too_small(what, facts), numbers)


def _rate(size: int, seconds: float) -> str:
    return f"{size / seconds / 1e9:.1f} GB/s"


def judge_pin_memory(record: dict, facts: RunFacts) -> Judgement:
    batches = [b for b in record.get("batches", []) if "pinned_seconds" in b]
    numbers = {"hits": record["hits"], "loaders": record.get("loaders", 0), "batches": batches}
    if record["hits"] == 0:
        return Judgement(NOT_REACHED, "the DataLoader was never built", numbers)
    if not batches:
        why = "no copy was timed: no CUDA device" if not facts.device.startswith("cuda") \
            else "no batch with CPU tensors came out of the loader, nothing to copy"
        return Judgement(NOT_CONFIRMED, why, numbers)
    pageable = sum(b["pageable_seconds"] for b in batches)
    pinned = sum(b["pinned_seconds"] for b in batches)
    size = sum(b["bytes"] for b in batches)
    speedup = pageable / pinned if pinned > 0 else 0.0
    numbers.update({"bytes": size, "pageable_seconds": pageable, "pinned_seconds": pinned,
                    "speedup": speedup})
    what = (f"batches of {human_bytes(size / len(batches))} copied at {_rate(size, pageable)} "
            f"pageable vs {_rate(size, pinned)} pinned ({speedup:.1f}x)")
    if speedup >= PINNED_SPEEDUP:
        return Judgement(CONFIRMED, what, numbers)
    return Judgement(NOT_CONFIRMED, f"{what}: pinned memory is not faster here for batches "
                     "this small", numbers)


def judge_grad_mode(record: dict, facts: RunFacts) -> Judgement:
    modes = record.get("modes", [])
    numbers = {"hits": record["hits"], "modes": modes[:5]}
    if not modes:
        return Judgement(NOT_REACHED, "the call never ran", numbers)
    unchanged = [m for m in modes if m["grad_before"] == m["grad_after"]
                 and m["inference_before"] == m["inference_after"]]
    numbers["unchanged"] = len(unchanged)
    if unchanged:
        state = "enabled" if unchanged[0]["grad_after"] else "disabled"
        what = f"grad mode still {state} after the call ({len(unchanged)} of {len(modes)} " \
               "executions unchanged)"
        followed = [m for m in unchanged if "saved_after_bytes" in m]
        if followed:
            most = max(followed, key=lambda m: m["saved_after_bytes"])
            numbers["saved_after_bytes_max"] = most["saved_after_bytes"]
            until = "the script ended" if most["saved_after_until"] == "<module>" else \
                f"{most['saved_after_until']}() returned"
            what += f"; autograd then saved {human_bytes(most['saved_after_bytes'])} for " \
                    f"backward before {until}"
        return Judgement(CONFIRMED, what, numbers)
    return Judgement(NOT_CONFIRMED, "grad mode changed after the call", numbers)


def judge_load_device(record: dict, facts: RunFacts) -> Judgement:
    loads = record.get("loads", [])
    numbers = {"hits": record["hits"], "loads": loads}
    if not loads:
        return Judgement(NOT_REACHED, "torch.load never returned here", numbers)
    on_gpu = loaded_on_gpu(loads)
    if on_gpu:
        where = ", ".join(f"{human_bytes(size)} on {device}"
                          for device, size in sorted(on_gpu.items()))
        return Judgement(CONFIRMED, f"loaded {where} ({len(loads)} "
                         f"load{'s' if len(loads) != 1 else ''})", numbers)
    devices = sorted({d for load in loads for d in load}) or ["no tensors"]
    return Judgement(NOT_CONFIRMED, f"every loaded tensor stayed on {', '.join(devices)} "
                     "(the checkpoint was saved from there)", numbers)


def judge_default_device(record: dict, facts: RunFacts) -> Judgement:
    """MEM008: the line created a CUDA context, or left bytes, on a GPU other
    than the one its process selected (`LOCAL_RANK`)."""
    samples = record.get("samples", [])
    selected = record.get("selected")
    contexts = sorted({d for s in samples for d in s["new_contexts"]})
    kept: dict[str, int] = {}
    for sample in samples:
        for device, delta in sample["allocated_delta"].items():
            kept[device] = max(kept.get(device, 0), delta)
    numbers = {"hits": record["hits"], "selected": selected, "new_contexts": contexts,
               "allocated_delta_max": kept, "device_count": record.get("device_count", 0)}
    used = ", ".join([f"a CUDA context on {d}" for d in contexts] +
                     [f"{human_bytes(n)} on {d}" for d, n in sorted(kept.items()) if n > 0]) \
        or "nothing on any GPU"
    if not record.get("device_count"):
        return Judgement(NOT_CONFIRMED, "no CUDA device in this run", numbers)
    if selected is None:
        return Judgement(NOT_CONFIRMED, f"the line left {used}, but this process selected no "
                         "GPU (no LOCAL_RANK): run it with --nproc-per-node 2 to compare", numbers)
    missing = int(selected.split(":")[1]) >= numbers["device_count"]
    elsewhere = [d for d in contexts if d != selected] + \
        [d for d, n in kept.items() if d != selected and n >= facts.min_bytes]
    chose = f"this rank selected {selected} (LOCAL_RANK)" + \
        (", which this machine does not have" if missing else "")
    if elsewhere:
        return Judgement(CONFIRMED, f"{chose}; the line left {used}", numbers)
    return Judgement(NOT_CONFIRMED, f"{chose}; the line left {used}", numbers)


JUDGES = {
    "MEM001": judge_whole_dataset,
    "MEM002": judge_worker_cuda,
    "MEM003": judge_history_kept,
    "MEM004": judge_grad_in_inference,
    "MEM005": judge_pin_memory,
    "MEM006": judge_grad_mode,
    "MEM007": judge_load_device,
    "MEM008": judge_default_device,
    "MEM009": judge_kept_on_device,
    "MEM010": judge_kept_on_device,
}


def judge(code: str, record: dict | None, facts: RunFacts) -> Judgement:
    """The verdict for one finding; MEM002 is judged from the process facts
    even when the line never ran in the main process."""
    if record is None:
        record = {"hits": 0}
    if record["hits"] == 0 and code not in ("MEM002", "MEM005"):
        return Judgement(NOT_REACHED, "the line never ran", {"hits": 0})
    return JUDGES[code](record, facts)
