"""How `memlint verify` measures MEM006: the grad mode after the statement, and the bytes saved by
what runs next."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, Judgement, Record,
                                   RunFacts, human_bytes)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "GradModeMeter"


def judge(record: Record, facts: RunFacts) -> Judgement:
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


#: its fix changes no number `verify --fix` compares
QUANTITIES = ()
