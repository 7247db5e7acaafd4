"""MEM003's message and its fix: what to keep instead of the value with history."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.autograd_values import Value, names_in
from memlint.analysis.stores import code
from memlint.analysis.walker import returns_in
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan


def detach_fix(stored: cst.BaseExpression, container: str, verb: str, local: bool,
               function: cst.CSTNode) -> FixPlan | None:
    """`losses.append(loss)` -> `losses.append(loss.detach())`: the same
    values, without their history, and still tensors, so `torch.stack(losses)`
    and `.item()` on them keep working (`.item()` would also turn them into
    floats and wait for the GPU at every step). Safe for a container local to
    its function and never returned: nothing outside can back-propagate
    through it, and no backward here reaches it (that was checked). Unsafe for
    one on `self`, a global, or one returned."""
    original = stored
    if isinstance(stored, (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)):
        return None  # `history += [fake]`: a list of tensors, nothing to detach as a whole
    if not isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) \
            and not stored.lpar:
        stored = stored.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    detached = cst.Call(func=cst.Attribute(value=stored, attr=cst.Name("detach")))
    returned = any(container.split(".", 1)[0] in names_in(node.value)
                   for node in returns_in(function) if node.value is not None)
    safe = local and not returned
    return FixPlan(SAFE if safe else UNSAFE, f"{verb} {code(detached)}",
                   ((original, detached),))


def message(stored: cst.BaseExpression, value: Value, container: str, verb: str,
            fixed: bool = False, freed: bool = False) -> str:
    """What to keep instead, in order of preference: a number for a scalar
    (`.item()`), else the tensor without its graph; where `--fix` writes
    `.detach()` for a scalar, the message says so. What is kept: after the
    graph's own backward (`freed`), its nodes, not the tensors they saved."""
    text = code(stored)
    simple = isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
    receiver = text if simple else f"({text})"
    if value.scalar:
        fix = (f"{verb} {receiver}.item() instead, or {receiver}.detach() to keep a tensor"
               + (" (what --fix writes)" if fixed else ""))
    else:
        fix = f"{verb} {receiver}.detach() instead (.detach().cpu() to free the GPU copy too)"
    kept = ("its backward freed the tensors each graph saved, but every iteration's graph "
            f"nodes stay chained to '{container}', more each step, until it is freed" if freed else
            "every iteration's graph and the tensors it saved for backward stay in memory")
    return (f"'{text}' keeps its autograd graph alive in '{container}' across iterations: "
            f"{kept}; {fix}")
