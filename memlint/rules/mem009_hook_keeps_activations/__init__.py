"""MEM009 hook-keeps-activations: a forward or backward hook that keeps every call's activation (or
gradient) on the GPU.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM009", "hook-keeps-activations", "error",
                  ("register_forward_hook", "register_full_backward_hook", "register_backward_hook",
                   "register_forward_pre_hook", "register_hook"),
                  walk_cost=3)
