"""What the engine knows of a rule before importing it: the record each rule
package declares as `ENTRY` in its `__init__.py`, which imports nothing heavy."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class RuleEntry(NamedTuple):
    code: str
    name: str
    #: "error" (a leak, a crash, a call with no effect), "warning" (memory that
    #: grows with the data or the model) or "note" (speed): the default, which
    #: `[tool.memlint.severity]` overrides; `--fail-on` decides the exit code
    severity: str
    #: the file is only parsed for this rule if its text contains one of these
    keywords: tuple[str, ...]
    #: a screen that needs more than one keyword: (text, lower-cased text) -> bool
    screen: Callable[[str, str], bool] | None = None
    #: the rule also tells other files what this one does (what it saves, what its
    #: functions return): in a run that selects it for any file it walks every
    #: file its screen passes, selected there or not, so that no file's findings
    #: depend on what is selected for another (only its own findings read them)
    gives_facts: bool = False
    #: about what its walk of a big model file costs, in percent of all
    #: rules' (`bench/walk_costs.py`): the editor server splits a file's
    #: rules over its workers by it
    walk_cost: int = 1

    def wants(self, source: str, lowered: str) -> bool:
        """Whether the file's text could hold a finding of this rule."""
        if self.screen is not None:
            return self.screen(source, lowered)
        return any(k in source for k in self.keywords)
