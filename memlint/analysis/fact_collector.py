"""The facts a file gives the rest of the project, gathered while it is walked
(`ModuleFacts` says what they are; `analysis/project.py` what they add up to)."""

from __future__ import annotations

import builtins
import re

import libcst as cst

from memlint.analysis.autograd_values import AutogradValues
from memlint.analysis.context import Context
from memlint.analysis.datasets import decodes_media, is_media_dataset
from memlint.analysis.devices import made_on_cuda
from memlint.analysis.gpu_selection import hides_gpus, sets_current_device
from memlint.analysis.module_index import FunctionInfo, ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.project import CallFact, ModuleFacts
from memlint.analysis.screens import DEVICE_SETTER_TAILS
from memlint.analysis.torch_api import (AUTOGRAD_GRAD, COMPILERS, DATA_PARALLEL_WRAPPERS,
                                       HOST_FACTORIES)


class FactCollector:
    """Gathers a file's `ModuleFacts` during the walk (an analysis the engine
    walks before the rules, like the module index)."""

    def __init__(self, ctx: Context, facts: ModuleFacts, source: str = "") -> None:
        self.ctx = ctx
        self.facts = facts
        self._source = source
        #: calls whose result is unpacked into names: (index in `facts.calls`,
        #: the name at each position, "" where the target is no plain name)
        self._unpacked: list[tuple[int, tuple[str, ...]]] = []
        ctx.facts = facts  # what every analysis and rule of this walk reads
        #: per function being walked: the method names it calls (with grad off
        #: there or not), and whether it back-propagates
        self._functions: list[tuple[list[tuple[str, bool]], list[bool]]] = []
        #: names bound by relative imports (`from .validation import validate`:
        #: `validate` -> `.validation.validate`), which the import table leaves out
        self._relative: dict[str, str] = {}
        #: the project modules this file imports every name of (`from utils import *`)
        self._star_imports: list[str] = []
        #: per class being walked, the names each of its methods calls (`model_calls`)
        self._class_calls: list[dict[str, set[str]]] = []
        #: what forwards' returned tuples hold (`forward_elements`)
        self._values: AutogradValues | None = None
        #: per function being walked: a top-level one's parameters (None for
        #: any other) and, by position, the grad mode of each call of one
        self._callbacks: list[tuple[list[str] | None, dict[int, list[bool]]]] = []
        self.index = ModuleIndex.of(ctx)
        #: calls made with grad on in a top-level function: (index in
        #: `facts.calls`, the function), for `CallFact.within_grad_off`
        self._calls_in_functions: list[tuple[int, FunctionInfo]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if any(is_media_dataset(self.ctx.qualify(base.value)) for base in node.bases):
            self.facts.media_classes.add(node.name.value)
        self._class_calls.append({})

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        """A model's calls: those of its `forward` and of the methods it runs."""
        methods = self._class_calls.pop()
        if "forward" not in methods:
            return
        calls: set[str] = set()
        pending = ["forward"]
        while pending:
            found = methods.pop(pending.pop(), set())
            calls |= found
            pending += [name for name in found if name in methods]
        self.facts.model_calls[node.name.value] = frozenset(calls)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(([], [False]))
        top_level = self.ctx.class_def is None and not self._callbacks
        self._callbacks.append(
            ([p.name.value for p in node.params.params] if top_level else None, {}))
        class_def = self.ctx.class_def
        if node.name.value == "forward" and class_def is not None and any(
                self.ctx.decorator_grad_mode(d.decorator) is False for d in node.decorators):
            self.facts.grad_off_forwards.add(class_def.name.value)

    def visit_Return(self, node: cst.Return) -> None:
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is None or class_def is None or function.name.value != "forward" \
                or self.ctx.scopes[-2].node is not class_def:
            return
        name, known = class_def.name.value, self.facts.forward_elements
        if not isinstance(node.value, cst.Tuple) or known.get(name) == () or any(
                isinstance(e, cst.StarredElement) for e in node.value.elements):
            known[name] = ()  # a forward that returns anything else: nothing to say
            return
        if self._values is None:
            self._values = AutogradValues(self.ctx)  # made for the few files that need it
        clean = tuple(self._values.value_of(e.value).history is False
                      for e in node.value.elements)
        earlier = known.get(name, clean)
        known[name] = tuple(a and b for a, b in zip(earlier, clean)) \
            if len(earlier) == len(clean) else ()

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            module = dotted_name(node.module) if node.module else ""
            if node.relative or not (module or "").startswith(("torch", "numpy")):
                self._star_imports.append("." * len(node.relative) + (module or ""))
            return
        if not node.relative:
            return
        package = "." * len(node.relative) + (dotted_name(node.module) or "" if node.module else "")
        for alias in node.names:
            name = dotted_name(alias.name)
            local = dotted_name(alias.asname.name) if alias.asname else name
            if name and local:
                self._relative[local] = f"{package}.{name}" if node.module else package + name

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        parameters, called = self._callbacks.pop()
        if parameters is not None and called:
            self.facts.callbacks_run_grad_off[node.name.value] = frozenset(
                position for position, modes in called.items() if all(modes))
        methods, trains = self._functions.pop()
        calls = self.facts.method_calls
        for method, grad_off in methods:
            # `def evaluate_actions(): return self.actor.evaluate_actions()`
            if method != node.name.value:
                calls[method] = calls.get(method, True) and (trains[0] or grad_off)

    @classmethod
    def of(cls, ctx: Context) -> FactCollector | None:
        return ctx.analyses.get(cls)  # type: ignore[return-value]

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute):
            self._note_method_call(node.func.attr.value, node.func.value)
        elif type(node.func) is cst.Name and self._callbacks:
            parameters, called = self._callbacks[-1]
            if parameters is not None and node.func.value in parameters:
                called.setdefault(parameters.index(node.func.value), []).append(
                    self.ctx.grad_disabled)
        class_def = self.ctx.class_def
        if class_def is not None and decodes_media(self.ctx.qualify(node.func)):
            self.facts.media_classes.add(class_def.name.value)
        written = dotted_name(node.func)
        if written is None:
            return
        self._note_differentiating(node, written)
        if written.endswith(DEVICE_SETTER_TAILS):
            self._note_device_setter(node)
        if written.endswith(".add_argument"):
            self._note_cuda_option(node)
        elif written.endswith("Namespace"):
            self._note_cuda_setting(node)
        callee = self.imported_name(written) or written
        if callee.startswith(("self.", "cls.", "torch.")):
            return
        # only a callee reached through an import names another file's function
        # (`Project.calls_of`): `print(x)` and `len(x)` need no places
        places = self._places(node) if "." in callee else ""
        self._note_caller()
        if "." in callee:
            self._note_unpacking(node)
        self.facts.calls.append(CallFact(callee, self.ctx.grad_disabled, written, places))
        if "." not in callee and self._star_imports and not hasattr(builtins, callee):
            # `evaluate_model(...)` after `from utils import *`: perhaps utils'
            places = self._places(node)
            for offset in range(len(self._star_imports)):
                self._note_caller(len(self.facts.calls) + offset)
            self.facts.calls.extend(CallFact(f"{module}.{callee}", self.ctx.grad_disabled,
                                             written, places) for module in self._star_imports)

    def _note_caller(self, position: int | None = None) -> None:
        """Remember the top-level function a call with grad on is made in."""
        caller = self.index.current
        if caller is not None and caller.class_name is None and caller.parent is None \
                and not self.ctx.grad_disabled:
            self._calls_in_functions.append(
                (len(self.facts.calls) if position is None else position, caller))

    def _note_unpacking(self, node: cst.Call) -> None:
        """`a, b = helpers.make(...)`: the names each position of the result
        is bound to, up to a starred target (after it, positions shift)."""
        parent = self.ctx.parent
        if type(parent) is not cst.Assign or parent.value is not node or len(parent.targets) != 1:
            return
        target = parent.targets[0].target
        if type(target) not in (cst.Tuple, cst.List):
            return
        names: list[str] = []
        for element in target.elements:  # type: ignore[attr-defined]
            if type(element) is cst.StarredElement:
                break
            names.append(element.value.value if type(element.value) is cst.Name else "")
        self._unpacked.append((len(self.facts.calls), tuple(names)))

    def leave_Module(self, node: cst.Module) -> None:
        calls = self.facts.calls
        for position, caller in self._calls_in_functions:
            if self.index.grad_disabled_by_callers(caller):
                calls[position] = calls[position]._replace(within_grad_off=caller.name)
        if self._unpacked:
            self._note_dropped()

    def _note_dropped(self) -> None:
        """`CallFact.dropped`: a name an unpacking binds is never read when the
        file's text spells it, outside comment lines, no more often than such
        unpackings bind it (a word counted in a string or after code on its
        line only keeps a finding). Read from the text, where a walk of the
        tree would cost every file that unpacks a call: a substring count
        first (it can only count more), the words and their lines only for
        a name spelled a few times more than it is bound."""
        bound: dict[str, int] = {}
        for _, names in self._unpacked:
            for name in filter(None, names):
                bound[name] = bound.get(name, 0) + 1
        unread = {name for name, count in bound.items() if self._spelled_outside_comments(
            name, count + _COMMENTED_MENTIONS) <= count}
        calls = self.facts.calls
        for index, names in self._unpacked:
            dropped = tuple(i for i, name in enumerate(names) if name in unread)
            if dropped:
                calls[index] = calls[index]._replace(dropped=dropped)

    def _spelled_outside_comments(self, name: str, enough: int) -> int:
        """How often `name` is written as a word outside comment lines, counted
        up to `enough` (more says only that it is read)."""
        source = self._source
        if source.count(name) > enough:
            return enough
        return sum(not source[source.rfind("\n", 0, match.start()) + 1:match.start()].lstrip()
                   .startswith("#") for match in re.finditer(rf"\b{re.escape(name)}\b", source))

    def _places(self, node: cst.Call) -> str:
        """`CallFact.places`: read from each argument's own binding only (a
        project's every call pays for it), "" when no argument is on the host."""
        places = ""
        for arg in node.args:
            if arg.keyword is not None or arg.star:
                break
            value = self.ctx.resolve(arg.value)
            if type(value) is not cst.Call:
                places += "?"
                continue
            qualified = self.ctx.qualify(value.func)
            if made_on_cuda(value, self.ctx) or qualified in DATA_PARALLEL_WRAPPERS:
                places += "c"
            elif (type(value.func) is cst.Attribute and value.func.attr.value == "cpu") or (
                    qualified in HOST_FACTORIES and call_arg(value, "device") is None):
                places += "h"
            else:
                places += "?"
        return places if "h" in places else ""

    def visit_Assign(self, node: cst.Assign) -> None:
        if type(node.targets[0].target) is cst.Subscript:
            self._note_device_setter(node)
            self.facts.hides_gpus |= hides_gpus(node, self.ctx)

    def _note_differentiating(self, node: cst.Call, written: str) -> None:
        """What calls `torch.autograd.grad` and what a model's methods call
        (`UnlessForwardNeedsGrad`)."""
        function = self.ctx.function
        if function is None:
            return
        name = written.rsplit(".", 1)[-1]
        if name == "grad" and self.ctx.qualify(node.func) == AUTOGRAD_GRAD:
            name = AUTOGRAD_GRAD
            self.facts.differentiating.add(function.name.value)
        if not self._class_calls:
            return
        class_def, scopes = self.ctx.class_def, self.ctx.scopes
        for inner in range(len(scopes) - 1, 0, -1):  # the method of the class we are in
            method = scopes[inner].node
            if scopes[inner - 1].node is class_def and type(method) is cst.FunctionDef:
                self._class_calls[-1].setdefault(method.name.value, set()).add(name)
                break

    def _note_device_setter(self, node: cst.CSTNode) -> None:
        function = self.ctx.function
        if function is None:
            return
        if sets_current_device(node, self.ctx):
            self.facts.device_setters.add(function.name.value)

    def imported_name(self, written: str) -> str | None:
        """A called name as its import names it: `init_dist` -> `utils.dist.init_dist`,
        `misc.setup` -> `.misc.setup` (relative); None for the file's own names."""
        return self.ctx.names.qualify_name(written) or self._relatively(written)

    def _relatively(self, written: str) -> str | None:
        head, _, rest = written.partition(".")
        full = self._relative.get(head)
        return None if full is None else f"{full}.{rest}" if rest else full

    def _note_method_call(self, method: str, receiver: cst.BaseExpression) -> None:
        differentiates = method in ("backward", "grad")
        if differentiates and self._functions:
            self._functions[-1][1][0] = True
        elif not differentiates and self._of_a_torch_object(receiver):
            return  # `dist.sample()` of `dist = Categorical(...)`: torch's, not the project's
        elif not self._functions:
            self.facts.method_calls[method] = self.ctx.grad_disabled
        else:
            self._functions[-1][0].append((method, self.ctx.grad_disabled))

    def _of_a_torch_object(self, receiver: cst.BaseExpression) -> bool:
        """Whether the receiver is made by torch (`torch.distributions.Categorical(...)`,
        `torch.zeros(...)`), bound here: its methods are no project's. A model
        torch compiles or wraps (`torch.compile(net)`, DDP) keeps its own."""
        value = self.ctx.resolve(receiver) if type(receiver) is cst.Name else receiver
        if type(value) is not cst.Call:
            return False
        made_by = self.ctx.qualify(value.func) or ""
        return made_by.startswith("torch.") and made_by not in COMPILERS \
            and made_by not in DATA_PARALLEL_WRAPPERS and not made_by.startswith(_WRAPPERS)

    def _note_cuda_option(self, node: cst.Call) -> None:
        """`parser.add_argument("--cuda", action="store_true")`: the switch a
        user gives to run on the GPU, named in findings."""
        action = next((a.value for a in node.args
                       if a.keyword and a.keyword.value == "action"), None)
        default = next((a.value for a in node.args
                        if a.keyword and a.keyword.value == "default"), None)
        if not (isinstance(action, cst.SimpleString) and action.evaluated_value == "store_true"):
            return
        if isinstance(default, cst.Name) and default.value == "True":
            return
        for arg in node.args:
            if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
                option = str(arg.value.evaluated_value).lstrip("-").replace("-", "_")
                if option in _CUDA_OPTIONS:
                    self.facts.cuda_options.add(option)

    def _note_cuda_setting(self, node: cst.Call) -> None:
        """`args = Namespace(..., cuda=False)`: a notebook's settings, CUDA off
        as written (the PyTorch NLP book's chapters): a value, not an option."""
        if self.ctx.qualify(node.func) not in ("argparse.Namespace", "types.SimpleNamespace"):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _CUDA_OPTIONS \
                    and isinstance(arg.value, cst.Name) and arg.value.value == "False":
                self.facts.cuda_off_settings.add(arg.keyword.value)


#: comment-line mentions of an unpacked name looked for before it counts as read
_COMMENTED_MENTIONS = 3
#: torch calls that wrap a model and hand its methods on (FSDP, `torch.jit.trace`, AMP wrappers)
_WRAPPERS = ("torch.distributed.", "torch.jit.", "torch.nn.parallel.", "torch.ao.", "torch.fx.")

#: Options that turn the GPU on (`--no-cuda`, `--cpu` turn it off: CUDA by default).
#: `--accel`: pytorch/examples' switch to `torch.accelerator.current_accelerator()`.
_CUDA_OPTIONS = {"cuda", "gpu", "use_gpu", "use_cuda", "with_cuda", "enable_cuda", "on_gpu",
                 "accel", "use_accel", "accelerator", "use_accelerator"}
