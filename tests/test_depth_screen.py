"""The depth screen's bracket count (engine/syntax.py `_bracket_depth`) gives
what the plain loop over brackets gave, floor at 0 included, and
`dotted_name` what the list-and-join version gave."""

from __future__ import annotations

import random

import libcst as cst
import pytest

from memlint.analysis.names import dotted_name
from memlint.engine.syntax import _BRACKETS, _bracket_depth, _looks_deep


def _reference_depth(source: str) -> int:
    depth = deepest = 0
    for bracket in _BRACKETS.findall(source):
        depth = depth + 1 if bracket in "([{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("source", [
    "", "x = 1\n", "f(a[1], {2: (3,)})\n", ")" * 300 + "(" * 200, "]]](((", "(a)" * 1000,
    "print(':)')\n" * 50, "(" * 101 + ")" * 101, "(" * 100 + ")" * 100, "x = ')' + '(' * 150\n",
])
def test_bracket_depth_as_the_loop_counts_it(source: str) -> None:
    assert _bracket_depth(source) == _reference_depth(source)


def test_bracket_depth_on_random_text() -> None:
    rng = random.Random(20261123)
    for _ in range(20000):
        source = "".join(rng.choice("([{)]}a\n'") for _ in range(rng.randint(0, 60)))
        assert _bracket_depth(source) == _reference_depth(source), source


def test_the_screen_still_flags_deep_brackets_and_passes_shallow_ones() -> None:
    assert _looks_deep("x = " + "(" * 101 + "1" + ")" * 101 + "\n")
    assert not _looks_deep("x = " + "(" * 100 + "1" + ")" * 100 + "\n")
    # closing brackets with none open do not make later ones count deeper
    assert not _looks_deep(")" * 500 + "x = " + "(" * 100 + "1" + ")" * 100 + "\n")


def _reference_dotted(node) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


@pytest.mark.parametrize("code", ["a", "a.b", "a.b.c.d", "a().b", "a[0].b", "(a).b", "'s'.join",
                                  "a.b().c", "x if y else z"])
def test_dotted_name(code: str) -> None:
    node = cst.parse_expression(code)
    assert dotted_name(node) == _reference_dotted(node)
