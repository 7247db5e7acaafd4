"""MEM004's small judgements about one function: is it named for inference,
does it train before it evaluates, what fix and what project condition go
with its finding. Kept apart from the rule so the rule reads as its query."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace

import libcst as cst

from memlint.analysis.autograd_values import BackwardFlows
from memlint.analysis.context import Context
from memlint.analysis.module_index import CallSite, FunctionInfo, ModuleIndex
from memlint.analysis.names import ImportTable
from memlint.analysis.project import (Condition, Either, EveryOne, UnlessCalledToTrain,
                                      UnlessCallersDisableGrad, UnlessProjectOnCpu)
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan
from memlint.rules.mem004_grad_in_inference.callers import (
    PreviewUnlessRunWithGradOn, UnlessCallersGiveHostInputs, forward_slots)
from memlint.rules.mem004_grad_in_inference.forwards import Unit

#: Words of a function name that say it runs inference (`run_validation`, `evalModel`).
_INFERENCE_WORDS = {"eval", "evaluate", "evaluation", "validate", "validation", "valid", "val",
                    "test", "testing", "predict", "prediction", "predictions", "infer",
                    "inference", "generate", "generation", "sample", "sampling"}
#: ... unless it trains too (`train_and_evaluate`, `fit_predict`).
_TRAINING_WORDS = {"train", "training", "fit", "finetune", "optimize", "backward", "attack",
                   "adversarial", "saliency", "gradcam", "cam", "grad", "gradient", "gradients"}
TORCH_ROOTS = ("torch", "torchvision", "transformers", "timm", "lightning", "pytorch_lightning")
#: `zero_grad()`: gradients are computed in this step, in a backward here or in
#: a library call handed the optimizer (`loss_scaler(loss, optimizer)`)
GRAD_METHODS = {"backward", "manual_backward", "requires_grad_", "retain_grad", "zero_grad"}
LIGHTNING_HOOK = re.compile(r"(validation|val|test|predict)_step$|.*_epoch_(start|end)$|on_.*")


def evaluates_after_training(unit: Unit) -> bool:
    """A function that trains and then evaluates (`model.eval()`, a test loop
    with no backward after it: dgcnn's `train()`): its back-propagation is the
    training phase's, not the evaluation's; Grad-CAM's backward comes after
    its forward."""
    return unit.node is not None and unit.forward_after_eval and not unit.grad_after_forward


def trained_at_top_level(module: cst.Module, names: ImportTable,
                         statement: cst.CSTNode | None) -> bool:
    """Whether a top-level forward's result (`restored = model(x)`) reaches a
    backward after it, also one a library call runs when handed the loss and
    the optimizer the script zeroes (timm's `loss_scaler(loss, optimizer)`,
    Uformer's training loop after an evaluation block): a training forward,
    whatever `.eval()` came before it."""
    assign = statement.body[0] if type(statement) is cst.SimpleStatementLine else None
    if type(assign) is not cst.Assign or len(assign.targets) != 1 \
            or type(assign.targets[0].target) is not cst.Name:
        return False
    flows = BackwardFlows(module, names, {id(statement)})
    return flows.binding_backwarded(module, assign.targets[0].target.value, statement)


def is_inference_name(node: cst.FunctionDef) -> bool:
    words = set(re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", node.name.value).lower().split("_"))
    return bool(words & _INFERENCE_WORDS) and not words & _TRAINING_WORDS


def after_train_call(unit: Unit, module: str) -> Unit:
    """`cnn.train()` at a script's top level after an unguarded eval
    forward of `cnn`: that inference phase is over, and a backward from
    here on trains (a notebook that alternates training and evaluation
    cells). The phase keeps its finding; the next one starts afresh."""
    if unit.node is not None or unit.forward is None or unit.wants_grad \
            or unit.forward[2] != module:
        return unit
    return replace(unit, forward=None, evaluated=dict(unit.evaluated),
                   eval_calls=dict(unit.eval_calls), on_gpu=dict(unit.on_gpu),
                   volatile=None, volatile_names=set(), any_forward=None)


def no_grad_fix(function: cst.FunctionDef | None, ctx: Context) -> FixPlan | None:
    """`@torch.no_grad()` right above the `def`. Unsafe: the function might
    want gradients somewhere memlint did not see (a caller back-propagating
    through what it returns). None at a script's top level (no function
    to decorate), for `async def` (the decorator would not cover the
    coroutine's body), and where `torch` is not imported as `torch`."""
    if function is None or function.asynchronous is not None \
            or ctx.names.qualify_name("torch") != "torch":
        return None
    return FixPlan(UNSAFE, f"decorate '{function.name.value}' with @torch.no_grad()",
                   insertions=((function, "@torch.no_grad()"),))


def unless_elsewhere(info: FunctionInfo | None, index: ModuleIndex, ctx: Context,
                     module: str, forward: cst.Call | None = None) -> Condition:
    """What the rest of the project may show: a CPU project, callers in
    other files that all disable grad, or hand the `forward` host inputs, or
    that call a method only to train."""
    unless: Condition = UnlessProjectOnCpu.here(ctx)
    if info is not None and info.class_name is None and not index.call_sites(info):
        # called from other files only, perhaps all under no_grad
        unless = Either((unless, UnlessCallersDisableGrad(module, info.name)))
        slots = forward_slots(info.node, forward) if forward is not None else None
        if slots is not None:  # perhaps all handing it a CPU model and CPU inputs
            unless = Either((unless, UnlessCallersGiveHostInputs(module, info.name, *slots)))
    elif info is not None and not index.call_sites(info):
        # a method called from other files, perhaps only by training steps
        unless = Either((unless, UnlessCalledToTrain(module, info.name)))
    elif info is not None:
        # called here with grad on, from functions other files call, perhaps
        # all under no_grad: grad mode comes in through every caller
        ways_in = index.entered_from(info)
        if ways_in is not None and ways_in[0]:
            roots, passed = ways_in
            unless = Either((unless, EveryOne(
                (*(UnlessCallersDisableGrad(module, root.name) for root in roots),
                 *(UnlessCallersDisableGrad(module, on_the_way.name, called=False)
                   for on_the_way in passed)))))
    return unless


def own_eval(unit: Unit) -> bool:
    """Whether the unit's forward runs after an `.eval()` of its own (a
    function that evaluates when asked: `if train: net.train() else:
    net.eval()`), not one of the function a closure is defined in: a caller
    back-propagating such a function's result in one call says nothing of
    another call's, while a closure's mode is its maker's (an inverse
    problem optimising through `model_`, defined after `model.eval()`)."""
    if not unit.forward_after_eval or unit.forward is None:
        return False
    return id(unit.eval_calls.get(unit.forward[2])) not in unit.inherited_evals


def part_of_training(info: FunctionInfo, index: ModuleIndex,
                     flows: Callable[[], BackwardFlows]) -> bool:
    """A function whose result a caller here back-propagates, or that a
    module's `forward` calls, is a building block of training, whatever
    its name (`inference` run in a training step); one a training step
    merely calls (`validate()` each epoch) is not."""
    for site in index.call_sites(info):
        caller = site.caller
        if caller is not None and not site.grad_disabled \
                and caller.name in ("forward", "__call__"):
            return True
    return flows().result_backpropagated(info.node)


def inference_through_helpers(finished: dict[cst.CSTNode, Unit], index: ModuleIndex,
                              ctx: Context) -> Iterator[tuple[cst.FunctionDef, FunctionInfo,
                                                              CallSite, str, cst.Call, str]]:
    """Eval functions whose forward runs in a helper of this file: (the eval
    function, its info, its first call of such a helper, the helper's name,
    the helper's forward call, the module run there)."""
    for unit in finished.values():
        if unit.node is None or unit.forward is not None or unit.wants_grad \
                or unit.class_name is not None \
                or not (any(unit.evaluated.values()) or is_inference_name(unit.node)):
            continue  # (None: the top level, never among the finished units)
        name = unit.node.name.value
        info = index.info(unit.node)
        if info is None or index.grad_disabled_by_callers(info) or (
                name.lstrip("_").startswith("test") and ctx.in_test_file):
            continue
        for site in info.calls:
            helper = next((finished[c.node] for c in index.callees(site)
                           if c.node in finished), None)
            if site.grad_disabled or helper is None or helper.node is None \
                    or helper.any_forward is None or helper.wants_grad \
                    or helper.forward is not None or is_inference_name(helper.node):
                continue
            forward, module = helper.any_forward
            yield unit.node, info, site, helper.node.name.value, forward, module
            break


def differentiated_by_helper(info: FunctionInfo, forward: tuple[cst.Call, object, str] | None,
                             index: ModuleIndex, grad_users: set[cst.CSTNode]) -> bool:
    """Whether, after its forward, the function calls a function of this file
    that back-propagates or differentiates (`self.cac_grad(loss, lc)` calling
    `torch.autograd.grad`, a Hessian-vector product `hvp(loss, params)`),
    itself or through the functions it calls: the forward's graph is wanted
    (FROMP's kernel, TRM's Neumann series), whatever `eval()` said."""
    order = [site.node for site in info.calls]
    after = order.index(forward[0]) + 1 if forward and forward[0] in order else len(order)
    pending = [callee for site in info.calls[after:] for callee in index.callees(site)]
    seen: set[cst.CSTNode] = {info.node}
    while pending:
        callee = pending.pop()
        if callee.node in seen:
            continue
        seen.add(callee.node)
        if callee.node in grad_users:
            return True
        pending.extend(c for site in callee.calls for c in index.callees(site))
    return False


def unless_run_by_name_only(unit: Unit, info: FunctionInfo | None, index: ModuleIndex,
                            module: str) -> Condition | None:
    """For a forward taken for inference by its function's name alone (no
    `eval()` before it): in preview unless some code runs the function with
    grad on (its file's top level, or another file through its ways in).
    The name says what the function is for, not the grad mode it runs in."""
    if unit.node is None or unit.forward_after_eval or info is None:
        return None
    roots = index.ways_in(info)
    if roots is None:
        return None  # the file's top level runs it with grad on
    return PreviewUnlessRunWithGradOn(
        module, tuple(f.name for f in roots if f.class_name is None and f.parent is None),
        tuple(f.name for f in roots if f.class_name is not None))
