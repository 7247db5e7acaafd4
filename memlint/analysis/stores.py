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

from memlint.analysis.walker import children
from memlint.analysis.context import Context, Loop, other_branch
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import CONCATENATIONS, INDEX_RANGES

#: Container methods that keep their argument, with the verb a message uses.
STORING_METHODS = {"append": "append", "extend": "extend with", "insert": "insert",
                   "appendleft": "append"}

#: Words of the names a loop over data gives its variable or iterates
#: (`for epoch in ...`, `in train_loader`, `in range(num_batches)`).
_DATA_LOOP = re.compile(r"load|batch|data|epoch|step|iter|sample|episode|train|valid|val_|"
                        r"test|eval|input|image|img|example|^(x|y|xb|yb|dl|ds)$", re.IGNORECASE)
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
        # value the `else` grows comes from an earlier iteration ...
        for position, loop in enumerate(ctx.loops):
            if _first_iteration_of(loop, site.branches):
                # ... of this run of the loop only, where `if t == 0: pred = im`
                # makes it afresh (Transolver's rollout, per batch)
                return ctx.loops[position:]
        site = site.previous
    bound_in = site.loops if site is not None else ()
    return [loop for loop in ctx.loops if not any(loop is b for b in bound_in)]


def _first_iteration_of(loop: Loop, branches: tuple[tuple[cst.If, cst.CSTNode], ...]) -> bool:
    """Whether an assignment in `branches` runs on the first iteration of
    `loop` only: the body of `if t == 0:` in `for t in range(0, T)` (or
    `range(T)`, `enumerate(...)`)."""
    if type(loop) is not cst.For or type(loop.target) not in (cst.Name, cst.Tuple):
        return False
    iterable = loop.iter
    counter: cst.BaseExpression = loop.target
    if type(iterable) is cst.Call and dotted_name(iterable.func) == "enumerate" \
            and type(counter) is cst.Tuple and counter.elements:
        counter = counter.elements[0].value  # `for i, batch in enumerate(...)`
    elif not (type(iterable) is cst.Call and dotted_name(iterable.func) == "range"
              and (len(iterable.args) == 1 or (type(iterable.args[0].value) is cst.Integer
                                               and iterable.args[0].value.value == "0"))):
        return False
    if type(counter) is not cst.Name:
        return False
    for chain, block in branches:
        test = chain.test
        if block is chain.body and type(test) is cst.Comparison and len(test.comparisons) == 1 \
                and type(test.comparisons[0].operator) is cst.Equal:
            sides = (test.left, test.comparisons[0].comparator)
            if any(type(a) is cst.Name and a.value == counter.value and type(b) is cst.Integer
                   and b.value == "0" for a, b in (sides, sides[::-1])):
                return True
    return False


def loop_header(loop: cst.For) -> str:
    """`x, y in loader` for a For loop, as written (whitespace folded)."""
    return code(loop.target, limit=200) + " in " + code(loop.iter, limit=200)


def is_data_loop(loop: Loop) -> bool:
    """A loop over batches, epochs or steps (`for x, y in loader`, `while True`),
    not over the heads, scales or blocks of one model, nor a fixed number of
    repeats of one step (`for _ in range(hp.train.rep_discriminator)`). Told by
    what it iterates: a count taken from the data (`range(len(X))`,
    `range(X.shape[0] // bs)`, `range(10000)`), a body that draws data
    (`next(it)`, a nested loop over data); else by the names of what it
    iterates and of its variable, never by the path they hang from (the
    `train` of `hp.train.rep_discriminator` says nothing of the loop)."""
    if isinstance(loop, cst.While):
        return True
    iterable = _unwrapped(loop.iter)
    if isinstance(iterable, (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.SimpleString)):
        return False
    if isinstance(iterable, cst.Call) and (dotted_name(iterable.func) or "") in _COUNTS:
        if any(_data_sized(arg.value) for arg in iterable.args) or _draws_data(loop):
            return True
    return any(_DATA_LOOP.search(name) for name in _loop_names(loop.target, iterable))


def _unwrapped(iterable: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(iterable, cst.Call) and iterable.args \
            and (dotted_name(iterable.func) or "").rsplit(".", 1)[-1] in _LOOP_WRAPPERS:
        iterable = iterable.args[0].value
    return iterable


def _data_sized(node: cst.BaseExpression) -> bool:
    """`len(X)`, `X.shape[0] // bs`, `X.size(0)`, a literal of 10 or more."""
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Integer):
            if int(current.evaluated_value) >= 10:
                return True
        elif isinstance(current, cst.Call):
            if dotted_name(current.func) == "len" or (isinstance(current.func, cst.Attribute)
                                                      and current.func.attr.value == "size"):
                return True
            pending.extend(arg.value for arg in current.args)
        elif isinstance(current, cst.Attribute) and current.attr.value == "shape":
            return True
        elif isinstance(current, (cst.BinaryOperation, cst.Subscript, cst.UnaryOperation)):
            pending.extend(children(current))
    return False


def _draws_data(loop: cst.For) -> bool:
    """The body takes a new batch each iteration: `next(it)`, or a nested
    loop that is itself over data."""
    pending: list[cst.CSTNode] = [loop.body]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Call) and dotted_name(current.func) == "next":
            return True
        if isinstance(current, (cst.For, cst.While)) and is_data_loop(current):
            return True
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            pending.extend(children(current))
    return False


def _loop_names(target: cst.BaseExpression, iterable: cst.BaseExpression) -> list[str]:
    """The names a loop's variable and its iterable are known by: the last
    part of each dotted name (`rep_discriminator` of `hp.train.rep_discriminator`)."""
    names: list[str] = []
    pending: list[cst.CSTNode] = [target, iterable]
    while pending:
        current = pending.pop()
        if isinstance(current, (cst.Name, cst.Attribute)):
            name = dotted_name(current)
            if name is not None:
                names.append(name.rsplit(".", 1)[-1])
                continue
        pending.extend(children(current))
    return names


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


def steps_through_data(loop: cst.CSTNode, ctx: Context) -> bool:
    """`for i in range(0, len(texts), bs)` (or `n = len(texts)` first): a loop
    that takes the data a batch at a time by index, so it runs once per batch
    of the data set, however its names read."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) \
            or (dotted_name(loop.iter.func) or "") not in INDEX_RANGES \
            or len(loop.iter.args) != 3 or any(a.keyword for a in loop.iter.args):
        return False
    stop = loop.iter.args[1].value
    name = dotted_name(stop)
    bound = ctx.binding(name) if name is not None else None
    return _is_len(stop) or (bound is not None and _is_len(bound))


def _is_len(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and dotted_name(node.func) == "len"


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
