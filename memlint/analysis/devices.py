"""Is this expression a CUDA device, and is this call a move onto one?

Shared by every rule that cares where tensors live (MEM001, MEM002, MEM005).
Answers are three-valued: True (a CUDA device, or a name that code
conventionally uses for one), False (known to be the CPU, a dtype, ...),
None (cannot tell).
"""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.models import built_kind, called_kind
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.project import ModuleFacts
from memlint.analysis.torch_api import (CUDA_TENSOR_TYPES, CURRENT_CUDA_DEVICE,
                                        DATASET_ITEM_METHODS, DEVICE_FACTORIES,
                                        DEVICE_FACTORY, HOST_COPIES, INDEX_RANGES,
                                        TENSOR_DATASETS)

#: Names that hold the training device in real code when their binding is not visible.
CONVENTIONAL_DEVICE_NAMES = {"device", "dev", "cuda_device", "gpu", "self.device",
                             "args.device", "opt.device", "cfg.device", "config.device",
                             "world.device", "self.dev", "params.device", "hparams.device"}
#: Words in a device factory's name that say "not CUDA": `xm.xla_device()`, `get_tpu_device()`.
_OTHER_ACCELERATORS = {"xla", "tpu", "mps", "cpu"}


def string_value(node: cst.BaseExpression) -> str | None:
    """The text of a plain string literal, or the leading text of an f-string."""
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:
            return None
        return value if isinstance(value, str) else None
    if isinstance(node, cst.FormattedString):
        head = node.parts[0] if node.parts else None
        return head.value if isinstance(head, cst.FormattedStringText) else ""
    if isinstance(node, cst.ConcatenatedString):
        return string_value(node.left)
    return None


def _device_string(text: str) -> bool | None:
    text = text.strip().lower()
    if text.startswith("cuda"):
        return True
    if text.startswith(("cpu", "mps", "meta", "xla", "xpu")):
        return False
    return None


def is_cuda_device(node: cst.BaseExpression | None, ctx: Context, depth: int = 0) -> bool | None:
    """Whether `node` names a CUDA device."""
    if node is None or depth > 6:
        return None
    text = string_value(node)
    if text is not None:
        return _device_string(text)
    if isinstance(node, cst.Integer):
        return True  # `.to(0)`, `.cuda(1)`: a CUDA ordinal
    if isinstance(node, cst.IfExp):
        if _tests_setting_off(node.test, ctx):
            # `"cuda" if args.cuda else "cpu"` with `Namespace(cuda=False)`: the CPU as written
            return is_cuda_device(node.orelse, ctx, depth + 1)
        # `"cuda" if args.cuda else "cpu"` with a `--cuda` option: the GPU when
        # run as meant, so a CUDA arm makes it a CUDA device
        branches = (is_cuda_device(node.body, ctx, depth + 1),
                    is_cuda_device(node.orelse, ctx, depth + 1))
        if True in branches:
            return True
        return False if branches == (False, False) else None
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "format":
            template = string_value(func.value)  # `"cuda:{}".format(args.gpu)`
            return _device_string(template) if template is not None else None
        qualified = ctx.qualify(func)
        if qualified in DEVICE_FACTORIES:
            first = call_arg(node, "type", position=0)
            return is_cuda_device(first.value, ctx, depth + 1) if first else None
        if qualified in CURRENT_CUDA_DEVICE:
            return True
        function_name = dotted_name(node.func) or ""
        if (qualified or "").startswith("torch_xla") or \
                set(re.split(r"[._]", function_name.lower())) & _OTHER_ACCELERATORS:
            return False  # xm.xla_device(), torch_xla.device(), get_mps_device()
        if "device" in function_name.rsplit(".", 1)[-1].lower():
            return True  # get_device(), utils.get_device(), ...
        return None
    name = dotted_name(node)
    if name is None:
        return None
    if name.endswith(".device") and name not in CONVENTIONAL_DEVICE_NAMES \
            and ".".join(name.split(".")[-2:]) not in CONVENTIONAL_DEVICE_NAMES:
        # (`self.config.device` is the configured device, like `config.device`)
        return None  # `x.to(other.device)` follows another tensor
    qualified = ctx.qualify(node)
    if qualified is not None and qualified.startswith("torch.") \
            and qualified not in DEVICE_FACTORIES:
        # (`device` qualified as the class `torch.device` is a parameter that
        # shadows `from torch import device`: no tensor moves to a class)
        return False  # `torch.float16`, `torch.int64`: dtypes
    bound = ctx.binding(name)
    if bound is not None:
        return is_cuda_device(bound, ctx, depth + 1)
    spelled = name.lower()  # `DEVICE = torch.device(...)`: the same name, as a constant
    if spelled in CONVENTIONAL_DEVICE_NAMES \
            or spelled.rsplit(".", 1)[-1] in CONVENTIONAL_DEVICE_NAMES:
        # in a program written only for TPUs the conventional name holds the XLA device
        return None if ctx.names.imports("torch_xla") and not _file_mentions_cuda(ctx) else True
    return None


def _tests_setting_off(test: cst.BaseExpression, ctx: Context) -> bool:
    """`args.cuda` (or `args.cuda and torch.cuda.is_available()`) where this
    file writes that setting as False (`Namespace(cuda=False)`)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_setting_off(test.left, ctx) or _tests_setting_off(test.right, ctx)
    name = dotted_name(test) or ""
    return ctx.facts is not None and "." in name \
        and name.rsplit(".", 1)[-1] in ctx.facts.cuda_off_settings


def gpu_option(facts: ModuleFacts | None) -> str | None:
    """`--accel` where the file's GPU is behind an option that is off unless
    given (the first by name, where it has several), else None."""
    return f"--{min(facts.cuda_options)}" if facts is not None and facts.cuda_options else None


def run_with(facts: ModuleFacts) -> str:
    """` when run with --accel` where the file's GPU is behind an option that
    is off unless given: the program runs there when used as meant."""
    option = gpu_option(facts)
    return f" when run with {option}" if option else ""


def _file_mentions_cuda(ctx: Context) -> bool:
    return ctx.facts is None or ctx.facts.mentions_cuda


def cuda_tensor_type(node: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool:
    """`torch.cuda.FloatTensor`, or a name bound to it (`Tensor =
    torch.cuda.FloatTensor`, `self.dtype = torch.cuda.FloatTensor`), also as
    one arm of a choice (`torch.cuda.FloatTensor if cuda else
    torch.FloatTensor`: the GPU type when run as meant)."""
    node = ctx.resolve(node)
    if isinstance(node, cst.IfExp):
        return depth < 4 and not _tests_setting_off(node.test, ctx) and (
            cuda_tensor_type(node.body, ctx, depth + 1)
            or cuda_tensor_type(node.orelse, ctx, depth + 1))
    qualified = ctx.qualify(node) or ""
    return (qualified.startswith("torch.cuda.")
            and qualified.rsplit(".", 1)[-1] in CUDA_TENSOR_TYPES)


def moves_to_cuda(call: cst.Call, ctx: Context) -> bool:
    """`x.cuda()`, `x.to(<cuda device>)`, `x.type(torch.cuda.FloatTensor)`."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    method = func.attr.value
    if method == "cuda":
        return not (ctx.qualify(func.value) or "").startswith("torch")  # not `torch.cuda`
    if method == "to":
        target = call_arg(call, "device", position=0)
        return target is not None and is_cuda_device(target.value, ctx) is True
    if method == "type" and call.args:
        return cuda_tensor_type(call.args[0].value, ctx)
    return False


def creates_on_cuda(call: cst.Call, ctx: Context) -> bool:
    """A tensor built straight on a CUDA device: `torch.tensor(x, device="cuda")`,
    `torch.cuda.FloatTensor(x)`."""
    if cuda_tensor_type(call.func, ctx):
        return True
    qualified = ctx.qualify(call.func) or ""
    if not qualified.startswith("torch."):
        return False
    device = call_arg(call, "device")
    return device is not None and is_cuda_device(device.value, ctx) is True


class ModelPlacements:
    """Where each model built in a scope was last put, in the order the code
    runs: `model = Net()` then `model.to("cpu")`, `model.cuda()`, `model =
    model.to(device)`. Lets a rule tell a forward whose graph lives in host
    memory (a notebook's "train on the CPU" cell, a model not moved yet) from
    one on a GPU. A walker analysis (`ctx.shared(ModelPlacements)`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.index = ModuleIndex.of(ctx)
        #: (scope node, name) -> True (a CUDA device), False (the CPU), None (unknown)
        self._moves: dict[tuple[int, str], bool | None] = {}

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value not in ("to", "cuda", "cpu"):
            return
        name = dotted_name(func.value)
        if name is not None:
            self._moves[(id(self.ctx.scope.node), name)] = moved_onto_cuda(
                node, func.attr.value, self.ctx)

    def on_host(self, model: cst.BaseExpression) -> bool:
        """Whether the model `model` names was built in the current scope and is
        on the CPU here: built without a device and never moved since, or last
        moved to the CPU. False when it cannot be told (a parameter, an
        attribute set elsewhere, a move to a device of unknown kind)."""
        name = dotted_name(model)
        scope = self.ctx.scope
        if name is None or name not in scope.bindings:
            return False
        moved = self._moves.get((id(scope.node), name), _UNMOVED)
        if moved is not _UNMOVED:
            return moved is False
        built = scope.bindings[name]
        while isinstance(built, cst.Call) and isinstance(built.func, cst.Attribute) \
                and built.func.attr.value in _MODEL_CHAIN:
            if built.func.attr.value in ("to", "cuda", "cpu"):
                return moved_onto_cuda(built, built.func.attr.value, self.ctx) is False
            built = built.func.value
        if not isinstance(built, cst.Call) or call_arg(built, "device") is not None \
                or creates_on_cuda(built, self.ctx):
            return False
        # a class built here, not a factory (`load_model(p)`, `from_pretrained`) that may place it
        constructor = (dotted_name(built.func) or "").rsplit(".", 1)[-1]
        return self._module_class(built.func) or (
            constructor[:1].isupper() and built_kind(built, self.ctx) == "module")

    def _module_class(self, func: cst.BaseExpression) -> bool:
        """`FashionMNISTModelV0(...)` where this module defines that class on `nn.Module`."""
        info = self.index.local_class(func)
        return info is not None and any(
            (self.ctx.qualify(base) or "").startswith("torch.nn.")
            for ancestor in self.index.lineage(info.name) for base in ancestor.bases)


_UNMOVED = object()
#: what `Net().eval().to(device)` may chain onto a model it builds
_MODEL_CHAIN = ("to", "cuda", "cpu", "eval", "train", "float", "double", "half")


def moved_onto_cuda(call: cst.Call, method: str, ctx: Context) -> bool | None:
    """For `x.cuda()`, `x.cpu()`, `x.to(...)` (`method` names which): True onto
    a CUDA device, False onto the CPU or not a move at all
    (`x.to(torch.float64)`), None unknown."""
    if method in ("cuda", "cpu"):
        return method == "cuda"
    target = call_arg(call, "device", position=0)
    if target is None:
        return False  # `x.to(other_tensor)` is rare; `x.to(dtype=...)` stays put
    qualified = ctx.qualify(target.value) or ""
    if qualified.startswith("torch.") and not qualified.startswith(DEVICE_FACTORY):
        return False  # a dtype: the model stays where it was
    return is_cuda_device(target.value, ctx)


def item_moved_to_a_device(call: cst.Call, ctx: Context) -> bool:
    """`.to(self.device)` (or `.cuda()`) in a data set's `__getitem__`, to a
    device that may be a GPU: its items, and a loader's batches of them, may
    be CUDA tensors, which cannot be pinned (whisper's LibriSpeech notebook;
    where worker processes run it, MEM002's finding)."""
    function, func = ctx.function, call.func
    return function is not None and function.name.value in DATASET_ITEM_METHODS \
        and type(func) is cst.Attribute and func.attr.value in ("to", "cuda") \
        and moved_onto_cuda(call, func.attr.value, ctx) is not False


def made_on_cuda(value: cst.BaseExpression, ctx: Context) -> bool:
    """`x.cuda()`, `x.to(device)`, `torch.tensor(x, device="cuda")`."""
    return isinstance(value, cst.Call) and (moves_to_cuda(value, ctx)
                                            or creates_on_cuda(value, ctx))


#: Methods whose result is on the device of the tensor they are called on.
_SAME_DEVICE_METHODS = {"float", "double", "half", "long", "int", "bool", "view", "reshape",
                        "contiguous", "clone", "detach", "squeeze", "unsqueeze", "flatten",
                        "permute", "transpose", "t", "type_as"}


class CudaReturns:
    """What each function of the module returns, position by position: a
    tensor made on a CUDA device there or not (`return x_train, x_test`
    after `x_train = torch.tensor(..., device=device)`), so that a caller's
    `x_train, x_test = load_data(device)` is known to be on the GPU. A walker
    analysis (`ctx.shared(CudaReturns)`); functions defined before the use."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._returns: dict[str, list[tuple[bool, ...]]] = {}

    def visit_Return(self, node: cst.Return) -> None:
        function = self.ctx.function
        if function is None or node.value is None:
            return
        value = node.value
        parts = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
        self._returns.setdefault(function.name.value, []).append(
            tuple(held_on_cuda(part, self.ctx) for part in parts))

    def returns_on_cuda(self, call: cst.Call, index: int | None) -> bool:
        """Whether every `return` of the same-module function `call` runs puts a
        CUDA tensor at `index` of its tuple (None: the value returned)."""
        if not isinstance(call.func, cst.Name) or self.ctx.binding(call.func.value) is not None:
            return False
        returns = self._returns.get(call.func.value)
        if not returns:
            return False
        position = 0 if index is None else index
        return all(
            len(r) > position and r[position] and (index is not None or len(r) == 1)
            for r in returns)


def held_on_cuda(value: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool:
    """Whether the code shows `value` is a tensor on a CUDA device: made there,
    a part or a same-device method of one (`x[idx]`, `x.float()`), or a name
    bound to one, also through a same-module function that returns it
    (`x_train, x_test = load_data(device)`)."""
    if depth > 8:
        return False
    if isinstance(value, cst.Subscript):
        return held_on_cuda(value.value, ctx, depth + 1)
    if isinstance(value, cst.Call):
        if made_on_cuda(value, ctx):
            return True
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _SAME_DEVICE_METHODS:
            return held_on_cuda(func.value, ctx, depth + 1)
        returns = ctx.analyses.get(CudaReturns)
        return isinstance(returns, CudaReturns) and returns.returns_on_cuda(value, None)
    name = dotted_name(value)
    if name is None:
        return False
    site = ctx.binding_site(name)
    if site is None:
        return False
    if site.unpacked_from is not None:
        returns = ctx.analyses.get(CudaReturns)
        return isinstance(site.unpacked_from, cst.Call) and isinstance(returns, CudaReturns) \
            and returns.returns_on_cuda(site.unpacked_from, site.unpacked_index)
    return site.value is not value and held_on_cuda(site.value, ctx, depth + 1)


#: Methods whose result is on the host, or not a tensor at all.
_HOST_RESULTS = {"cpu", "numpy", "tolist", "item"}
#: Element-wise and shape methods: the result is where the tensor is.
_FOLLOWS_ITS_TENSOR = _SAME_DEVICE_METHODS | {"softmax", "log_softmax", "sigmoid", "exp", "log",
                                              "relu", "tanh", "abs", "round", "clamp", "mul",
                                              "add", "div", "sub", "squeeze_", "unsqueeze_"}


def device_of_value(value: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool | None:
    """Where the code shows a value lives: True on a CUDA device, False on the
    host or not a tensor (`.cpu()`, `.numpy()`, `.tolist()`, `.item()`), None
    when it cannot tell. Follows the data through names, unpacking, indexing,
    element-wise methods and torch functions; a forward's output is where its
    inputs are (`model(x)` after `x = x.to(device)`)."""
    if depth > 12:
        return None
    depth += 1
    if isinstance(value, cst.Subscript):
        return device_of_value(value.value, ctx, depth)
    if isinstance(value, cst.BinaryOperation):
        sides = [device_of_value(value.left, ctx, depth), device_of_value(value.right, ctx, depth)]
        return True if True in sides else None if None in sides else False
    if isinstance(value, (cst.Tuple, cst.List)):  # `(correct, pred[:, 4])`: its GPU parts
        parts = [device_of_value(e.value, ctx, depth) for e in value.elements]
        return True if True in parts else None
    if isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return device_of_value(value.elt, ctx, depth)  # `[d.to(device) for d in batch]`
    if isinstance(value, cst.Dict):  # `{"input_ids": batch[0], ...}`: its GPU parts
        parts = [device_of_value(e.value, ctx, depth) for e in value.elements]
        return True if True in parts else None
    if isinstance(value, cst.Call):
        return _call_device(value, ctx, depth)
    name = dotted_name(value)
    if name is None:
        return None
    site = ctx.binding_site(name)
    if site is None:
        if isinstance(value, cst.Attribute):  # `out.logits` of a model's output object
            return device_of_value(value.value, ctx, depth)
        return None
    if site.unpacked_from is not None:  # `logits, _ = model(x)`
        return device_of_value(site.unpacked_from, ctx, depth)
    return None if site.value is value else device_of_value(site.value, ctx, depth)


#: Builtins that gather their one argument's elements into a container.
_COLLECTS_ITS_ARGUMENT = {"tuple", "list"}


def _call_device(call: cst.Call, ctx: Context, depth: int) -> bool | None:
    if made_on_cuda(call, ctx):
        return True
    func = call.func
    if isinstance(func, cst.Name) and func.value in _COLLECTS_ITS_ARGUMENT and len(call.args) == 1 \
            and ctx.binding(func.value) is None:  # `tuple(t.to(device) for t in batch)`
        return device_of_value(call.args[0].value, ctx, depth)
    qualified = ctx.qualify(func) or ""
    if isinstance(func, cst.Attribute) and not qualified:
        method = func.attr.value
        if method in _HOST_RESULTS:
            return False
        if method == "to":
            target = call_arg(call, "device", position=0)
            qualified = (ctx.qualify(target.value) or "") if target is not None else ""
            if target is None or (qualified.startswith("torch.")
                                  and not qualified.startswith(DEVICE_FACTORY)):
                return device_of_value(func.value, ctx, depth)  # a dtype: it stays put
            return is_cuda_device(target.value, ctx)
        if method in _FOLLOWS_ITS_TENSOR:
            return device_of_value(func.value, ctx, depth)
    if qualified.startswith("torch."):
        if qualified.startswith(HOST_COPIES):
            return False  # made on the host (a device would have made it `made_on_cuda`)
        inputs = [device_of_value(a.value, ctx, depth) for a in call.args if a.keyword is None]
        for arg in call.args:  # `torch.cat([a, b])`: its parts
            if isinstance(arg.value, (cst.List, cst.Tuple)):
                inputs += [device_of_value(e.value, ctx, depth) for e in arg.value.elements]
        return True if True in inputs else None
    if _runs_a_module(func, ctx):
        inputs = [device_of_value(a.value, ctx, depth) for a in call.args]
        return True if True in inputs else None
    return None


def _runs_a_module(func: cst.BaseExpression, ctx: Context) -> bool:
    """`model(x)`, `self.net(x)`, `net.forward(x)`: a module's forward, by its
    binding or else its name."""
    if isinstance(func, cst.Attribute) and func.attr.value == "forward":
        func = func.value
    name = dotted_name(func)
    if name is None or ctx.qualify(func) is not None:
        return False
    bound = ctx.binding(name)
    kind = built_kind(bound, ctx) if bound is not None else None
    return (kind or called_kind(name)) == "module"


def made_by_a_forward(value: cst.BaseExpression, ctx: Context, depth: int = 0) -> bool:
    """Whether a value is (computed from) a module's output: `model(x)`,
    `torch.sigmoid(out)`, `out.detach()`, `logits, _ = net(x)`; not a part
    of the batch itself (`y.to(device)`), which the data set already held."""
    if depth > 12:
        return False
    depth += 1
    if isinstance(value, cst.Subscript):
        return made_by_a_forward(value.value, ctx, depth)
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(made_by_a_forward(e.value, ctx, depth) for e in value.elements)
    if isinstance(value, cst.BinaryOperation):
        return made_by_a_forward(value.left, ctx, depth) or \
            made_by_a_forward(value.right, ctx, depth)
    if isinstance(value, cst.Call):
        func = value.func
        if _runs_a_module(func, ctx):
            return True
        if (ctx.qualify(func) or "").startswith("torch."):
            return any(made_by_a_forward(a.value, ctx, depth) for a in value.args)
        if isinstance(func, cst.Attribute):
            return made_by_a_forward(func.value, ctx, depth)  # `out.detach()`, `out.to(dev)`
        return False
    name = dotted_name(value)
    site = ctx.binding_site(name) if name is not None else None
    if site is None:
        return isinstance(value, cst.Attribute) and made_by_a_forward(value.value, ctx, depth)
    if site.unpacked_from is not None:
        return made_by_a_forward(site.unpacked_from, ctx, depth)
    return site.value is not value and made_by_a_forward(site.value, ctx, depth)


def gives_no_host_tensors(dataset: cst.BaseExpression, ctx: Context) -> bool:
    """A data set whose items are not host tensors: indices (`range(n)`,
    `torch.arange(n)`) into data kept elsewhere, or a `TensorDataset` of
    tensors already on a GPU (`TensorFloat(X)` of a CUDA tensor type)."""
    if not isinstance(dataset, cst.Call):
        return False
    qualified = ctx.qualify(dataset.func) or dotted_name(dataset.func) or ""
    if qualified in INDEX_RANGES:
        return True
    return qualified in TENSOR_DATASETS and any(held_on_cuda(arg.value, ctx)
                                                for arg in dataset.args)


#: Libraries whose data sets give host tensors.
_HOST_DATASETS = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.",
                  "datasets.load_dataset")


def gives_host_tensors(dataset: cst.BaseExpression | None, ctx: Context) -> bool:
    """A data set known to give host tensors: a `TensorDataset`, a torchvision,
    torchaudio or torchtext data set, a Hugging Face `load_dataset`."""
    source = (ctx.qualify(dataset.func) or "") if isinstance(dataset, cst.Call) else ""
    return source in TENSOR_DATASETS or source.startswith(_HOST_DATASETS)


def names_cuda_literally(call: cst.Call) -> bool:
    """`x.cuda()`, `x.cuda(1)`, `x.to("cuda:0")`: the program runs on a GPU or
    not at all, where `x.to(device)` lets it run on a host without one."""
    if type(call.func) is cst.Attribute and call.func.attr.value == "cuda":
        return True
    target = call_arg(call, "device", position=0)
    return target is not None and (string_value(target.value) is not None
                                   or type(target.value) is cst.Integer)


def cpu_default_parameter(node: cst.BaseExpression, ctx: Context) -> cst.FunctionDef | None:
    """The function whose parameter `node` names, when that parameter defaults
    to a CPU device (`def train(model, device="cpu")`) and is not rebound
    here: the device is the CPU unless a caller passes another
    (`callers_pass_cuda`, once the file is read)."""
    if not isinstance(node, cst.Name) or ctx.binding(node.value) is not None:
        return None
    function = ctx.function
    param = _parameter(function, node.value) if function is not None else None
    if param is None or param.default is None or is_cuda_device(param.default, ctx) is not False:
        return None
    return function


def _parameter(function: cst.FunctionDef, name: str) -> cst.Param | None:
    params = function.params
    return next((p for p in (*params.posonly_params, *params.params, *params.kwonly_params)
                 if p.name.value == name), None)


def callers_pass_cuda(function: cst.FunctionDef, name: str, ctx: Context, depth: int = 0) -> bool:
    """Whether a call of `function` may give its CPU-defaulted parameter `name`
    a CUDA device: a caller in this file that passes one (or a value it
    cannot tell, or its own CPU-defaulted parameter that its callers may set
    so), a method (called through objects this file may not show), or a
    function handed on as a value. Callers in other files are the project's
    question."""
    index = ModuleIndex.of(ctx)
    info = index.info(function)
    if info is None or info.class_name is not None or depth > 4 or any(
            dotted_name(value) == info.name for value, _ in index.escaped):
        return True
    positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    position = positional.index(name) if name in positional else None
    for site in index.call_sites(info):
        arg = call_arg(site.node, name, position)
        if arg is None:
            continue  # the default: the CPU
        caller = site.caller.node if site.caller is not None else None
        if isinstance(caller, cst.FunctionDef) and isinstance(arg.value, cst.Name):
            passed = _parameter(caller, arg.value.value)  # `f(x, device)` in `g(x, device="cpu")`
            if passed is not None and passed.default is not None \
                    and is_cuda_device(passed.default, ctx) is False:
                if callers_pass_cuda(caller, passed.name.value, ctx, depth + 1):
                    return True
                continue
        if is_cuda_device(arg.value, ctx) is not False:
            return True
    return False
