"""MEM003 tensor-history-kept: a tensor with autograd history kept across loop iterations holds
every iteration's graph.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM003", "tensor-history-kept", "error",
                  ("for ", "while "), gives_facts=True,
                  walk_cost=22)
