"""How `memlint verify` measures MEM005: each batch's host-to-device copy, as loaded and from a
pinned copy."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, Judgement, Numbers,
                                   Quantity, Record, RunFacts, human_bytes)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "LoaderCopyMeter"
#: judged from the loader's batches even when its line ran only to build it
JUDGED_WITHOUT_HITS = True
#: pinned copies must be at least this much faster to count
PINNED_SPEEDUP = 1.2


def _rate(size: int, seconds: float) -> str:
    return f"{size / seconds / 1e9:.1f} GB/s"


def judge(record: Record, facts: RunFacts) -> Judgement:
    batches = [b for b in record.get("batches", []) if "pinned_seconds" in b]
    numbers = {"hits": record["hits"], "loaders": record.get("loaders", 0), "batches": batches}
    if record["hits"] == 0:
        return Judgement(NOT_REACHED, "the DataLoader was never built", numbers)
    if not batches:
        untimed = next((b["untimed"] for b in record.get("batches", []) if "untimed" in b), None)
        why = "no copy was timed: no CUDA device" if not facts.device.startswith("cuda") \
            else f"no copy was timed: {untimed}" if untimed \
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


def _copy_rate(numbers: Numbers) -> float | None:
    """GB/s of the host-to-device copy of the loader's batches as it hands them
    over: pageable as loaded, or pinned when the loader pins them."""
    batches = [b for b in numbers.get("batches", []) if "pinned_seconds" in b]
    if not batches:
        return None
    seconds = sum(b["pinned_seconds"] if b["already_pinned"] else b["pageable_seconds"]
                  for b in batches)
    return sum(b["bytes"] for b in batches) / seconds / 1e9 if seconds > 0 else None


QUANTITIES = (Quantity("batch copy to the GPU as loaded", _copy_rate, "GB/s",
                         lower_is_better=False),)
