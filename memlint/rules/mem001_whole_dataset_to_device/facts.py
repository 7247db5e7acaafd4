"""MEM001's own helpers: the places and moves it records and the small
syntax questions it asks of them."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import SAME_DATA_METHODS
from memlint.analysis.devices import creates_on_cuda, moves_to_cuda
from memlint.analysis.names import dotted_name
from memlint.analysis.walker import children


#: Keywords a move may carry and still be undone by dropping it (not `dtype`).
_MOVE_ONLY_KEYWORDS = {"device", "non_blocking", "copy"}


@dataclass(frozen=True)
class _Place:
    """Where a move, a subscript or a call is: its function (None: module level)
    and its order in the walk."""

    function: cst.FunctionDef | None
    order: int


@dataclass(eq=False)
class _Move:
    """A move to the GPU seen during the walk, decided in `finish`."""

    node: cst.Call
    statement: cst.CSTNode | None
    source: cst.BaseExpression  # the data as written
    whole: bool  # the source is the whole data set by its origin or name
    maybe_data: bool  # not known to be a batch, a constant or noise, nor moved per iteration
    targets: frozenset[str]  # the names the result is assigned to
    place: _Place
    helper: str = ""  # ` by batchify()`: the same-module helper that moves it
    returned: bool = False  # moved in a `return`: the callers get it on the GPU



def _without_move(value: cst.BaseExpression, ctx: Context
                  ) -> cst.BaseExpression | None:
    """`x.cuda()` -> `x`, `torch.tensor(a).to(dev).float()` -> `torch.tensor(a).float()`:
    the same tensor left on the host; None when a move cannot be dropped
    without changing more than the device (`.to(dev, torch.half)`,
    `torch.tensor(a, device="cuda")`)."""
    if not _puts_on_cuda(value, ctx):
        return value
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return None
    if moves_to_cuda(value, ctx):
        if not _only_moves(value):
            return None
        return _without_move(value.func.value, ctx)
    if value.func.attr.value not in SAME_DATA_METHODS or any(
            _puts_on_cuda(arg.value, ctx) for arg in value.args):
        return None
    inner = _without_move(value.func.value, ctx)
    return None if inner is None else value.with_changes(func=value.func.with_changes(value=inner))


def _only_moves(move: cst.Call) -> bool:
    """`.cuda()`, `.cuda(0)`, `.to(device)`, `.to(device, non_blocking=True)`:
    nothing but the device changes (not `.to(device, torch.float16)`, `.type(...)`)."""
    if type(move.func) is not cst.Attribute:
        return False
    method = move.func.attr.value
    positional = [arg for arg in move.args if arg.keyword is None]
    if method not in ("cuda", "to") or len(positional) > 1 or any(arg.star for arg in move.args):
        return False
    return all(arg.keyword.value in _MOVE_ONLY_KEYWORDS for arg in move.args if arg.keyword)


def _puts_on_cuda(node: cst.BaseExpression, ctx: Context) -> bool:
    """Whether the expression contains a move to (or a creation on) a CUDA device."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call) and (moves_to_cuda(current, ctx)
                                              or creates_on_cuda(current, ctx)):
            return True
        stack.extend(children(current))
    return False



def _chains_to(value: cst.BaseExpression, call: cst.Call) -> bool:
    """`call`, or `call.contiguous()`, `call.float()`: methods applied to its result."""
    if value is call:
        return True
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        if value is call:
            return True
        value = value.func.value
    return False



def _prefixes(name: str) -> list[str]:
    """`data.x` -> `data.x`, `data`: feeding `data.x` whole feeds `data`'s tensors whole."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _paired_target(target: cst.BaseExpression, value: cst.BaseExpression,
                   call: cst.Call) -> cst.BaseExpression | None:
    """In `a, b = x.cuda(), y.cuda()`, the target that `call`'s element of the
    value tuple is assigned to."""
    if not isinstance(target, (cst.Tuple, cst.List)) \
            or not isinstance(value, (cst.Tuple, cst.List)) \
            or len(target.elements) != len(value.elements):
        return None
    for target_element, value_element in zip(target.elements, value.elements):
        if isinstance(value_element, cst.Element) and _chains_to(value_element.value, call):
            return target_element.value
    return None


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    name = dotted_name(target)
    return [name] if name else []


def _names_used(unit: cst.FunctionDef | cst.SimpleStatementLine) -> set[str]:
    """Every name and dotted name read or written in a function or a statement."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [unit.body] if isinstance(unit, cst.FunctionDef) else [unit]
    while stack:
        current = stack.pop()
        name = dotted_name(current) if isinstance(current, (cst.Name, cst.Attribute)) else None
        if name is not None:
            found.update(_prefixes(name))
        else:
            stack.extend(children(current))
    return found



def _shorten(node: cst.BaseExpression, limit: int = 40) -> str:
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
