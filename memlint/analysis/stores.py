"""Where a loop keeps something for later: a container or a running value that
outlives the iteration (`outs.append(x)`, `total += loss`, `feats =
torch.cat((feats, z))`).

Owned here for every rule that asks what such a store keeps: MEM003 (a value
with autograd history) and MEM010 (a GPU tensor without it). Each rule judges
the value; this module finds the store, the container and the loops whose
iterations the container survives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from memlint.analysis.context import Context, Loop, other_branch
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import CONCATENATIONS, INDEX_RANGES

#: Container methods that keep their argument, with the verb a message uses.
STORING_METHODS = {"append": "append", "extend": "extend with", "insert": "insert",
                   "appendleft": "append"}

_DATA_LOOP = re.compile(r"load|batch|data|epoch|step|iter|sample|episode|train|valid|val_|"
                        r"test|eval|input|image|img|example|\b(x|y|xb|yb|dl|ds)\b|"
                        r"range\(\d{2,}\)", re.IGNORECASE)
#: A loop across batches: `_DATA_LOOP` less the words of one batch's parts
#: (`for x in inputs`, `range(batch_size)`, `zip(recons, input_features)`).
_ACROSS_BATCHES = re.compile(r"load|batches|\bbatch\b|data|epoch|step|iter|sample|episode|train|"
                             r"valid|val_|test|eval|\b(dl|ds)\b|range\(\d{2,}\)", re.IGNORECASE)


class Store(NamedTuple):
    """`container` keeps `stored` (`verb` says how, for a message); `chain_of`
    is the target of an assignment that reads itself (`acc = acc + t`)."""

    node: cst.CSTNode
    container: cst.BaseExpression
    stored: cst.BaseExpression
    verb: str
    chain_of: cst.BaseExpression | None = None


class StoresAt:
    """`stores_at` for the rules that ask it of the same node (MEM003, MEM010):
    the last answer is kept. Made with `ctx.shared(StoresAt)`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._last: tuple[cst.CSTNode | None, list[Store]] = (None, [])

    def __call__(self, node: cst.CSTNode) -> list[Store]:
        if self._last[0] is not node:
            self._last = (node, stores_at(node, self.ctx))
        return self._last[1]


def stores_at(node: cst.CSTNode, ctx: Context) -> list[Store]:
    """The stores a statement-level Call (`xs.append(v)`), AugAssign
    (`total += v`) or Assign (`acc = torch.cat((acc, v))`) makes."""
    if type(node) is cst.Call:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in STORING_METHODS \
                or not isinstance(ctx.parent, cst.Expr):
            return []
        position = 1 if func.attr.value == "insert" else 0
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if len(positional) <= position:
            return []
        return [Store(node, func.value, positional[position].value,
                      STORING_METHODS[func.attr.value])]
    if type(node) is cst.AugAssign:
        if not isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            return []
        verb = "add" if isinstance(node.operator, cst.AddAssign) else "subtract"
        return [Store(node, node.target, node.value, verb, node.target)]
    if type(node) is cst.Assign and len(node.targets) == 1:
        target = node.targets[0].target
        name = dotted_name(target)
        if name is None:
            return []
        return [Store(node, target, added, verb, target)
                for added, verb in _accumulated_parts(name, node.value, ctx)]
    return []


def _accumulated_parts(name: str, value: cst.BaseExpression,
                       ctx: Context) -> Iterator[tuple[cst.BaseExpression, str]]:
    """`acc + t` / `t + acc` / `torch.cat((acc, t))`, also as one arm of
    `t if acc is None else torch.cat((acc, t))`: the parts added to `acc`."""
    if type(value) is cst.IfExp:
        yield from _accumulated_parts(name, value.body, ctx)
        yield from _accumulated_parts(name, value.orelse, ctx)
    elif type(value) is cst.BinaryOperation and type(value.operator) in (cst.Add, cst.Subtract):
        if dotted_name(value.left) == name:
            yield value.right, "add"
        elif dotted_name(value.right) == name and isinstance(value.operator, cst.Add):
            yield value.left, "add"
    elif type(value) is cst.Call and ctx.qualify(value.func) in CONCATENATIONS \
            and value.args and isinstance(sequence := value.args[0].value, (cst.Tuple, cst.List)):
        elements = [e.value for e in sequence.elements]
        if any(dotted_name(e) == name for e in elements):
            for element in elements:
                if dotted_name(element) != name:
                    yield element, "concatenate"


def container_name(node: cst.BaseExpression) -> str | None:
    """`history` for `history["loss"]`, `self.losses` for `self.losses[k]`."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return dotted_name(node)


def outlived_loops(ctx: Context, owner: str) -> list[Loop]:
    """The enclosing loops whose iterations the container `owner` survives:
    none when it is (re)bound in the body of the innermost loop."""
    if ctx.loop_target(owner) is not None and ctx.binding(owner) is None:
        return []
    site = ctx.binding_site(owner)
    here = ctx.branches() if site is not None and site.branches else ()
    while site is not None and here and other_branch(site.branches, here):
        # `if acc is None: acc = out` / `else: acc = torch.cat((acc, out))`: the
        # value the `else` grows comes from an earlier iteration
        site = site.previous
    bound_in = site.loops if site is not None else ()
    return [loop for loop in ctx.loops if not any(loop is b for b in bound_in)]


def loop_header(loop: cst.For) -> str:
    """`x, y in loader` for a For loop, as written (whitespace folded)."""
    return code(loop.target, limit=200) + " in " + code(loop.iter, limit=200)


def is_data_loop(loop: Loop) -> bool:
    """A loop over batches, epochs or steps (`for x, y in loader`, `while True`),
    not over the heads, scales or blocks of one model."""
    return isinstance(loop, cst.While) or _DATA_LOOP.search(loop_header(loop)) is not None


def reads_across_batches(loop: Loop) -> bool:
    """What a loop's header says: over batches, epochs or steps, not the time
    steps, feature levels or items of one batch."""
    return isinstance(loop, cst.While) or _ACROSS_BATCHES.search(loop_header(loop)) is not None


def code(node: cst.CSTNode, limit: int = 40) -> str:
    """The node's source on one line, shortened to `limit` characters."""
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


#: What a loop's iterable is wrapped in (`enumerate(tqdm(loader))`).
_LOOP_WRAPPERS = {"enumerate", "tqdm", "zip", "iter", "islice"}
_COUNTS = {*INDEX_RANGES, "trange", "np.arange"}


def iterates_data(loop: cst.CSTNode) -> bool:
    """A `for` loop over a loader, a data set or its batches (`for x, y in
    loader`, `enumerate(tqdm(test_loader))`), not over a count (`range(epochs)`,
    `range(num_steps)`: epochs, runs and rollout steps, whose number the code
    fixes, not the size of the data)."""
    if not isinstance(loop, cst.For):
        return False
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and iterable.args \
            and (dotted_name(iterable.func) or "").rsplit(".", 1)[-1] in _LOOP_WRAPPERS:
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call) and (dotted_name(iterable.func) or "") in _COUNTS:
        return False
    return not isinstance(iterable, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString))
