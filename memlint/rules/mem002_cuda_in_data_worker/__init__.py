"""MEM002 cuda-in-data-worker: cUDA work in code that DataLoader worker processes run.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM002", "cuda-in-data-worker", "error",
                  ("Dataset", "DataLoader", "collate_fn", "worker_init_fn"),
                  gives_facts=True,
                  walk_cost=12)
