"""How `memlint verify` measures MEM003: the device bytes (and host graph nodes) kept per execution
of the line."""

from __future__ import annotations

from memlint.verify.judges import Numbers, Quantity
from memlint.verify.judges import judge_growth as judge  # noqa: F401  (this rule's judge)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "GrowthMeter"


def _per_iteration(numbers: Numbers) -> float | None:
    return numbers.get("per_execution_bytes")


QUANTITY = Quantity("kept per iteration", _per_iteration, "bytes")
