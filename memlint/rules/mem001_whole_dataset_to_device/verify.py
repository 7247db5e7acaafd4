"""How `memlint verify` measures MEM001: the device bytes the statement left allocated, and whether
they stay live."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, Judgement, Numbers, Quantity, Record,
                                   RunFacts, human_bytes, too_small)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "DeviceBytesMeter"


def judge(record: Record, facts: RunFacts) -> Judgement:
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
    return Judgement(NOT_CONFIRMED, too_small(f"put {human_bytes(largest)} on {where}", facts),
                     numbers)


def _bytes_put(numbers: Numbers) -> float | None:
    if "allocated_delta_max" not in numbers:
        return None
    put: float = max(numbers["allocated_delta_max"], numbers["created_bytes_max"])
    return put


QUANTITIES = (Quantity("put on the GPU by the statement", _bytes_put, "bytes"),)
