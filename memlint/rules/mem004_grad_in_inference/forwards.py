"""Which call here runs a module's forward, and can that module be on a GPU?

MEM004's reading of a file: a call is a forward when the callee was built as a
module (or is put in eval mode here), and it can hold GPU memory unless the
model was built in this function and never moved, or is fed a tensor made on
the host. Kept apart from the rule so the rule reads as its query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from memlint.analysis.walker import children
from memlint.analysis.context import BindingSite, Context, Scope, either_values
from memlint.analysis.devices import creates_on_cuda, moves_to_cuda
from memlint.analysis.models import (CHAINED, built_kind, class_built, constructed_kind,
                                     is_loss_name, named_like_a_class, unchained)
from memlint.analysis.module_index import ClassInfo, ModuleIndex
from memlint.analysis.names import call_arg, dotted_name, literal_bool
from memlint.analysis.torch_api import HOST_FACTORIES

#: Names real code gives to modules when their binding is not visible here.
_MODEL_NAMES = re.compile(r"(?:.*_)?(model|net|network|encoder|decoder|generator|"
                          r"discriminator|classifier|backbone|critic|actor|policy|teacher|"
                          r"student|unet|vae|autoencoder|netg|netd)$|.*model$")
_MODULE_FACTORIES = ("torch.nn.", "torchvision.models.", "timm.", "torch.hub.load",
                     "transformers.")
#: Wrappers that are called like modules but disable grad in their own predict path.
_SELF_GUARDED = ("ultralytics.", "transformers.pipeline", "sentence_transformers.")
#: `setup_model(...)`, `load_model(...)`: functions about a model, not a model.
_VERB_PREFIXES = {"setup", "load", "build", "get", "create", "make", "init", "prepare", "save",
                  "export", "wrap", "compile", "update", "copy", "run", "call", "fit", "train",
                  "to", "eval", "evaluate", "convert", "freeze", "unwrap", "set", "apply", "print",
                  "log", "check", "is", "has", "reset", "register", "fuse", "quantize", "prune",
                  "process", "preprocess", "postprocess", "tokenize", "collate"}
#: `DummyModel(...)`, `Net()`: calling a class builds a module, it runs no forward
#: (`G_AB`, `netG`, `model` are instances)
_MODEL_BASE_SUFFIXES = ("Model", "Module", "Net", "Network")
_LIGHTNING_BASES = ("LightningModule",)


@dataclass
class Unit:
    """What one function (or the module's top level) did, in source order."""

    node: cst.FunctionDef | None  # None: the module's top level
    class_name: str | None
    evaluated: dict[str, bool] = field(default_factory=dict)  # module name -> in eval mode
    eval_calls: dict[str, cst.Call] = field(default_factory=dict)  # module name -> its last .eval()
    on_gpu: dict[str, bool] = field(default_factory=dict)  # module name -> moved to a CUDA device
    forward: tuple[cst.Call, cst.CSTNode | None, str] | None = None  # first unguarded forward
    volatile: tuple[cst.Call, cst.CSTNode | None] | None = None  # first Variable(volatile=True)
    #: ... after a `.eval()`: the inference part of a training loop
    volatile_after_eval: bool = False
    volatile_names: set[str] = field(default_factory=set)  # names bound to a volatile Variable
    volatile_fed: bool = False  # one is fed to a model (a DQN's target forward in a training step)
    #: a discarded forward outside any loop, as `_take_forward` takes it ...
    warm_up: tuple[cst.Call, cst.CSTNode | None, str, bool, cst.BaseExpression | None] | None = None
    #: ... and whether its model ran again after it (then it was a warm-up)
    warmed_up: bool = False
    #: the lambda its forward is written in, with the two nodes above it
    forward_lambda: tuple[cst.Lambda, cst.CSTNode, cst.CSTNode] | None = None
    #: a model runs under no_grad after its volatile Variable (then, alone, it changes nothing)
    guarded_forward: bool = False
    wants_grad: bool = False
    #: the first unguarded forward ran after a `.eval()` of its model
    forward_after_eval: bool = False
    #: the `.eval()` calls a closure inherits from the function it is defined in
    inherited_evals: frozenset[int] = frozenset()
    #: a backward (or `requires_grad = True`) comes after that forward
    grad_after_forward: bool = False
    #: models whose every parameter it sets `requires_grad = False`
    frozen: set[str] = field(default_factory=set)
    #: its first module forward with grad on, inference or not (a helper that
    #: an eval function calls: `validate` -> `run_batch(model, x)`)
    any_forward: tuple[cst.Call, str] | None = None
    #: the class the forwarded model was built from, where its binding shows it
    forward_class: str | None = None
    #: its name says inference (`evaluate`, `predict`): worked out on first use
    inference_named: bool | None = None


class Forwards:
    """The module forwards of one file, as the rule walks it."""

    def __init__(self, ctx: Context, index: ModuleIndex) -> None:
        self.ctx = ctx
        self.index = index
        #: names anything calls `.to()`, `.cuda()` or `.cpu()` on, anywhere in the file
        self.placed: set[str] = set()
        self.module_scope: Scope | None = None  # the file's top-level bindings, for finish()

    def parameters_looped_over(self) -> str | None:
        """`model` when inside `for v in model.parameters():` (or
        `named_parameters()`): the loop goes over every parameter of it."""
        for ancestor in reversed(self.ctx.ancestors):
            if isinstance(ancestor, cst.For):
                call = ancestor.iter
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
                        and call.func.attr.value in ("parameters", "named_parameters"):
                    return dotted_name(call.func.value)
                return None
        return None

    def frozen_by(self, call: cst.Call) -> str | None:
        """The model `call` (`.requires_grad_(False)`) freezes: its receiver
        through the methods that return the module (`G.eval().requires_grad_(False)`),
        else the name the chain is bound to (`G_ema = deepcopy(G).requires_grad_(False)`)."""
        receiver = unchained(call.func.value) if isinstance(call.func, cst.Attribute) else None
        name = dotted_name(receiver) if receiver is not None else None
        if name is not None:
            return name
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Assign) and len(ancestor.targets) == 1:
                return dotted_name(ancestor.targets[0].target)
            if not isinstance(ancestor, (cst.Call, cst.Attribute, cst.Arg)):
                return None
        return None

    def built_by(self, module: str) -> cst.BaseExpression | None:
        """`DiffVC(params)` for a model bound to `DiffVC(params).cuda()`."""
        site = self.ctx.binding_site(module)
        return self.where_built(module, site.value if site is not None else None, site)[0]

    def where_built(self, module: str, value: cst.BaseExpression | None,
                     site: BindingSite | None) -> tuple[cst.BaseExpression | None, bool]:
        """Back from `module`'s binding (`value`, at `site`) to what built it,
        through `net.eval()`, `Net().cuda()` and `nn.DataParallel(model)`
        (which moves nothing); and whether a move to a CUDA device was on the way."""
        moved = False
        for _ in range(4):
            while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value in CHAINED:
                moved = moved or moves_to_cuda(value, self.ctx)
                value = value.func.value
            if isinstance(value, cst.Call) and value.args \
                    and (dotted_name(value.func) or "").endswith("DataParallel"):
                value = value.args[0].value  # the model it wraps
                continue
            if dotted_name(value) != module or site is None or site.previous is None:
                break
            site = site.previous
            value = site.value
        return value, moved

    def feeds_a_model(self, unit: Unit) -> bool:
        """The volatile Variable being built is an argument of a model's call
        (`model(Variable(s, volatile=True).type(FloatTensor))`)."""
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Call) and self.called_module(ancestor, unit) is not None:
                return True
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return False
        return False

    def called_module(self, call: cst.Call, unit: Unit) -> str | None:
        """The name of the module this call runs forward, if it is one. A call
        with no input (`configs.model()`) or of a name bound to classes
        (`encoder = encoders.Linear`, or `partial(...)` of one, in each branch)
        builds a module: it runs no forward."""
        if not call.args:
            return None
        target = call.func
        if isinstance(target, cst.Attribute) and target.attr.value == "forward":
            target = target.value
        name = dotted_name(target)
        if name is None or self.ctx.qualify(target) is not None:
            return None  # `F.relu(x)`, `torch.sigmoid(x)`: library functions
        bound = self.ctx.binding(name)
        if bound is not None and all(_names_a_class(v, self.ctx) for v in either_values(bound)):
            return None
        if is_loss_name(name) or (bound is not None
                                  and constructed_kind(bound, self.ctx) in ("loss", "other")):
            return None  # `criterion(out, y)`: a loss; `core.compile_model(...)`: not PyTorch
        if unit.evaluated.get(name):
            return name
        if bound is not None:
            verdict = self.constructs_module(bound)
            if verdict is not None:
                return name if verdict else None
        # `decoder = self.char_decode`, `net = linreg`: an alias is judged by what it names
        judged = dotted_name(bound) if isinstance(bound, (cst.Attribute, cst.Name)) else None
        judged = judged or name
        if named_like_a_class(judged) or self.names_function(judged, unit.class_name):
            return None
        written = judged.rsplit(".", 1)[-1]
        last = written.lower()
        words = last.strip("_").split("_")
        if words[0] in _VERB_PREFIXES or "for" in words[:-1] or "to" in words[1:-1]:
            return None  # `_process_mentions_for_model`: work done for a model, not one
        # `G(z)`, `D(x)`: a GAN's generator and discriminator, by the capital letter
        return name if _MODEL_NAMES.fullmatch(last) or written in ("G", "D") else None

    def built_here_on_cpu(self, module: str, unit: Unit) -> bool:
        """A model built in this function (or at the top level) and never moved
        to a GPU before its forward: a model file's CPU smoke test
        (`net = ResNet18(); y = net(torch.randn(2, 3, 32, 32))`) or a CPU
        script, not inference on a GPU."""
        scope = next((s for s in reversed(self.ctx.scopes) if module in s.bindings), None)
        if scope is None or (scope is not self.ctx.scope and (  # a closure's: its function's
                type(scope.node) is not cst.FunctionDef or module in self.placed)):
            return False  # a parameter, an attribute, a global: placed elsewhere
        if unit.on_gpu.get(module):
            return False
        value, moved = self.where_built(module, scope.bindings[module], scope.sites.get(module))
        if moved or not isinstance(value, cst.Call) or call_arg(value, "device") is not None \
                or creates_on_cuda(value, self.ctx):
            return False
        # `net = densenet_cifar()` of a function defined here builds one too
        return (class_built(value) is not None
                or (dotted_name(value.func) or "") in self.index.functions_by_name
                or constructed_kind(value, self.ctx) == "module")

    def global_on_host(self, module: str) -> bool:
        """A model bound once at the file's top level, by building it
        (`detection = maskrcnn_resnet50_fpn(pretrained=True)`), that nothing in
        the file moves (`.to()`, `.cuda()`), wraps or hands to any call: it
        stays on the CPU, wherever the file runs its forward. A notebook's
        CPU demo, not inference on a GPU."""
        scope = self.module_scope
        if scope is None or "." in module or module in self.placed:
            return False
        site = scope.sites.get(module)
        if site is None or site.previous is not None or site.unpacked_from is not None:
            return False
        value = site.value
        chain = value
        while isinstance(chain, cst.Call) and isinstance(chain.func, cst.Attribute) \
                and chain.func.attr.value in CHAINED:
            if chain.func.attr.value in ("to", "cuda"):
                return False
            chain = chain.func.value
        if not isinstance(chain, cst.Call) or call_arg(chain, "device") is not None \
                or "DataParallel" in (dotted_name(chain.func) or "") \
                or built_kind(chain, self.ctx) != "module":
            return False
        return not any(isinstance(expr, cst.Name) and expr.value == module
                       for expr, _ in self.index.escaped)

    def names_function(self, name: str, class_name: str | None) -> bool:
        """`_assert_model(...)`, `random_data_generator(...)`: a function of this
        module (or a method of this class, through `self.`) named like a model."""
        head, _, attr = name.partition(".")
        if not attr:
            return name in self.index.functions_by_name
        return (head == "self" and "." not in attr and class_name is not None
                and bool(self.index.methods_named(class_name, attr)))

    def fed_host_tensor(self, call: cst.Call) -> bool:
        """`data = torch.randn(2, 3, 32, 32)` then `model(data)`: the input made
        here on the CPU and never moved. A model on a GPU would refuse it, so
        this forward runs on the CPU (a shape probe before `.cuda()`). Only
        the first argument counts: lengths for `pack_padded_sequence` are
        meant to stay on the CPU next to a CUDA input."""
        first = next((a.value for a in call.args if a.keyword is None and not a.star), None)
        for _ in range(8):  # `x = torch.tensor(v)`, then `model(x.view(1, -1))`
            if isinstance(first, cst.Name):
                site = self.ctx.binding_site(first.value)
                first = site.value if site is not None and site.unpacked_from is None else None
            elif isinstance(first, cst.Call) and isinstance(first.func, cst.Attribute) \
                    and first.func.attr.value in _SAME_DEVICE_METHODS:
                first = first.func.value
            else:
                break
        return isinstance(first, cst.Call) and self.made_on_host(first)

    def made_on_host(self, call: cst.Call) -> bool:
        """`torch.randn(...)`, `torch.FloatTensor(1, 3, 8, 8)`: a new tensor with
        no device, in a file whose default device is not set to CUDA."""
        qualified = self.ctx.qualify(call.func) or ""
        return qualified in HOST_FACTORIES and call_arg(call, "device") is None

    def in_signature(self) -> bool:
        """A call in a parameter's default (`model_fn=lambda m, x: m(x)`) runs
        where the lambda is called, not in the function being defined."""
        for ancestor in reversed(self.ctx.ancestors):
            if isinstance(ancestor, cst.Parameters):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.IndentedBlock)):
                return False
        return False

    def constructs_module(self, value: cst.BaseExpression) -> bool | None:
        """True for `nn.Linear(...)`, `Net().to(device)`, `resnet18()`,
        `AutoModel.from_pretrained(...)`; False for literals, lambdas and
        functions; None when it cannot tell."""
        kind = constructed_kind(value, self.ctx)
        if kind is not None:
            return kind == "module"
        value = unchained(value)
        if isinstance(value, (cst.BaseString, cst.Integer, cst.Float, cst.Lambda, cst.List,
                              cst.Dict, cst.Tuple, cst.BaseComp)):
            return False
        if not isinstance(value, cst.Call):
            return None
        qualified = self.ctx.qualify(value.func) or ""
        if qualified.startswith(_SELF_GUARDED):
            return False
        if qualified.startswith(_MODULE_FACTORIES):
            return True
        if isinstance(value.func, cst.Attribute) and value.func.attr.value == "from_pretrained":
            return True
        if isinstance(value.func, cst.Name) and self.index.local_class(value.func) is not None:
            return self.is_module_class(value.func.value)
        return None

    def is_module_class(self, class_name: str) -> bool | None:
        """True for a local subclass of nn.Module; None when its bases are not known here."""
        for info in self.index.lineage(class_name):
            for base in info.bases:
                qualified = self.ctx.names.qualify(base) or ""
                if qualified.startswith(("torch.nn.", "transformers.")):
                    return True
        return None

    # -- after the walk ---------------------------------------------------

    def is_model_method(self, unit: Unit, grad_users: set[cst.CSTNode]) -> bool:
        """`predict` / `full_sort_predict` of a model class: the model's own API,
        whose caller (an evaluation loop, often in another file) picks the grad mode."""
        if unit.class_name is None:
            return False
        for info in self.index.lineage(unit.class_name):
            if "forward" in info.methods or self.is_module_class(info.name):
                return True
            for base in info.bases:
                name = dotted_name(base) or ""
                if name.endswith(_MODEL_BASE_SUFFIXES) and name not in self.index.classes:
                    return True  # a project's model base class from another file (`QueBaseModel`)
            if self.builds_its_layers(info, grad_users):
                return True
        return False

    def builds_its_layers(self, info: ClassInfo, grad_users: set[cst.CSTNode]) -> bool:
        """A class whose `__init__` builds modules onto `self` (`self.mlp =
        DNN(...).to(self.device)`, `self.fc = nn.Linear(...)`) and none of whose
        methods back-propagates is a model, whatever its base (RecBole's
        `DiffRec(GeneralRecommender)`, the base in another file); a trainer
        that builds its model also runs the backward."""
        init = info.methods.get("__init__")
        if init is None or any(m.node in grad_users for m in info.methods.values()):
            return False
        pending: list[cst.CSTNode] = [init.node.body]
        while pending:
            node = pending.pop()
            if type(node) is cst.Assign and any(
                    (dotted_name(t.target) or "").startswith("self.") for t in node.targets):
                built = unchained(node.value)
                if isinstance(built, cst.Call) and (
                        constructed_kind(built, self.ctx) == "module"
                        or self.is_module_class(dotted_name(built.func) or "")):
                    return True
            elif not isinstance(node, cst.BaseExpression):
                pending.extend(children(node))
        return False

    def is_lightning(self, class_name: str) -> bool:
        for info in self.index.lineage(class_name):
            if "training_step" in info.methods:
                return True
            for base in info.bases:
                name = self.ctx.names.qualify(base) or dotted_name(base) or ""
                if name.endswith(_LIGHTNING_BASES):
                    return True
        return False


VOLATILE_TOO = " (its Variable(..., volatile=True) has done nothing since PyTorch 0.4)"


def _names_a_class(value: cst.BaseExpression, ctx: Context) -> bool:
    """`encoders.Linear`, `partial(encoders.Linear, ...)`: a class, not an
    instance (CapWords, as Python's own convention names classes)."""
    if isinstance(value, cst.Call) and ctx.qualify(value.func) == "functools.partial" \
            and value.args:
        value = value.args[0].value
    name = dotted_name(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    return name is not None and named_like_a_class(name)


def is_volatile(call: cst.Call) -> bool:
    volatile = call_arg(call, "volatile")
    return volatile is not None and isinstance(volatile.value, cst.Name) \
        and volatile.value.value == "True"


#: Tensor methods whose result is on the device of the tensor they are called on.
_SAME_DEVICE_METHODS = {"view", "unsqueeze", "squeeze", "reshape", "float", "long", "int",
                        "double", "half", "t", "transpose", "permute", "contiguous",
                        "flatten", "expand", "view_as"}


def is_false(call: cst.Call) -> bool:
    """`model.train(False)` puts the model in eval mode."""
    return bool(call.args) and literal_bool(call.args[0].value) is False
