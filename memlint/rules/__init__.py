"""The rule registry: every module in this package holds one rule.

Codes are unique and never reused; that is checked here, once.
"""

from __future__ import annotations

import importlib
import pkgutil

from memlint.rules.base import Rule

SYNTAX_ERROR_CODE = "MEM000"
SYNTAX_ERROR_NAME = "syntax-error"


def _load() -> list[type[Rule]]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    rules = sorted(Rule.__subclasses__(), key=lambda r: r.code)
    codes = [r.code for r in rules]
    if len(codes) != len(set(codes)) or SYNTAX_ERROR_CODE in codes:
        raise RuntimeError(f"rule codes must be unique: {codes}")
    return rules


ALL_RULES: list[type[Rule]] = _load()
RULES_BY_CODE: dict[str, type[Rule]] = {r.code: r for r in ALL_RULES}
ALL_CODES: list[str] = [SYNTAX_ERROR_CODE, *RULES_BY_CODE]
NAMES_BY_CODE: dict[str, str] = {SYNTAX_ERROR_CODE: SYNTAX_ERROR_NAME,
                                 **{r.code: r.name for r in ALL_RULES}}
#: error > warning > note; a finding's severity is one of these
SEVERITIES: tuple[str, ...] = ("note", "warning", "error")
SEVERITY_BY_CODE: dict[str, str] = {SYNTAX_ERROR_CODE: "error",
                                    **{r.code: r.severity for r in ALL_RULES}}
