"""What MEM003 holds until a module ends: the stores it flagged, per function,
and what a later backward says of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from memlint.analysis.autograd_values import (BackwardFlows, Value, forget_rebound, names_in,
                                              number_made_of, rebound)
from memlint.analysis.context import Context, Loop
from memlint.analysis.names import dotted_name


@dataclass
class KeptStore:
    """A flagged store, held until the module ends: a later `backward()` that
    the kept graph reaches (REINFORCE, one backward over an accumulated loss,
    here or in a helper) means the graph was kept on purpose, and what a
    function defined further down returns is known only then."""

    node: cst.CSTNode
    statement: cst.CSTNode | None
    stored: cst.BaseExpression
    value: Value
    target: cst.BaseExpression
    verb: str
    container: str
    #: the enclosing loops whose iterations the container survives, as far as
    #: the bindings before the store tell
    outlived: list[Loop]
    #: the container is a local variable of the function the store is in
    local: bool
    #: the container is made afresh inside a loop over batches or epochs
    bound_per_step: bool = False
    #: the stored name was unpacked from a model's output (`loss, acc = model(x)`):
    #: (its position, the tuple's length)
    forward_element: tuple[int, int] | None = None
    one_step: bool = False  # it outlives only loops that back-propagate, before a step
    #: a backward already ran through it without `retain_graph`: only graph nodes stay
    after_backward: bool = False


@dataclass
class Frame:
    node: cst.CSTNode
    model_code: bool
    stores: list[KeptStore] = field(default_factory=list)
    calls_backward: bool = False
    #: the names this function back-propagated so far (`loss` of `loss.backward()`)
    backpropagated: set[str] = field(default_factory=set)
    #: of those, the names a backward ran through with `retain_graph`
    retained: set[str] = field(default_factory=set)
    #: dicts whose every item was made a number (`for k, v in d.items(): d[k] = v.item()`)
    numbers: set[str] = field(default_factory=set)
    backward_loops: set[int] = field(default_factory=set)  # back-propagating, not yet stepped

    def after_assign(self, node: cst.Assign, ctx: Context) -> None:
        """What an assignment rebinds is no longer back-propagated (nor numbers)."""
        self.backpropagated = forget_rebound(self.backpropagated, node)
        note_items_made_numbers(node, ctx, self)

    def holds_numbers(self, stored: cst.BaseExpression) -> bool:
        """An item of a dict whose every item was made a number."""
        return type(stored) is cst.Subscript and dotted_name(stored.value) in self.numbers

    def run_backward(self, names: set[str], call: cst.Call) -> None:
        """A backward through `names`; `retain_graph` keeps the tensors they saved."""
        self.calls_backward = True
        self.backpropagated |= names
        if any(arg.keyword and arg.keyword.value == "retain_graph" for arg in call.args):
            self.retained |= names


def kept_for_its_data(store: KeptStore, value: Value, flows: BackwardFlows,
                      scope: cst.CSTNode, training_loops: set[int]) -> bool:
    """A tensor (not a scalar loss) added to a list, whose graph a backward in
    the same iteration then consumes (`history.append(fake)` before
    `classifier(fake).mean().backward()`, a GAN's or an attack's images kept
    to show): the backward frees the tensors its graph saved, so what the list
    keeps is the images themselves, wanted, and `.detach()` would save nothing
    of note. Running sums and concatenations are not this (each step's graph
    nodes chain onto the last), unless the container is made afresh every step."""
    if store.bound_per_step and not any(id(loop) in training_loops for loop in store.outlived) \
            and _parts_backwarded(store, flows.value_backwarded, scope):
        # made afresh every step (an autoregressive rollout's `pred`, per batch),
        # growing over loops that run no backward, keeping what that step's
        # backward runs through anyway: one step's graph
        return True
    if value.scalar or store.verb not in _LIST_GROWTH:
        return False
    return _parts_backwarded(store, flows.backwarded_after, scope)


def _parts_backwarded(store: KeptStore, reaches: Callable[[cst.CSTNode, str, cst.CSTNode | None],
                                                          bool], scope: cst.CSTNode) -> bool:
    """Whether every tensor `store` keeps reaches a backward in `scope`, as
    `reaches` (a `BackwardFlows` query) tells."""
    stored = store.stored
    if store.verb == "add":  # `history += [fake]`
        if not isinstance(stored, (cst.List, cst.Tuple)):
            return False
        parts = [element.value for element in stored.elements]
    else:
        parts = [stored]
    names = [dotted_name(part) for part in parts]
    return bool(names) and all(name is not None and reaches(scope, name, store.statement)
                               for name in names)


_LIST_GROWTH = {"append", "extend with", "insert", "add"}


def freed_by_backward(stored: cst.BaseExpression, frame: Frame) -> bool:
    """Whether `stored` reads a name a backward has already run through without
    `retain_graph` (`loss.backward()`, then `total += n * loss`): that backward
    freed the tensors its graph saved, so what the kept graph still holds is its
    nodes, growing by a chain every step, not the step's activations."""
    return bool(names_in(stored) & (frame.backpropagated - frame.retained))


def note_items_made_numbers(node: cst.Assign, ctx: Context, frame: Frame) -> None:
    """`for key, value in loss_dict.items(): loss_dict[key] = value.item()` (a
    training step's log, DBNet's, mmdet's `parse_losses`) leaves numbers in
    every item of the dict until it is bound again."""
    frame.numbers -= rebound(node)
    target = node.targets[0].target
    if len(node.targets) != 1 or type(target) is not cst.Subscript or not ctx.loops \
            or number_made_of(node.value) is None:
        return
    loop, owner = ctx.loops[-1], dotted_name(target.value)
    if type(loop) is not cst.For:
        return
    iterated = loop.iter
    if type(iterated) is cst.Call and dotted_name(iterated.func) == "enumerate" and iterated.args:
        iterated = iterated.args[0].value
    key = target.slice[0].slice if len(target.slice) == 1 else None
    if owner is not None and type(iterated) is cst.Call \
            and dotted_name(iterated.func) == f"{owner}.items" \
            and isinstance(key, cst.Index) and type(key.value) is cst.Name \
            and key.value.value in names_in(loop.target):
        frame.numbers.add(owner)
