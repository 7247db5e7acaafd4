"""The rule registry: every package `memNNN_<name>/` here holds one rule
(`rule.py`), its page and how `memlint verify` measures it; `catalogue.py`
finds them.

Codes, names and severities come from the catalogue, which imports nothing
heavy; the rule classes (and libcst with them) are imported on first use of
`ALL_RULES` or `RULES_BY_CODE`, so that `memlint check` imports libcst only
when a file has to be parsed. Codes are unique and never reused, and every
entry has its class: both checked when the classes load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from memlint.rules.catalogue import CATALOGUE, PACKAGES_BY_CODE
from memlint.rules.measured import preview_codes

if TYPE_CHECKING:  # made by `__getattr__` on first use
    from memlint.rules.base import Rule

    ALL_RULES: list[type[Rule]]
    RULES_BY_CODE: dict[str, type[Rule]]

SYNTAX_ERROR_CODE = "MEM000"
SYNTAX_ERROR_NAME = "syntax-error"

ALL_CODES: list[str] = [SYNTAX_ERROR_CODE, *(entry.code for entry in CATALOGUE)]
NAMES_BY_CODE: dict[str, str] = {SYNTAX_ERROR_CODE: SYNTAX_ERROR_NAME,
                                 **{entry.code: entry.name for entry in CATALOGUE}}
#: error > warning > note; a finding's severity is one of these
SEVERITIES: tuple[str, ...] = ("note", "warning", "error")
SEVERITY_BY_CODE: dict[str, str] = {SYNTAX_ERROR_CODE: "error",
                                    **{entry.code: entry.severity for entry in CATALOGUE}}
#: rules not yet trusted on unseen code: they run only when asked for
#: (`measured.py`); never MEM000, which says a file could not be checked at
#: all (its figures say how often memlint misreads code that runs)
PREVIEW_CODES: frozenset[str] = preview_codes() - {SYNTAX_ERROR_CODE}


def how_it_runs(code: str) -> str:
    """What `memlint rules` and the README say of a code: always, default or preview."""
    if code == SYNTAX_ERROR_CODE:
        return "always"
    return "preview" if code in PREVIEW_CODES else "default"


def _load() -> list[type[Rule]]:
    from memlint.rules.base import Rule

    for entry in CATALOGUE:
        importlib.import_module(f"{PACKAGES_BY_CODE[entry.code]}.rule")
    rules = sorted(Rule.__subclasses__(), key=lambda r: r.code)
    codes = [r.code for r in rules]
    if len(codes) != len(set(codes)) or SYNTAX_ERROR_CODE in codes \
            or codes != sorted(entry.code for entry in CATALOGUE):
        raise RuntimeError(f"rule codes must be unique and catalogued: {codes}")
    return rules


def __getattr__(name: str) -> object:
    """`ALL_RULES` and `RULES_BY_CODE`, loaded on first use."""
    if name in ("ALL_RULES", "RULES_BY_CODE"):
        rules = _load()
        globals().update(ALL_RULES=rules, RULES_BY_CODE={r.code: r for r in rules})
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
