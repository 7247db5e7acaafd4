"""What a method keeps on its object outlives the call: `self.losses[key] +=
loss[key]` in a tracker's `update(self, loss)` keeps one graph per call when
its callers hand it losses that still have history (LMSCNet's metrics,
called each training step with the dict whose total was just
back-propagated). The method's file cannot tell what it is handed; the files
that call it can, so each file records the calls in its loops that hand a
tensor with history on (`ModuleFacts.history_passed`), and a store waits on
them (`UnlessNoCallerPassesHistory`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import libcst as cst

from memlint.analysis.autograd_values import AutogradValues, names_in
from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.project import (Condition, Either, UnlessNoCallerPassesHistory)
from memlint.analysis.stores import Store, code, container_name
from memlint.rules.mem003_tensor_history_kept.kept import Frame

#: stores that grow with every call (`append`, `+=`): an assignment replaces
_GROWING = {"append", "extend with", "insert", "concatenate", "add", "subtract"}
#: method names a call may mean another type's method by: Python's own
#: containers' and objects' (`buffer.append(x)`, `meter.update(...)` of a
#: dict), and the step, reset and forward of optimizers, schedulers, modules
#: and environments; a call of one is never taken for the project's method
_ANYONES = frozenset(name for kind in (list, dict, set, str, bytes, tuple, object)
                     for name in dir(kind)) | {
    "step", "reset", "forward", "backward", "zero_grad", "render", "close", "seed", "log",
    "add", "put", "push", "record", "write", "send", "save", "load", "run", "train", "eval"}


class ObjectStore(NamedTuple):
    """A store on `self` of what a method is handed: its parameter's position
    among those a caller passes (`self` not counted) and its name."""

    store: Store
    statement: cst.CSTNode | None
    method: str
    position: int
    parameter: str


class AcrossCalls:
    """Stores a method makes on its object of what it is handed, and the calls
    of this file that hand a tensor with history on."""

    def __init__(self, ctx: Context, values: AutogradValues) -> None:
        self.ctx, self.values = ctx, values
        self.found: list[ObjectStore] = []
        #: (the function it is in, the call as written, the argument) of each
        #: call that hands a tensor with history on
        self.handing: list[tuple[cst.FunctionDef | None, str, str]] = []

    def note_call(self, node: cst.Call, frame: Frame) -> None:
        """Note the arguments of a call in a training step (a loop of a
        function that back-propagates) that carry history: back-propagated
        here, or made with autograd on (told the project in `publish`, once
        the grad mode of each function's callers is known)."""
        if not frame.calls_backward or not self.ctx.in_loop or self.ctx.grad_disabled:
            return
        backpropagated = frame.backpropagated
        written = dotted_name(node.func)
        if written is None or written.rsplit(".", 1)[-1] in _ANYONES \
                or (self.ctx.qualify(node.func) or "").startswith("torch."):
            return
        for index, arg in enumerate(node.args):
            if arg.star or type(arg.value) is not cst.Name:
                continue
            if self.values.kept_backpropagated(arg.value, backpropagated) or \
                    self.values.settled(self.values.value_of(arg.value)).history is True:
                key = arg.keyword.value if arg.keyword is not None else str(index)
                self.handing.append((self.ctx.function, written, key))

    def publish(self, index: ModuleIndex) -> None:
        """Tell the project the calls noted, but those in functions that every
        caller here runs with grad off."""
        collector = FactCollector.of(self.ctx)
        if collector is None:
            return
        for function, written, key in self.handing:
            if function is None or not index.runs_grad_off(function):
                collector.facts.history_passed.setdefault(written.rsplit(".", 1)[-1], {}) \
                    .setdefault(key, written)

    def check(self, store: Store, statement: Callable[[], cst.CSTNode | None]) -> bool:
        """Whether `store` keeps on the method's object a value made from what
        the method is handed (then noted here, to wait on its callers, with
        the enclosing `statement()`: asked only then, as most stores are not)."""
        function, ctx = self.ctx.function, self.ctx
        if function is None or ctx.class_def is None or ctx.grad_disabled \
                or function.name.value in _ANYONES or store.verb not in _GROWING:
            return False
        owner = container_name(store.container) or ""
        if not owner.startswith("self."):
            return False
        params = [p.name.value for p in function.params.params][1:]  # not `self`
        handed = [name for name in names_in(store.stored) if name in params]
        if len(handed) != 1 or self.values.value_of(store.stored).history is False:
            return False
        self.found.append(ObjectStore(store, statement(), function.name.value,
                                      params.index(handed[0]), handed[0]))
        return True

    def reports(self, unless: Condition
                ) -> list[tuple[cst.CSTNode, str, cst.CSTNode | None, Condition]]:
        """(node, message, statement, condition) of each store found: each
        waits on a caller that hands the method a tensor with history."""
        return [(found.store.node, _message(found), found.statement,
                 Either((unless, UnlessNoCallerPassesHistory(found.method, found.position,
                                                             found.parameter))))
                for found in self.found]


def _message(found: ObjectStore) -> str:
    stored, kept = code(found.store.stored), code(found.store.container)
    return (f"'{stored}' keeps the autograd graph of what '{found.method}' is handed alive "
            f"in '{kept}' across calls: its callers hand '{found.parameter}' a tensor with "
            f"history, so every call's graph stays until the object lets go; keep "
            f"'{stored}.item()' (a number) or '{stored}.detach()' instead")
