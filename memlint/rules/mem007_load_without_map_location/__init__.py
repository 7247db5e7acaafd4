"""MEM007 load-without-map-location: `torch.load` without `map_location` puts tensors back on the
GPU they were saved from.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM007", "load-without-map-location", "warning",
                  ("load", "save"),  # saves too: what a file saves tells the loads of others
                  gives_facts=True,
                  walk_cost=2)
