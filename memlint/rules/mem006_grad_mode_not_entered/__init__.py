"""MEM006 grad-mode-not-entered: `torch.no_grad()` on its own line does nothing: grad mode only
changes inside `with`.

The rule is `rule.py`, its reference page `page.md`, how `memlint verify`
measures it `verify.py`."""

from memlint.rules.entry import RuleEntry

ENTRY = RuleEntry("MEM006", "grad-mode-not-entered", "error",
                  ("no_grad", "inference_mode", "enable_grad"),
                  walk_cost=1)
