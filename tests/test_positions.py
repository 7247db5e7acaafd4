"""The targeted position pass must agree with libcst's PositionProvider, node for node."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from memlint.engine.positions import positions_of
from tests.expectations import FIXTURES, fixture_files

SHAPES = {
    "crlf": "import torch\r\nx = torch.load(\r\n    p)\r\n",
    "tabs and form feed": "if x:\n\tif y:\n\t\tz = f(a,\n\t\t      b)\n\x0c\ndef g():\n    return 1\n",
    "decorators and comments": "@torch.no_grad()\n# c\ndef f(x):  # t\n    return [m(y)\n            for y in x]\n",
    "semicolons and strings": 'a = """x\ny"""; b = f(1); c = g(\n 2)\n',
    "no trailing newline": "x = torch.load(p)",
    "empty": "",
}


def _assert_same_as_libcst(source: str) -> int:
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = [n for n in expected if not isinstance(n, cst.Module)]
    ours = positions_of(module, nodes)
    for node in nodes:
        assert ours[id(node)] == expected[node], (type(node).__name__, cst.Module([]).code_for_node(node))
    return len(nodes)


@pytest.mark.parametrize("source", SHAPES.values(), ids=SHAPES.keys())
def test_positions_match_libcst_on_awkward_shapes(source):
    _assert_same_as_libcst(source)


def test_positions_match_libcst_on_every_node_of_every_fixture():
    checked = sum(_assert_same_as_libcst(p.read_text(encoding="utf-8"))
                  for p in fixture_files(".py"))
    assert checked > 10_000, f"only {checked} nodes compared under {FIXTURES}"
