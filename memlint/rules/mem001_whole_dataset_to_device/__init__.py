"""MEM001 whole-dataset-to-device: a whole data set put on the GPU at once instead of one batch at
a time.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM001", "whole-dataset-to-device", "warning",
                  ("cuda", "dev", ".to("),
                  walk_cost=13)
