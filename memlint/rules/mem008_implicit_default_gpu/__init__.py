"""MEM008 implicit-default-gpu: work put on the default GPU (cuda:0) by a program that picks a GPU
per process.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.analysis.screens import SELECTION_MARKERS, may_select_and_use_default_device
from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM008", "implicit-default-gpu", "warning",
                  SELECTION_MARKERS,  # lower-cased, and a default-device use too
                  screen=may_select_and_use_default_device,
                  walk_cost=2)
