"""MEM004 grad-in-inference: forward passes in inference code with autograd still recording.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM004", "grad-in-inference", "warning",
                  ("eval", "test", "valid", "predict", "infer", "generat", "sampl", "volatile"),
                  walk_cost=23)
