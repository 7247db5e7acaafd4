"""How `memlint verify` measures MEM003: the device bytes (and host graph nodes) kept per execution
of the line."""

from __future__ import annotations

from memlint.verify.judges import Numbers, Quantity
from memlint.verify.judges import judge_growth as judge  # noqa: F401  (this rule's judge)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "GrowthMeter"


def _per_iteration(numbers: Numbers) -> float | None:
    return numbers.get("per_execution_bytes")


def _graph_nodes_per_iteration(numbers: Numbers) -> float | None:
    return numbers.get("graph_nodes_per_execution")


def _confirmed_on_the_host(numbers: Numbers) -> bool:
    """A loss kept after its backward: the device freed what the graph saved,
    the graph's nodes stay on the host."""
    return numbers.get("confirmed_on") == "host"


QUANTITIES = (Quantity("autograd graph nodes kept per iteration", _graph_nodes_per_iteration,
                       "graph nodes", applies=_confirmed_on_the_host),
              Quantity("kept per iteration", _per_iteration, "bytes"))
