"""How many parameters a module holds, where the code shows it: a library
architecture of known size (`torchvision.models.resnet50()`,
`timm.create_model("vit_base_patch16_224")`), a pretrained hub model
(`BertModel.from_pretrained(...)`), or a module built around one (a class of
this file whose `__init__` makes one, or a wrapper handed one:
`Model(encoder, config)`). MEM007 asks it: a second copy of a checkpoint on
the GPU costs what the weights weigh, worth changing for a large model and
shrugged at for one of a few MB; the size of a model the code builds layer
by layer from its settings is not known here."""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.devices import string_value
from memlint.analysis.models import set_in_init
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import ARCHITECTURE_PARAMETERS, HUB_MODEL_PARAMETERS

#: calls that return the module they are called on (or a copy of it)
_SAME_MODULE = {"to", "cuda", "eval", "train", "float", "half", "double", "cpu",
                "requires_grad_"}
#: what else a hub builds `from_pretrained` (transformers' class names)
_NOT_MODULES = ("Config", "Tokenizer", "TokenizerFast", "Processor", "FeatureExtractor")
#: libraries whose constructors build a known architecture by name
_ARCHITECTURE_LIBRARIES = ("torchvision.models", "timm", "torch.hub")


def parameter_count(value: cst.BaseExpression | None, ctx: Context, index: ModuleIndex,
                    depth: int = 0) -> float | None:
    """The parameters (in millions) of the module `value` builds, as far as
    the code shows; None when it shows none of them. A lower bound where a
    module holds a known one beside layers of its own."""
    if value is None or depth > 4:
        return None
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in _SAME_MODULE:
        value = value.func.value  # `resnet50().cuda().eval()`
    name = dotted_name(value)
    if name is not None:
        bound = ctx.binding(name) or set_in_init(name, ctx)
        return None if bound is None or bound is value else \
            parameter_count(bound, ctx, index, depth + 1)
    if not isinstance(value, cst.Call):
        return None
    known = _library_model(value, ctx)
    if known is not None:
        return known
    built = index.local_class(value.func)
    parts = [parameter_count(arg.value, ctx, index, depth + 1) for arg in value.args]
    if built is not None:
        init = built.methods.get("__init__")
        parts += [_made_in(init.node, ctx, index, depth)] if init is not None else []
    elif not _names_a_class(value.func):
        return None  # a function's result: what it builds is not shown here
    found = [part for part in parts if part is not None]
    return max(found) if found else None  # a lower bound: the largest part it holds


def _library_model(call: cst.Call, ctx: Context) -> float | None:
    """A library architecture or a hub model's parameters (millions)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained":
        if (dotted_name(func.value) or "").endswith(_NOT_MODULES):
            return None  # `RobertaConfig.from_pretrained`: settings, a vocabulary
        named = string_value(call.args[0].value) if call.args else None
        return _hub_model(named)
    qualified = ctx.qualify(func) or ""
    if not qualified.startswith(_ARCHITECTURE_LIBRARIES):
        return None
    architecture = qualified.rsplit(".", 1)[-1]
    if architecture in ("create_model", "load") and call.args:
        architecture = string_value(call.args[-1 if architecture == "load" else 0].value) or ""
    return _architecture(architecture)


def _architecture(name: str) -> float | None:
    """`resnet50`, also timm's `resnet50.a1_in1k` and `vit_base_patch16_224`."""
    name = name.split(".", 1)[0].lower()
    for known, millions in ARCHITECTURE_PARAMETERS.items():
        if name == known or name.startswith(known + "_"):
            return millions
    return None


def _hub_model(named: str | None) -> float | None:
    """A hub model's parameters by its name (`bert-base-uncased`,
    `roberta-large`, `opt-1.3b`), or, when a setting names it, those of the
    smallest model fine-tuned as it is: a base one (a `tiny`, `mini` or
    `small` model says so in its name, which the code does not show)."""
    if named is None:
        return HUB_MODEL_PARAMETERS["base"]
    words = re.split(r"[-_/]", named.lower())
    for word in words:
        counted = re.fullmatch(r"(\d+(?:\.\d+)?)([mb])", word)
        if counted:
            return float(counted.group(1)) * (1000 if counted.group(2) == "b" else 1)
    for size, millions in HUB_MODEL_PARAMETERS.items():
        if size in words or (size in _PREFIXES and any(w.startswith(size) for w in words)):
            return millions
    return None


#: size words also read at the start of a word (`distilbert`, `MiniLM`)
_PREFIXES = ("tiny", "mini", "distil")


def _made_in(init: cst.FunctionDef | cst.Lambda, ctx: Context, index: ModuleIndex,
             depth: int) -> float | None:
    """The known modules a class's `__init__` assigns to `self` (`self.bert =
    BertModel.from_pretrained(...)`)."""
    found: list[float] = []
    pending: list[cst.CSTNode] = [init.body]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.Assign) and any(
                (dotted_name(t.target) or "").startswith("self.") for t in node.targets) \
                and isinstance(node.value, cst.Call):
            count = parameter_count(node.value, ctx, index, depth + 1)
            if count is not None:
                found.append(count)
        elif not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            pending.extend(node.children)
    return max(found) if found else None


def _names_a_class(func: cst.BaseExpression) -> bool:
    """`Model(...)`, `models.Net(...)`: a class by the usual spelling."""
    name = dotted_name(func)
    last = name.rsplit(".", 1)[-1] if name else ""
    return last[:1].isupper() and not last.isupper()
