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
from memlint.analysis.names import dotted_name

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
_OTHER_MODEL_CALLS = re.compile(r"(^|\.)(read_model|compile_model|InferenceSession|"
                                r"load_model_from_onnx|read_network)$")


def constructed_kind(value: cst.BaseExpression, ctx: Context) -> Kind | None:
    """What `x = <value>` holds, when `value` builds or loads it: a module
    (`nn.Linear(...)`, `Net().to(device)`, `resnet18()`, `from_pretrained`),
    a loss (`nn.CrossEntropyLoss()`, `FocalLoss()`), or another kind of model
    (`core.compile_model(...)`, `RandomForestClassifier()`); None when the
    code does not say."""
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in CHAINED):
        value = value.func.value
    if not isinstance(value, cst.Call):
        return None
    qualified = ctx.qualify(value.func) or ""
    func = value.func
    last = func.attr.value if isinstance(func, cst.Attribute) else dotted_name(func) or ""
    if qualified.startswith(_OTHER_MODEL_ROOTS) or _OTHER_MODEL_CALLS.search(last):
        return "other"
    if qualified.startswith("torch.nn.functional."):
        return None
    if LOSS_CLASS.search(last):
        return "loss"
    if qualified.startswith("torch.nn."):
        return "module"
    return None


def is_loss_name(name: str) -> bool:
    """`criterion`, `self.loss_fn`, `bce_loss`: a loss object by its name."""
    return LOSS_NAME.match(name.rsplit(".", 1)[-1]) is not None
