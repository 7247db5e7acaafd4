"""How the rest of the module uses what MEM001 saw moved, decided once the
walk is over: indexed batch by batch afterwards, fed whole to a model
(full-batch training), or a TensorDataset whose loader's batches a loop
moves anyway (the fix)."""

from __future__ import annotations

from typing import Literal

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan
from memlint.rules.mem001_whole_dataset_to_device.facts import (_Move, _Place, _names_used,
                                                                _without_move)


def batched_after(move: _Move, sliced: dict[str, list[tuple[_Place, cst.Subscript | None]]]
                  ) -> cst.Subscript | Literal[False] | None:
    """The subscript that indexes `move`'s result batch by batch after it
    (None: through a helper such as `get_batch(data, i)`), or False."""
    for target in move.targets:
        for place, subscript in sliced.get(target, ()):
            if place.function is not move.place.function or place.order > move.place.order:
                return subscript
    return False


def full_batch_names(moves: list[_Move], fed_whole: list[tuple[cst.CSTNode, set[str]]]
                     ) -> set[str]:
    """Names fed whole to a model, and the names the same step function uses
    with them (`model(features, adj)` and `labels[idx_train]` in `train()`)."""
    moved = {target for move in moves for target in move.targets}
    names: set[str] = set()
    steps: set[cst.CSTNode] = set()
    for unit, fed in fed_whole:
        if fed & moved:
            names |= fed
            if isinstance(unit, (cst.FunctionDef, cst.SimpleStatementLine)) \
                    and unit not in steps:
                steps.add(unit)
                names |= _names_used(unit)
    return names


def host_dataset_fix(dataset: cst.Call, names: frozenset[str],
                     loaders_made: list[tuple[cst.BaseExpression, frozenset[str]]],
                     moved_per_batch: set[str], ctx: Context) -> FixPlan | None:
    """`TensorDataset(x.cuda(), y.to(device))` -> `TensorDataset(x, y)`, where
    every loader over it is iterated by a loop that moves its batches to the
    GPU anyway. Unsafe: the data set's tensors change device, which code
    reading them other than through that loop would notice, and each batch
    is now copied (pin the loader: MEM005)."""
    loaders = set(names - {"<loader>"}) if "<loader>" in names else {
        target for source, targets in loaders_made if dotted_name(source) in names
        for target in targets}
    if not loaders or not loaders <= moved_per_batch:
        return None
    args = []
    for arg in dataset.args:
        value = _without_move(arg.value, ctx)
        if value is None:
            return None
        args.append(arg.with_changes(value=value))
    return FixPlan(UNSAFE, "build the TensorDataset from the tensors on the host (the loop "
                           "already moves each batch to the GPU)",
                   ((dataset, dataset.with_changes(args=args)),))
