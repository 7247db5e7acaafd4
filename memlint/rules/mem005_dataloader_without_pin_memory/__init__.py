"""MEM005 dataloader-without-pin-memory: a DataLoader feeding a GPU without pinned memory: every
batch is copied from pageable memory.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM005", "dataloader-without-pin-memory", "note",
                  ("DataLoader",),
                  walk_cost=20)
