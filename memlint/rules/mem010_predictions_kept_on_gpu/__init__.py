"""MEM010 predictions-kept-on-gpu: model outputs collected over a whole data set while still on the
GPU.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM010", "predictions-kept-on-gpu", "error",
                  ("append", "extend", "insert", "cat(", "stack(", "concat"),
                  walk_cost=8)
