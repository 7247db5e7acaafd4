"""How `memlint verify` measures MEM004: the bytes autograd saved for backward during the flagged
call."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, Judgement, Numbers,
                                   Quantity, Record, RunFacts, human_bytes, times, too_small)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "SavedTensorsMeter"


def judge(record: Record, facts: RunFacts) -> Judgement:
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
    return Judgement(NOT_CONFIRMED, too_small(what, facts), numbers)


def _saved_for_backward(numbers: Numbers) -> float | None:
    if numbers.get("hits", 0) == 0:
        return None
    saved: float = numbers.get("activation_bytes_max", 0)
    return saved


QUANTITIES = (Quantity("activations saved for backward in one call", _saved_for_backward,
                         "bytes"),)
