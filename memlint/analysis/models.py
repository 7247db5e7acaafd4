"""Is this value a PyTorch module, a loss, or something else? One answer for every rule.

Calling a module runs a forward that autograd records (MEM003, MEM004);
calling a loss object computes a scalar from tensors it was given; calling an
ONNX, OpenVINO or scikit-learn model records nothing at all. The answer
comes from how the value was built when the code shows it, else from the
name real code gives such values.
"""

from __future__ import annotations

import re
from typing import Literal

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import defines_method, dotted_name
from memlint.analysis.torch_api import MODULE_BASE

Kind = Literal["module", "loss", "other"]

LOSS_CLASS = re.compile(r"(Loss|Criterion)\w*$")
#: Loss objects under names real code gives them (`criterion`, `self.loss_fn`, `mse_loss`).
LOSS_NAME = re.compile(r"^(criterion\w*|\w*_criterion|loss_?fn\w*|loss_?func\w*|"
                       r"\w*_loss(_fn)?|loss|compute_loss|\w*loss_function)$", re.IGNORECASE)
#: Methods that return the object they are called on (`Net().to(device).eval()`).
CHAINED = {"to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16",
           "requires_grad_", "share_memory", "module"}
#: Builders of models that are not PyTorch modules: their forward records no graph.
_OTHER_MODEL_ROOTS = ("sklearn.", "xgboost.", "lightgbm.", "onnxruntime.", "openvino.",
                      "tensorflow.", "keras.", "jax.", "mxnet.", "joblib.", "pickle.",
                      "tensorrt.", "catboost.", "ncnn.")
_NOT_A_MODEL_CLASS = re.compile(r"(Tokenizer\w*|Processor|Config|FeatureExtractor|"
                                r"ImageProcessor|Scheduler|Pipeline)$")
_OTHER_MODEL_CALLS = re.compile(r"(^|\.)(read_model|compile_model|InferenceSession|"
                                r"load_model_from_onnx|read_network)$")
#: Classes named like a module (`Net`, `ActorCritic`, `ResNet50`, `nn.Conv2d`).
MODEL_CLASS = re.compile(r"(Net|Model|Module|Network|Encoder|Decoder|Generator|Discriminator|"
                         r"Transformer|Classifier|Policy|Critic|Actor|Backbone|MLP|CNN|RNN|"
                         r"LSTM|GRU|VAE|GAN|UNet|ResNet|Linear|Sequential|Conv\w*)\d*$")
#: Module instances under names real code gives them (`model`, `self.netG`, `policy_net`, `D`).
MODEL_NAME = re.compile(r"^((\w+_)?(model|net|network|encoder|decoder|generator|discriminator|"
                        r"critic|actor|policy|backbone|classifier|head|unet|vae|rnn|lstm|gru|"
                        r"cnn|mlp|transformer|student|teacher|module)(_\w+)?|\w*(net|model)\d*|"
                        r"net_?[gd]|[gd]|[gd]_?net|gen|disc)$", re.IGNORECASE)
#: Functions that build or load a module (`create_model(...)`, `timm.create_model`).
MODEL_FACTORY = re.compile(r"(create_model|get_model|build_model|load_model|from_pretrained|"
                           r"^torchvision\.models\.[\w.]+|^timm\.\w+)$")
#: A name that starts with a verb names a function, not a module instance:
#: `evaluate_model`, `pick_action_and_get_critic_values`, `build_net`.
_VERB_FIRST = re.compile(r"^_*(get|pick|select|choose|compute|calc|calculate|make|build|create|"
                         r"run|evaluate|predict|infer|fit|generate|load|save|init|initialize|"
                         r"update|apply|process|prepare|sample|copy|clone|act|plot|show|print|"
                         r"log|check|test)_", re.IGNORECASE)


#: how Python's convention names a class: `MobileNetV3_Small`, not `G_AB`
_CLASS_NAME = re.compile(r"[A-Z](?=\w*[a-z])\w*")


def named_like_a_class(name: str) -> bool:
    """`encoders.Linear`, `MobileNetV3_Small`: its last part is CapWords (not `G_AB`)."""
    return _CLASS_NAME.fullmatch(name.rsplit(".", 1)[-1]) is not None


def class_built(built: cst.BaseExpression | None) -> str | None:
    """`DiffVC` for `DiffVC(params)`: the class a model was built from."""
    name = dotted_name(built.func) if isinstance(built, cst.Call) else None
    return name.rsplit(".", 1)[-1] if name is not None and named_like_a_class(name) else None


def set_in_init(name: str, ctx: Context) -> cst.BaseExpression | None:
    """`self.model` in a method: what the class's `__init__` assigns it, when
    it assigns it once."""
    init = _init_of(ctx)
    if not name.startswith("self.") or init is None:
        return None
    values = [statement.value for line in init.body.body
              if isinstance(line, cst.SimpleStatementLine)
              for statement in line.body if isinstance(statement, cst.Assign)
              and [dotted_name(t.target) for t in statement.targets] == [name]]
    return values[0] if len(values) == 1 else None


def annotated_class(name: str, ctx: Context) -> str | None:
    """The class a parameter's annotation names for a model (`def __init__(self,
    model: Transformer)`, then `self.model = model`; or `def run(model: Net)`):
    the class whose `forward` the model runs."""
    function = ctx.function
    if name.startswith("self."):
        value, function = set_in_init(name, ctx), _init_of(ctx)
        name = value.value if isinstance(value, cst.Name) else ""
    if function is None or not name:
        return None
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == name and param.annotation is not None:
            annotation = param.annotation.annotation
            written = dotted_name(annotation) or ""
            if (ctx.qualify(annotation) or "").startswith(_LIBRARY_BASES):
                return None  # `model: nn.Module`: any model, its class still unknown
            last = written.rsplit(".", 1)[-1]
            return last if named_like_a_class(written) else None
    return None


#: annotations that name a library's base class, not the model's own
_LIBRARY_BASES = ("torch.", "typing.", "transformers.", "lightning.", "pytorch_lightning.")


def _init_of(ctx: Context) -> cst.FunctionDef | None:
    class_def = ctx.class_def
    if class_def is None:
        return None
    return next((method for method in class_def.body.body if isinstance(method, cst.FunctionDef)
                 and method.name.value == "__init__"), None)


def unchained(value: cst.BaseExpression) -> cst.BaseExpression:
    """`Net()` for `Net().to(device).eval()`: what the chain of methods that
    return their module was called on."""
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in CHAINED):
        value = value.func.value
    return value


def constructed_kind(value: cst.BaseExpression, ctx: Context) -> Kind | None:
    """What `x = <value>` holds, when `value` builds or loads it: a module
    (`nn.Linear(...)`, `Net().to(device)`, `resnet18()`, `from_pretrained`),
    a loss (`nn.CrossEntropyLoss()`, `FocalLoss()`), or another kind of model
    (`core.compile_model(...)`, `RandomForestClassifier()`); None when the
    code does not say."""
    value = unchained(value)
    if not isinstance(value, cst.Call):
        return None
    qualified = ctx.qualify(value.func) or ""
    func = value.func
    last = func.attr.value if isinstance(func, cst.Attribute) else dotted_name(func) or ""
    if qualified.startswith(_OTHER_MODEL_ROOTS) or _OTHER_MODEL_CALLS.search(last):
        return "other"
    if qualified.startswith("torch.nn.functional."):
        return None
    if last == "from_pretrained" and isinstance(func, cst.Attribute):
        owner = dotted_name(func.value) or ""
        # `AutoTokenizer.from_pretrained(...)`: the tokenizer, config or processor of a model
        return "other" if _NOT_A_MODEL_CLASS.search(owner) else "module"
    if LOSS_CLASS.search(last):
        return "loss"
    if qualified.startswith("torch.nn."):
        return "module"
    return None


def is_loss_name(name: str) -> bool:
    """`criterion`, `self.loss_fn`, `bce_loss`: a loss object by its name."""
    return LOSS_NAME.match(name.rsplit(".", 1)[-1]) is not None


def built_kind(value: cst.BaseExpression, ctx: Context) -> Kind | None:
    """`constructed_kind`, and where the code does not say, what the class or
    factory's name says: `ActorCritic(...)`, `MyNet().to(device)`,
    `create_model(...)` build modules."""
    kind = constructed_kind(value, ctx)
    if kind is not None:
        return kind
    value = unchained(value)
    if not isinstance(value, cst.Call):
        return None
    qualified = ctx.qualify(value.func) or ""
    name = dotted_name(value.func) or ""
    if qualified.startswith("torch.nn.functional."):
        return None
    if MODEL_CLASS.search(name.rsplit(".", 1)[-1]) or MODEL_FACTORY.search(qualified or name):
        return "module"
    return None


def called_kind(name: str) -> Kind | None:
    """What a call of `name` runs when nothing but its name is known: a loss
    (`criterion`, `self.loss_fn`), a module (`model`, `self.netG`, `policy_net`),
    or None: a class (calling it builds an object), a function named by what
    it does (`evaluate_model`, `get_critic_values`), anything else."""
    last = name.rsplit(".", 1)[-1]
    if last[:1].isupper() and not re.fullmatch(r"[GD]|Net[GD]", last):
        return None
    if LOSS_NAME.match(last):
        return "loss"
    if MODEL_NAME.match(last) and not _VERB_FIRST.match(last):
        return "module"
    return None


_MODULE_BASES = {MODULE_BASE, "nn.Module", "Module"}


def is_forward_code(node: cst.FunctionDef, ctx: Context) -> bool:
    """A module's forward (`forward`, `__call__`) or any method of a module
    class, which builds its graph on purpose; asked as the walk enters `node`."""
    name = node.name.value
    if name.startswith(("forward", "_forward")) or name == "__call__":
        return True
    scopes = ctx.scopes  # the walker has entered the function already
    class_def = scopes[-2].node if len(scopes) > 1 else None
    if not isinstance(class_def, cst.ClassDef):
        return False
    return any(ctx.qualify(base.value) in _MODULE_BASES
               or dotted_name(base.value) in _MODULE_BASES for base in class_def.bases) \
        or defines_method(class_def, "forward")  # a module whatever its base (RecBole's KGCN)
