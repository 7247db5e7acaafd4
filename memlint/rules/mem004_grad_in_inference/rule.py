"""Forward passes in inference code with autograd still recording."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.autograd_values import BackwardFlows
from memlint.analysis.context import Context
from memlint.analysis.devices import moves_to_cuda
from memlint.analysis.models import annotated_class, class_built
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name, literal_bool
from memlint.analysis.pickled_modules import UnlessUnpickledFrozen, unpickling_loader
from memlint.analysis.saved_files import calls_in
from memlint.analysis.project import (Either, UnlessCalleesRunItGradOff, UnlessForwardDisablesGrad,
                                      UnlessForwardNeedsGrad, UnlessProjectOnCpu)
from memlint.analysis.torch_api import GRAD_USERS, VARIABLE
from memlint.rules.base import Rule, RuleOptions
from memlint.rules.mem004_grad_in_inference import examples
from memlint.rules.mem004_grad_in_inference.forwards import (VOLATILE_TOO, Forwards, Unit,
                                                             is_false, is_volatile)
from memlint.rules.mem004_grad_in_inference.phases import (
    GRAD_METHODS, LIGHTNING_HOOK, TORCH_ROOTS, after_train_call, evaluates_after_training,
    differentiated_by_helper, inference_through_helpers, is_inference_name, no_grad_fix,
    own_eval, part_of_training, trained_at_top_level, unless_elsewhere,
    unless_run_by_name_only)


class GradInInference(Rule):
    """A forward pass in inference code (after `model.eval()`; in a function
    named like `evaluate` that no code runs with grad on, a preview variant)
    with no `torch.no_grad()` or `torch.inference_mode()` in force: autograd
    keeps every activation for a backward that never comes (training-step peak
    memory; outputs kept for metrics hold their whole graphs).

    Left alone: functions that call `backward()` or `torch.autograd.grad`
    (Grad-CAM, adversarial examples) or whose every caller disables grad,
    Lightning's `*_step` hooks, `test_*` functions of test files, frozen or
    unpickled-frozen models, and warm-ups (a discarded forward outside any
    loop: the forwards after it decide). Reported once per function."""

    code = "MEM004"

    VALID = examples.VALID
    INVALID = examples.INVALID

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.index = ModuleIndex.of(ctx)
        self.units = [Unit(None, None)]  # the module's top level
        self.pending: list[Unit] = []
        self.grad_users: set[cst.CSTNode] = set()  # functions that call backward() & co.
        self.volatile_units: list[Unit] = []
        self.forwards = Forwards(ctx, self.index)
        self.finished: dict[cst.CSTNode, Unit] = {}  # every function's unit, by its node
        self.module: cst.Module | None = None
        self._flows: BackwardFlows | None = None
        #: the call last asked which module it runs, and the answer
        self._asked: tuple[cst.Call | None, str | None] = (None, None)
        self.unpickled: dict[cst.Call, str] = {}  # forward -> the import that unpickled its model

    @property
    def unit(self) -> Unit:
        return self.units[-1]

    def visit_Module(self, node: cst.Module) -> None:
        self.forwards.module_scope = self.ctx.scope
        self.module = node

    def flows(self) -> BackwardFlows:
        """How values reach a backward in this module, built once, on first need."""
        if self._flows is None:
            assert self.module is not None  # set by visit_Module, before any finding
            self._flows = BackwardFlows(self.module, self.ctx.names, set())
        return self._flows

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        unit = Unit(node, self.index.current_class)
        scopes = self.ctx.scopes
        if len(scopes) > 1 and type(scopes[-2].node) is cst.FunctionDef:
            # a closure runs the models of the function it is defined in, in
            # the mode they are in there (`inception.eval()`, then `get_pred`)
            outer = self.units[-1]
            unit.evaluated, unit.eval_calls = dict(outer.evaluated), dict(outer.eval_calls)
            unit.inherited_evals = frozenset(map(id, outer.eval_calls.values()))
        self.units.append(unit)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._forward_or_warm_up()
        unit = self.units.pop()
        self.finished[node] = unit
        if unit.wants_grad:
            self.grad_users.add(node)
        if unit.forward is not None and (not unit.wants_grad or evaluates_after_training(unit)):
            self.pending.append(unit)
        if unit.volatile is not None and node.name.value != "__init__":
            self.volatile_units.append(unit)

    def visit_Assign(self, node: cst.Assign) -> None:
        targets = [dotted_name(t.target) or "" for t in node.targets]
        if self.unit.frozen:  # `model.fc = nn.Linear(...)` after freezing: a new, trainable part
            self.unit.frozen -= {name.rsplit(".", 1)[0] for name in targets if "." in name}
        if not any(name.endswith(".requires_grad") for name in targets):
            return
        if literal_bool(node.value) is False:
            # `for v in model.parameters(): v.requires_grad = False`: a frozen
            # model's forward on an input without grad records nothing
            frozen = self.forwards.parameters_looped_over()
            if frozen is not None:
                self.unit.frozen.add(frozen)
            return
        # `x.requires_grad = True`: gradients with respect to the input (attacks, saliency)
        self.unit.wants_grad = True
        self.unit.grad_after_forward |= self.unit.forward is not None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        qualified = self.ctx.qualify(func)
        if method == "requires_grad_" and is_false(node):  # frozen: its forward records nothing
            self.unit.frozen.update(filter(None, [self.forwards.frozen_by(node)]))
            return
        if method in GRAD_METHODS or qualified in GRAD_USERS:
            self.unit.wants_grad = True
            self.unit.grad_after_forward |= self.unit.forward is not None
            return
        if qualified in VARIABLE:
            if is_volatile(node) and not self.index.grad_disabled and not self.ctx.in_cpu_branch() \
                    and not self.ctx.in_version_gate():
                after_eval = any(self.unit.evaluated.values())
                # the first one, or the first after `.eval()` in a function that also trains
                if self.unit.volatile is None or (after_eval and not self.unit.volatile_after_eval):
                    self.unit.volatile = (node, self.statement())
                    self.unit.volatile_after_eval = after_eval
                parent = self.ctx.parent
                if isinstance(parent, cst.Assign):
                    self.unit.volatile_names.update(
                        n for t in parent.targets for n in [dotted_name(t.target)] if n)
                if self.forwards.feeds_a_model(self.unit):
                    self.unit.volatile_fed = True
            return
        if method in ("eval", "train") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name and method == "train" and not is_false(node):
                self.units[-1] = after_train_call(self.unit, name)
            if name:
                self.unit.evaluated[name] = method == "eval" or is_false(node)
                if self.unit.evaluated[name]:
                    self.unit.eval_calls[name] = node
            return
        if method in ("cuda", "to", "cpu") and isinstance(func, cst.Attribute):
            name = dotted_name(func.value)
            if name:
                self.unit.on_gpu[name] = moves_to_cuda(node, self.ctx)
                self.forwards.placed.add(name)
        if self.unit.volatile_names and not self.unit.volatile_fed and any(
                dotted_name(a.value) in self.unit.volatile_names for a in node.args) \
                and self._module_run_by(node) is not None:
            self.unit.volatile_fed = True
        if self.index.grad_disabled and self.unit.volatile is not None \
                and not self.unit.guarded_forward:
            self.unit.guarded_forward = self._module_run_by(node) is not None
        warm_up = self.unit.warm_up
        if warm_up is not None and not self.unit.warmed_up \
                and self._module_run_by(node) == warm_up[2]:
            self.unit.warmed_up = True  # the work the warm-up prepared follows
        if self.unit.forward is not None or self.index.grad_disabled or self.ctx.grad_chosen:
            return  # (grad on by the code's own choice: `enable_grad`, `set_grad_enabled(x)`)
        if self.unit.any_forward is not None and not self.unit.evaluated \
                and not self._inference_named():
            return  # nothing left to learn here: its first forward is known, none can be inference
        module = self._module_run_by(node)
        forwards = self.forwards
        if module is None or forwards.in_signature() \
                or forwards.built_here_on_cpu(module, self.unit) \
                or self.ctx.in_cpu_branch() or forwards.fed_host_tensor(node):
            return
        after_eval = bool(self.unit.evaluated.get(module))
        inference = after_eval or self._inference_named()
        if self._discarded_once():
            # a warm-up, if the model runs again: its graph is freed as the
            # statement ends, and the forwards after it decide
            if inference and self.unit.warm_up is None:
                self.unit.warm_up = (node, self.statement(), module, after_eval,
                                     self.forwards.built_by(module))
            return
        if self.unit.any_forward is None:
            self.unit.any_forward = (node, module)
        if inference:
            self._take_forward(node, self.statement(), module, after_eval,
                               self.forwards.built_by(module))
            self.unit.forward_lambda = self._enclosing_lambda()

    def _module_run_by(self, node: cst.Call) -> str | None:
        """`Forwards.called_module` of `node`, worked out once per visit."""
        if self._asked[0] is not node:
            self._asked = (node, self.forwards.called_module(node, self.unit))
        return self._asked[1]

    def _enclosing_lambda(self) -> tuple[cst.Lambda, cst.CSTNode, cst.CSTNode] | None:
        ancestors = self.ctx.ancestors
        for i in range(len(ancestors) - 1, 1, -1):
            if type(ancestors[i]) is cst.FunctionDef:
                return None
            if type(ancestors[i]) is cst.Lambda:
                return ancestors[i], ancestors[i - 1], ancestors[i - 2]  # type: ignore[return-value]
        return None

    def _lambda_handed_to(self, unit: Unit) -> tuple[tuple[str, int], ...]:
        """Where the lambda a forward is written in goes, when only to
        functions of other modules (`func = lambda **x: model(**x)`, then
        `nondist_forward_collect(func, loader, n)`): each, as imported, with
        the position it is handed it at. Empty when it may run anywhere else."""
        if unit.forward_lambda is None or unit.node is None:
            return ()
        lambda_node, parent, above = unit.forward_lambda
        if isinstance(parent, cst.Arg) and isinstance(above, cst.Call):
            sites = [(above, parent)]
        elif isinstance(parent, cst.Assign) and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            name = parent.targets[0].target.value
            calls = calls_in(unit.node)
            if any(dotted_name(call.func) == name for call in calls):
                return ()  # the function calls it itself
            sites = [(call, arg) for call in calls for arg in call.args
                     if isinstance(arg.value, cst.Name) and arg.value.value == name]
        else:
            return ()
        handed = []
        for call, arg in sites:
            callee = self.ctx.names.qualify_name(dotted_name(call.func) or "")
            if callee is None or arg.keyword is not None or arg.star:
                return ()
            handed.append((callee, call.args.index(arg)))
        return tuple(handed)

    def _take_forward(self, node: cst.Call, statement: cst.CSTNode | None, module: str,
                      after_eval: bool, built: cst.BaseExpression | None) -> None:
        """The unit's forward to judge: its first unguarded one, or a discarded
        one that no forward of its model follows (a profiled or timed run)."""
        unit = self.unit
        unit.forward, unit.forward_after_eval = (node, statement, module), after_eval
        if (loader := unpickling_loader(built, self.ctx)) is not None:
            self.unpickled[node] = loader
        unit.forward_class = class_built(built) or annotated_class(module, self.ctx)
        if unit.node is None:
            # at the top level only a backward that follows counts (a script
            # that trains, then predicts)
            unit.wants_grad = False
            self.pending.append(unit)

    def _forward_or_warm_up(self) -> None:
        """At the end of a unit: a discarded forward nothing followed was the
        work, unless the unit builds an object (`__init__`: a warm-up, or lazy
        shapes, for the methods that run the model later)."""
        unit = self.unit
        building = unit.node is not None and unit.node.name.value == "__init__"
        if unit.forward is None and unit.warm_up is not None and not unit.warmed_up \
                and not building:
            self._take_forward(*unit.warm_up)

    def _discarded_once(self) -> bool:
        """`model(torch.zeros(1, 3, h, w))` as a statement of its own (or bound
        to `_`) outside any loop: nothing keeps its graph; before more
        forwards of the model, a warm-up whose cost is one forward's transient
        peak, not what the rule says."""
        parent = self.ctx.parent
        if isinstance(parent, cst.Assign):
            discarded = all(isinstance(t.target, cst.Name) and t.target.value == "_"
                            for t in parent.targets)
        else:
            discarded = type(parent) is cst.Expr
        return discarded and not self.ctx.in_loop

    def _inference_named(self) -> bool:
        unit = self.unit
        if unit.inference_named is None:
            unit.inference_named = isinstance(unit.node, cst.FunctionDef) \
                and is_inference_name(unit.node)
        return unit.inference_named

    def _report_volatile(self, node: cst.Call, statement: cst.CSTNode | None) -> None:
        """Once per function, at its first `volatile=True` (or its forward's finding)."""
        self.report(node, "Variable(..., volatile=True) has done nothing since PyTorch 0.4: "
                          "autograd still records the forward and keeps its activations; "
                          "wrap the inference in `with torch.no_grad():` and drop Variable",
                    statement, UnlessProjectOnCpu.here(self.ctx))

    def finish(self) -> None:
        names = self.ctx.names
        if not any(names.imports(root) for root in TORCH_ROOTS) \
                or (names.imports("mxnet") and not names.imports("torch")):
            # mxnet / TensorFlow / JAX code records no graph outside its tapes
            # (a Gluon script may take torchvision's transforms: no torch model)
            return
        self._forward_or_warm_up()  # the top level's
        reported: set[int] = set()
        for unit in self.pending:
            assert unit.forward is not None  # what made the unit pending
            call, statement, module = unit.forward
            if (unit.wants_grad and not evaluates_after_training(unit)) \
                    or module in unit.frozen or self._frozen_by_every_caller(unit, module) \
                    or self._left_alone(unit, module) \
                    or self.forwards.global_on_host(module) \
                    or self.index.forward_disables_grad(unit.forward_class):
                continue
            reported.add(id(unit))
            info = self.index.info(unit.node) if unit.node is not None else None
            unless = unless_elsewhere(info, self.index, self.ctx, self.facts.module, call)
            if named := unless_run_by_name_only(unit, info, self.index, self.facts.module):
                unless = Either((unless, named))
            if unit.forward_class is not None and unit.forward_class not in self.index.classes:
                unless = Either((unless, UnlessForwardDisablesGrad(unit.forward_class)))
            unless = Either((unless, UnlessForwardNeedsGrad(self.facts.module, unit.forward_class)))
            if call in self.unpickled:
                unless = Either((unless, UnlessUnpickledFrozen(self.facts.module,
                                                               self.unpickled[call])))
            if handed := self._lambda_handed_to(unit):
                unless = Either((unless, UnlessCalleesRunItGradOff(handed)))
            if unit.node is None:
                where = f"after {module}.eval()"
            elif unit.forward_after_eval:
                where = f"after {module}.eval() in '{unit.node.name.value}'"
            else:
                where = f"in '{unit.node.name.value}'"
            self.report(call, f"'{module}' runs forward {where} with autograd on: it saves every "
                              "activation for a backward that never comes (training-step peak "
                              "memory, outputs that hold their graphs); wrap the inference in "
                              "`with torch.no_grad():` or decorate the function with "
                              "@torch.no_grad()" + VOLATILE_TOO * (unit.volatile is not None),
                        statement, unless, fix=no_grad_fix(unit.node, self.ctx),
                        related=[(unit.eval_calls[module], f"'{module}' is put in eval mode here")]
                        if unit.forward_after_eval and module in unit.eval_calls else [])

        self._report_inference_through_helpers()
        top = self.units[0]
        for unit in (*self.volatile_units, *([top] if top.volatile is not None else [])):
            every_forward_guarded = unit.guarded_forward and unit.any_forward is None
            if unit.volatile is not None and id(unit) not in reported \
                    and not every_forward_guarded and (
                    not unit.wants_grad or unit.volatile_after_eval or unit.volatile_fed):
                self._report_volatile(*unit.volatile)

    def _report_inference_through_helpers(self) -> None:
        """An eval function whose forward runs in a helper of this file
        (`validate` puts the model in eval mode, then `run_batch(model, x)`
        runs it): reported at the call, where `with torch.no_grad():` goes."""
        for function, info, site, called, forward, module in inference_through_helpers(
                self.finished, self.index, self.ctx):
            name = function.name.value
            self.report(site.node, f"'{name}' runs inference through '{called}' with "
                                   f"autograd on: '{module}' runs forward there and saves "
                                   "every activation for a backward that never comes; wrap "
                                   f"the call in `with torch.no_grad():` or decorate "
                                   f"'{name}' with @torch.no_grad()",
                        None, unless_elsewhere(info, self.index, self.ctx, self.facts.module),
                        fix=no_grad_fix(function, self.ctx),
                        related=[(forward, f"'{module}' runs forward here, in '{called}'")])

    def _frozen_by_every_caller(self, unit: Unit, module: str) -> bool:
        """A model handed in as a parameter that every call in this file fills
        with a model its caller froze (`G = deepcopy(opts.G).eval()
        .requires_grad_(False)`, then `_eval_fvd(opts, G)`): its forward
        records nothing either. A function not called here may get anything."""
        info = self.index.info(unit.node) if unit.node is not None else None
        if info is None or unit.node is None or info.class_name is not None:
            return False
        names = [param.name.value for param in unit.node.params.params]
        sites = self.index.call_sites(info)
        if module not in names or not sites:
            return False
        for site in sites:
            caller = self.finished.get(site.caller.node) if site.caller is not None else None
            handed = call_arg(site.node, module, position=names.index(module))
            if caller is None or handed is None or dotted_name(handed.value) not in caller.frozen:
                return False
        return True

    def _left_alone(self, unit: Unit, module: str) -> bool:
        """Whether `unit`'s unguarded forward of `module` is no inference to report."""
        if unit.node is None:  # (a pending unit has a forward; the walk saw the module)
            return trained_at_top_level(self.module, self.ctx.names, unit.forward[1])  # type: ignore
        name = unit.node.name.value
        if name.lstrip("_").startswith("test") and self.ctx.in_test_file:
            return True  # `test_*` and its `_test_*` helpers: "test" is pytest's word here
        if self.forwards.names_function(module, unit.class_name):
            return True  # a function defined further down the file, named like a model
        if unit.class_name and (LIGHTNING_HOOK.fullmatch(name) and self.forwards.is_lightning(
                unit.class_name) or self.index.init_turns_grad_off(unit.class_name)):
            return True  # a Lightning hook; a class whose `__init__` turns grad off
        if (info := self.index.info(unit.node)) is None:
            return False
        if self.index.only_traced(info):
            return True  # a wrapper handed to `torch.onnx.export`: one forward, to trace it
        if (not own_eval(unit) and part_of_training(info, self.index, self.flows)) \
                or differentiated_by_helper(info, unit.forward, self.index, self.grad_users) \
                or (not unit.forward_after_eval
                    and self.forwards.is_model_method(unit, self.grad_users)):
            return True  # a caller back-propagates its result, or a helper differentiates it
        return self.index.grad_disabled_by_callers(info)
