"""Each rule's own VALID / INVALID examples are its first tests (as in Fixit)."""

from __future__ import annotations

import pytest

from memlint import Settings, check_source
from memlint.rules import ALL_RULES


def _cases(kind: str):
    for rule in ALL_RULES:
        for i, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind.lower()}-{i}")


def _codes(rule, source: str) -> list[str]:
    only_this_rule = Settings(select=(rule.code,))
    return [f.code for f in check_source(source + "\n", "example.py", only_this_rule)]


@pytest.mark.parametrize("rule, example", list(_cases("INVALID")))
def test_invalid_example_is_flagged(rule, example):
    assert rule.code in _codes(rule, example)


@pytest.mark.parametrize("rule, example", list(_cases("VALID")))
def test_valid_example_is_left_alone(rule, example):
    assert _codes(rule, example) == []


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_rule_is_documented(rule):
    assert rule.__doc__ and rule.name and rule.keywords
    assert len(rule.VALID) >= 8 and len(rule.INVALID) >= 8
