"""How `memlint verify` measures MEM010: the device bytes the collecting container keeps per
iteration."""

from __future__ import annotations

from memlint.verify.judges import Numbers, Quantity
from memlint.verify.judges import judge_kept_growth as judge  # noqa: F401  (this rule's judge)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "KeptOnDeviceMeter"


def _per_iteration(numbers: Numbers) -> float | None:
    return numbers.get("per_execution_bytes")


QUANTITIES = (Quantity("kept on the device per iteration", _per_iteration, "bytes"),)
