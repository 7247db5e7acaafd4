"""How `memlint verify` measures MEM008: per rank, the devices the line put a context or bytes on
vs the one it selected."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, Judgement, Record, RunFacts,
                                   human_bytes)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "DefaultDeviceMeter"


def judge(record: Record, facts: RunFacts) -> Judgement:
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


#: its fix changes no number `verify --fix` compares
QUANTITIES = ()
