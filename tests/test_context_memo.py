"""`Context.qualify` keeps its answers only while nothing it reads changes:
every import, binding, loop target and scope change must show in the next
answer for the very same node."""

from __future__ import annotations

import libcst as cst
import pytest

from memlint.analysis.context import BindingSite, Context
from memlint.analysis.names import ImportTable
from memlint.analysis.walker import walk


class _Asker:
    """Asks `qualify` of every call's function, twice (the second from the memo),
    and again of every earlier call's function, each time against the answer
    worked out afresh."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.answers: list[tuple[str, str | None]] = []
        self.earlier: list[cst.BaseExpression] = []

    def visit_Call(self, node: cst.Call) -> None:
        first = self.ctx.qualify(node.func)
        assert self.ctx.qualify(node.func) == first
        self.answers.append((cst.Module([]).code_for_node(node.func), first))
        self.earlier.append(node.func)
        self.ask_again()

    def ask_again(self, node: cst.CSTNode | None = None) -> None:
        for func in self.earlier:
            assert self.ctx.qualify(func) == self.ctx._qualify(func)


def _answers(code: str) -> list[tuple[str, str | None]]:
    ctx = Context(ImportTable())
    asker = _Asker(ctx)
    every_type = {getattr(cst, name) for name in dir(cst)
                  if isinstance(getattr(cst, name), type)
                  and issubclass(getattr(cst, name), cst.CSTNode)}
    visitors = {t: [asker.ask_again] for t in every_type}
    visitors[cst.Call] = [asker.visit_Call]
    walk(cst.parse_module(code), ctx, visitors, {t: [asker.ask_again] for t in every_type})
    return asker.answers


@pytest.mark.parametrize("code, expected", [
    # an import after a first question
    ("zeros(1)\nfrom torch import zeros\nzeros(2)\n",
     [("zeros", None), ("zeros", "torch.zeros"), ]),
    # an import below a function is bound by the time the function runs
    ("def f():\n    zeros(1)\nfrom torch import zeros\nzeros(2)\n",
     [("zeros", "torch.zeros"), ("zeros", "torch.zeros")]),
    # a module-level rebinding forgets the import
    ("import torch as t\nt.ones(1)\nt = 3\nt.ones(2)\n",
     [("t.ones", "torch.ones"), ("t.ones", None)]),
    # a local of a function shadows it, only inside that function
    ("import torch\ndef f():\n    torch.ones(1)\n    torch = g()\n    torch.ones(2)\n"
     "torch.ones(3)\n",
     [("torch.ones", "torch.ones"), ("g", None), ("torch.ones", None),
      ("torch.ones", "torch.ones")]),
    # a loop target shadows it inside the function's loop
    ("from torch import zeros\ndef f(xs):\n    zeros(1)\n    for zeros in xs:\n"
     "        zeros(2)\n",
     [("zeros", "torch.zeros"), ("zeros", None)]),
])
def test_qualify_follows_every_change(code: str, expected: list) -> None:
    assert _answers(code) == expected


def test_the_same_node_asked_across_a_change_gets_the_new_answer() -> None:
    module = cst.parse_module("import torch\ndef f():\n    torch.ones(1)\n")
    ctx = Context(ImportTable())
    seen: list[str | None] = []

    def visit_call(node: cst.Call) -> None:
        seen.append(ctx.qualify(node.func))
        ctx.scope.bindings["torch"] = node  # as an assignment in the function would
        ctx._changes += 1
        seen.append(ctx.qualify(node.func))

    walk(module, ctx, {cst.Call: [visit_call]}, {})
    assert seen == ["torch.ones", None]


def test_binding_sites_stay_immutable() -> None:
    site = BindingSite(cst.Name("x"), (), True)
    with pytest.raises(AttributeError):
        site.value = cst.Name("y")  # type: ignore[misc]
    assert site.previous is None and site.branches == () and site.unpacked_from is None
