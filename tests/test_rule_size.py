"""A rule is a small query over the shared analyses: no rule module over 400
lines (issue 26). A rule that was still a private analysis engine would be
listed in SHRINKING with its line count, and could only shrink until under the
limit; none is listed now, and every rule module is held to the limit."""

from __future__ import annotations

from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parent.parent / "memlint" / "rules"
LIMIT = 400
#: rule module -> the most lines it may have until it is cut down (2026-11-26)
SHRINKING: dict[str, int] = {}


@pytest.mark.parametrize("module", sorted(RULES.glob("mem*/*.py")),
                         ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_rule_module_grows_past_its_limit(module):
    lines = len(module.read_text(encoding="utf-8").splitlines())
    ceiling = SHRINKING.get(module.parent.name, LIMIT) if module.name == "rule.py" else LIMIT
    assert lines <= ceiling, f"{module.parent.name}/{module.name}: {lines} lines > {ceiling}"


def test_a_rule_under_the_limit_leaves_the_list():
    """Once a listed rule is under the limit, its entry goes: the list only shrinks."""
    small = [name for name, _ in SHRINKING.items()
             if len((RULES / name / "rule.py").read_text(encoding="utf-8").splitlines()) <= LIMIT]
    assert small == []
