"""Every rule's entry, read from the rule packages (`memNNN_<name>/__init__.py`)
without importing the rule classes: the engine screens files, the configuration
checks codes and the reporters name rules from it, and imports a rule's
`rule.py` (and libcst with it) only for a file that must be parsed.

A rule package is found by its folder name alone, so adding a rule is adding
its package: nothing here lists them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from memlint.rules.entry import RuleEntry

RULES_PACKAGE = "memlint.rules"
_PACKAGE_NAME = re.compile(r"mem\d{3}_[a-z0-9_]+")


def rule_packages() -> dict[str, str]:
    """Code -> the rule's package (`MEM003` -> `memlint.rules.mem003_tensor_history_kept`),
    MEM000's page-only package included."""
    here = [str(Path(__file__).resolve().parent)]
    names = sorted(info.name for info in pkgutil.iter_modules(here)
                   if info.ispkg and _PACKAGE_NAME.fullmatch(info.name))
    return {name[:6].upper(): f"{RULES_PACKAGE}.{name}" for name in names}


def _read_entries() -> tuple[RuleEntry, ...]:
    entries = []
    for code, package in rule_packages().items():
        entry = getattr(importlib.import_module(package), "ENTRY", None)
        if entry is None:
            continue  # MEM000: the engine reports it; its package holds the page
        if entry.code != code:
            raise RuntimeError(f"{package} declares {entry.code}, its folder says {code}")
        entries.append(entry)
    return tuple(entries)


PACKAGES_BY_CODE: dict[str, str] = rule_packages()
CATALOGUE: tuple[RuleEntry, ...] = _read_entries()
ENTRIES_BY_CODE: dict[str, RuleEntry] = {entry.code: entry for entry in CATALOGUE}


def walk_shares(count: int) -> list[frozenset[str]]:
    """Every rule in one of `count` shares of about equal walk cost
    (`RuleEntry.walk_cost`): the costliest first, each to the lightest share
    so far."""
    shares: list[list[RuleEntry]] = [[] for _ in range(count)]
    for entry in sorted(CATALOGUE, key=lambda e: (-e.walk_cost, e.code)):
        min(shares, key=lambda share: sum(e.walk_cost for e in share)).append(entry)
    return [frozenset(entry.code for entry in share) for share in shares]
