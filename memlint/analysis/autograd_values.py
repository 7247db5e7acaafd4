"""Does this expression carry autograd history? A small flow analysis over the
bindings the traversal has seen so far in the current function.

A value has history when it comes out of a module call (`model(x)`,
`self.net(x)`), a loss (`nn.*Loss` instances, `torch.nn.functional` losses,
callees named like one), or tensor arithmetic on such a value, followed through
plain assignments (`out = model(x); loss = crit(out, y); total = loss * 2`).
It has none after `.item()`, `float()`, `.detach()`, `.data`, `.numpy()`, an
`argmax`, a comparison, an integer cast, the indices of `torch.max`, or when it
was bound under `torch.no_grad()`.

Answers are three-valued (`Value.history`): True, False (known to be free of
history), None (cannot tell, e.g. a function parameter). Rules flag only True.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from memlint.analysis.context import BindingSite, Context
from memlint.analysis.names import dotted_name
from memlint.analysis.walker import children as children_of


@dataclass(frozen=True)
class Value:
    """What an expression holds. `scalar`: a loss-like 0-d value, whose cheap
    fix is `.item()` rather than `.detach()`."""

    history: bool | None
    scalar: bool = False


HISTORY_TENSOR = Value(True)
HISTORY_SCALAR = Value(True, scalar=True)
CLEAN = Value(False)
UNKNOWN = Value(None)

#: Methods whose result never requires grad (or is not a tensor at all).
_CLEAN_METHODS = {
    "item", "tolist", "numpy", "detach", "detach_", "argmax", "argmin", "argsort",
    "eq", "ne", "lt", "gt", "le", "ge", "equal", "isclose", "allclose", "isnan",
    "isinf", "isfinite", "long", "int", "bool", "byte", "short", "char", "nonzero",
    "count_nonzero", "size", "numel", "nelement", "dim", "ndimension", "stride",
    "get_device", "data_ptr", "element_size", "is_contiguous", "bincount", "unique",
    "sample", "parameters", "named_parameters", "buffers", "state_dict", "modules",
    "children", "zero_grad", "step", "train", "eval", "keys", "values", "items",
    "generate", "predict", "predict_proba", "backward", "register_hook",
}
#: Methods that reduce a tensor to a scalar when called without a dimension.
_REDUCTIONS = {"sum", "mean", "norm", "prod", "max", "min", "std", "var", "median", "logsumexp"}
_CLEAN_BUILTINS = {"float", "int", "bool", "len", "str", "repr", "format", "range",
                   "isinstance", "type", "id", "hash", "print", "enumerate", "zip", "round"}
_PASSING_BUILTINS = {"sum", "max", "min", "abs", "list", "tuple", "sorted", "reversed"}
#: torch functions whose results never require grad.
_CLEAN_TORCH = {
    "argmax", "argmin", "argsort", "eq", "ne", "lt", "gt", "le", "ge", "equal", "isclose",
    "allclose", "isnan", "isinf", "isfinite", "nonzero", "count_nonzero", "bincount",
    "unique", "numel", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty",
    "full", "arange", "linspace", "logspace", "eye", "rand", "randn", "randint",
    "randperm", "multinomial", "bernoulli", "zeros_like", "ones_like", "empty_like",
    "full_like", "rand_like", "randn_like", "randint_like", "no_grad", "inference_mode",
    "save", "load", "manual_seed", "device", "is_tensor", "sign", "floor_divide",
}
#: Functions returning (values, indices): position 1 (or `.indices`) has no history.
_VALUES_INDICES = {"max", "min", "topk", "sort", "kthvalue", "median", "mode", "cummax",
                   "cummin"}
_FUNCTIONAL_LOSS = re.compile(r"torch\.nn\.functional\.(\w*loss|cross_entropy|"
                              r"binary_cross_entropy\w*|kl_div|nll_loss)$")
_LOSS_CLASS = re.compile(r"(Loss|Criterion)\w*$")
_MODEL_CLASS = re.compile(r"(Net|Model|Module|Network|Encoder|Decoder|Generator|Discriminator|"
                          r"Transformer|Classifier|Policy|Critic|Actor|Backbone|MLP|CNN|RNN|"
                          r"LSTM|GRU|VAE|GAN|UNet|ResNet|Linear|Sequential|Conv\w*)\d*$")
_LOSS_NAME = re.compile(r"^(criterion\w*|\w*_criterion|loss_?fn\w*|loss_?func\w*|"
                        r"\w*_loss(_fn)?|loss|compute_loss|\w*loss_function)$", re.IGNORECASE)
_MODEL_NAME = re.compile(r"^((\w+_)?(model|net|network|encoder|decoder|generator|discriminator|"
                         r"critic|actor|policy|backbone|classifier|head|unet|vae|rnn|lstm|gru|"
                         r"cnn|mlp|transformer|student|teacher|module)(_\w+)?|\w*(net|model)\d*|"
                         r"net_?[gd]|[gd]|[gd]_?net|gen|disc)$", re.IGNORECASE)
_MODEL_FACTORY = re.compile(r"(create_model|get_model|build_model|load_model|from_pretrained|"
                            r"^torchvision\.models\.\w+|^timm\.\w+)$")
_MAX_DEPTH = 12


class AutogradValues:
    """Answers `value_of(expr)` at the walker's current point.

    Results of same-module functions are learnt as the walk passes their
    `return` statements (`note_return`), so `loss = train_step(batch)` where
    `train_step` returns `loss.item()` is known to be a float.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._returns: dict[str, list[Value]] = {}
        self._return_elements: dict[str, list[list[Value]]] = {}
        #: While tracing `x = f(x)`, the binding site the inner `x` refers to.
        self._earlier: dict[str, BindingSite | None] = {}

    # -- learning about functions -----------------------------------------
    def note_return(self, function: str, value: cst.BaseExpression | None) -> None:
        """Record what `function` returns here (None: a bare `return`)."""
        if value is None or self.ctx.grad_disabled:
            self._returns.setdefault(function, []).append(CLEAN)
            return
        self._returns.setdefault(function, []).append(self.value_of(value))
        if isinstance(value, cst.Tuple):
            self._return_elements.setdefault(function, []).append(
                [self.value_of(e.value) for e in value.elements])

    def note_function_end(self, function: str) -> None:
        """A function that never returned a value returns None."""
        self._returns.setdefault(function, [CLEAN])

    # -- queries ------------------------------------------------------------
    def value_of(self, node: cst.BaseExpression) -> Value:
        return self._trace(node, set(), 0)

    def carries_history(self, node: cst.BaseExpression) -> bool | None:
        return self.value_of(node).history

    def depends_on(self, node: cst.BaseExpression, name: str) -> bool:
        """Whether `node` reads `name`, directly or through the bindings of the
        names it reads (`out = layer(h); h = h + out` depends on `h`)."""
        pending, seen = [node], set()
        while pending and len(seen) < 64:
            expr = pending.pop()
            for read in names_in(expr):
                if read == name:
                    return True
                if read in seen:
                    continue
                seen.add(read)
                binding = self.ctx.binding(read)
                if binding is not None:
                    pending.append(binding)
        return False

    # -- the tracer -----------------------------------------------------------
    def _trace(self, node: cst.BaseExpression, seen: set[int], depth: int) -> Value:
        if depth > _MAX_DEPTH or id(node) in seen:
            return UNKNOWN
        seen = seen | {id(node)}
        depth += 1
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                             cst.FormattedString, cst.ConcatenatedString, cst.Comparison,
                             cst.Lambda)):
            return CLEAN
        if isinstance(node, cst.Name):
            return self._trace_name(node.value, seen, depth)
        if isinstance(node, cst.Attribute):
            return self._trace_attribute(node, seen, depth)
        if isinstance(node, cst.Subscript):
            return self._trace_subscript(node, seen, depth)
        if isinstance(node, cst.Call):
            return self._trace_call(node, seen, depth)
        if isinstance(node, cst.BinaryOperation):
            return _combine([self._trace(node.left, seen, depth),
                             self._trace(node.right, seen, depth)], scalar_if_all=True)
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                return CLEAN
            return self._trace(node.expression, seen, depth)
        if isinstance(node, cst.BooleanOperation):
            return _combine([self._trace(node.left, seen, depth),
                             self._trace(node.right, seen, depth)], scalar_if_all=True)
        if isinstance(node, cst.IfExp):
            return _combine([self._trace(node.body, seen, depth),
                             self._trace(node.orelse, seen, depth)], scalar_if_all=True)
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            return _combine([self._trace(e.value, seen, depth) for e in node.elements])
        if isinstance(node, cst.Dict):
            return _combine([self._trace(e.value, seen, depth) for e in node.elements
                             if isinstance(e, cst.DictElement)])
        if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
            return self._trace_comprehension(node, seen, depth)
        if isinstance(node, cst.NamedExpr):
            return self._trace(node.value, seen, depth)
        return UNKNOWN

    def _trace_name(self, name: str, seen: set[int], depth: int) -> Value:
        if name in ("True", "False", "None"):
            return CLEAN
        if name in self._earlier:
            site = self._earlier[name]  # inside `loss = loss / n`: the `loss` before it
        elif self.ctx.binding(name) is None:
            return UNKNOWN
        else:
            site = self.ctx.binding_site(name)
        if site is None:
            return UNKNOWN
        if not site.grad_enabled:
            return CLEAN
        if site.unpacked_from is not None:
            return self._trace_unpacked(site.unpacked_from, site.unpacked_index or 0, seen, depth)
        had_earlier, earlier = name in self._earlier, self._earlier.get(name)
        self._earlier[name] = site.previous
        try:
            return self._trace(site.value, seen, depth)
        finally:
            if had_earlier:
                self._earlier[name] = earlier
            else:
                del self._earlier[name]

    def _trace_attribute(self, node: cst.Attribute, seen: set[int], depth: int) -> Value:
        attr = node.attr.value
        if attr in ("data", "grad", "shape", "dtype", "device", "ndim", "is_cuda",
                    "requires_grad", "indices"):
            return CLEAN
        name = dotted_name(node)
        if name is not None and (name in self._earlier or self.ctx.binding(name) is not None):
            return self._trace_name(name, seen, depth)
        if self.ctx.qualify(node) is not None:
            return UNKNOWN  # a module-level name of an imported package
        value = self._trace(node.value, seen, depth)
        if value.history and "loss" in attr.lower():
            return HISTORY_SCALAR  # `outputs.loss` of a model's output object
        return value

    def _trace_subscript(self, node: cst.Subscript, seen: set[int], depth: int) -> Value:
        index = _literal_index(node)
        if index is not None and index >= 1 and self._returns_values_indices(node.value):
            return CLEAN  # `torch.max(out, 1)[1]`: the indices
        value = self._trace(node.value, seen, depth)
        key = _literal_key(node)
        if value.history and key is not None and "loss" in key.lower():
            return HISTORY_SCALAR
        return Value(value.history) if value.history else value

    def _trace_comprehension(self, node, seen: set[int], depth: int) -> Value:
        value = self._trace(node.elt, seen, depth)
        if value.history is None and isinstance(node.elt, cst.Name):
            targets = names_in(node.for_in.target)
            if node.elt.value in targets:
                return self._trace(node.for_in.iter, seen, depth)
        return value

    def _trace_unpacked(self, source: cst.BaseExpression, index: int,
                        seen: set[int], depth: int) -> Value:
        if not isinstance(source, cst.Call):
            return UNKNOWN
        if self._returns_values_indices(source):
            return self._trace_call(source, seen, depth) if index == 0 else CLEAN
        callee = self._callee_kind(source.func)
        if callee == "module":
            return HISTORY_TENSOR
        if callee == "loss":
            return HISTORY_SCALAR if index == 0 else UNKNOWN
        elements = self._return_elements.get(_function_key(source.func))
        if elements and all(index < len(e) for e in elements):
            return _combine([e[index] for e in elements], scalar_if_all=True)
        return UNKNOWN

    def _trace_call(self, node: cst.Call, seen: set[int], depth: int) -> Value:
        func = node.func
        qualified = self.ctx.qualify(func)
        args = [a.value for a in node.args if a.keyword is None or a.keyword.value != "dim"]
        if qualified is not None:
            return self._trace_qualified_call(qualified, node, args, seen, depth)
        if isinstance(func, cst.Name):
            if func.value in _CLEAN_BUILTINS:
                return CLEAN
            if func.value in _PASSING_BUILTINS and self.ctx.binding(func.value) is None:
                return _combine([self._trace(a, seen, depth) for a in args], scalar_if_all=True)
        callee = self._callee_kind(func)
        if callee == "module":
            return HISTORY_TENSOR
        if callee == "loss":
            return _loss_result([self._trace(a, seen, depth) for a in args])
        learnt = self._returns.get(_function_key(func))
        if learnt is not None:
            return _combine(learnt, scalar_if_all=True)
        if isinstance(func, cst.Attribute):
            return self._trace_method(func, node, seen, depth)
        return UNKNOWN

    def _trace_qualified_call(self, qualified: str, node: cst.Call,
                              args: list[cst.BaseExpression], seen: set[int], depth: int) -> Value:
        if not qualified.startswith("torch."):
            return CLEAN if qualified.split(".", 1)[0] in ("numpy", "math", "statistics") \
                else UNKNOWN
        short = qualified.rsplit(".", 1)[-1]
        if _FUNCTIONAL_LOSS.match(qualified):
            return _loss_result([self._trace(a, seen, depth) for a in args])
        if qualified.startswith("torch.nn.") and not qualified.startswith("torch.nn.functional."):
            return CLEAN  # building a module or loss object, not running it
        if short in _CLEAN_TORCH or qualified.startswith(("torch.optim.", "torch.utils.",
                                                          "torch.cuda.")):
            return CLEAN
        traced = [self._trace(a, seen, depth) for a in args]
        scalar = short in _REDUCTIONS and len(node.args) == 1
        combined = _combine(traced)
        return Value(combined.history, scalar=bool(combined.history) and scalar)

    def _trace_method(self, func: cst.Attribute, node: cst.Call,
                      seen: set[int], depth: int) -> Value:
        method = func.attr.value
        if method in _CLEAN_METHODS:
            return CLEAN
        if method in ("forward", "rsample", "log_prob", "entropy") or \
                method == "__call__":
            receiver = self._trace(func.value, seen, depth)
            if method == "forward" and self._callee_kind(func.value) == "module":
                return HISTORY_TENSOR
            return Value(receiver.history)
        receiver = self._trace(func.value, seen, depth)
        if not receiver.history:
            return receiver
        reduces = method in _REDUCTIONS and not node.args
        return Value(True, scalar=receiver.scalar or reduces)

    def _returns_values_indices(self, node: cst.BaseExpression) -> bool:
        """`torch.max(x, 1)`, `out.topk(5)`, `x.max(dim=1)`: a (values, indices) pair."""
        if not isinstance(node, cst.Call) or not node.args:
            return False
        qualified = self.ctx.qualify(node.func)
        if qualified is not None:
            return qualified.startswith("torch.") and \
                qualified.rsplit(".", 1)[-1] in _VALUES_INDICES and len(node.args) >= 2
        return isinstance(node.func, cst.Attribute) and node.func.attr.value in _VALUES_INDICES

    def _callee_kind(self, func: cst.BaseExpression, hops: int = 0) -> str | None:
        """"module", "loss" or None for what a call runs: judged from the callee's
        binding (`nn.CrossEntropyLoss()`, `Net().to(device)`) or else its name."""
        name = dotted_name(func)
        if name is None:
            return None
        if self.ctx.qualify(func) is not None:
            return None
        binding = self.ctx.binding(name)
        if binding is not None:
            kind = self._constructed_kind(binding)
            if kind is not None:
                return kind
            if isinstance(binding, cst.Attribute) and hops < 4:
                # `decoder = self.char_decode`: an alias is what it names
                return self._callee_kind(binding, hops + 1)
            if isinstance(binding, (cst.Lambda, cst.Name)) or _function_key(func) in self._returns:
                return None
        if _function_key(func) in self._returns:
            return None  # a function of this module: judged by what it returns
        last = name.rsplit(".", 1)[-1]
        if last[:1].isupper() and not re.fullmatch(r"[GD]|Net[GD]", last):
            return None  # a class: calling it builds an object
        if _LOSS_NAME.match(last):
            return "loss"
        if _MODEL_NAME.match(last):
            return "module"
        return None

    def _constructed_kind(self, binding: cst.BaseExpression) -> str | None:
        """What `x = <binding>` holds when it builds a module or a loss."""
        for _ in range(4):
            if not isinstance(binding, cst.Call):
                return None
            func = binding.func
            if isinstance(func, cst.Attribute) and func.attr.value in (
                    "to", "cuda", "train", "eval", "float", "half", "double", "bfloat16",
                    "requires_grad_", "module"):
                binding = func.value
                continue
            qualified = self.ctx.qualify(func) or ""
            name = dotted_name(func) or ""
            last = name.rsplit(".", 1)[-1]
            if qualified.startswith("torch.nn.functional."):
                return None
            if _LOSS_CLASS.search(last):
                return "loss"
            if qualified.startswith("torch.nn.") or _MODEL_CLASS.search(last) or \
                    _MODEL_FACTORY.search(qualified or name):
                return "module"
            return None
        return None


def names_in(node: cst.CSTNode) -> set[str]:
    """Every plain and dotted name an expression reads (`self.log_probs`, `self`)."""
    found: set[str] = set()
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, (cst.Name, cst.Attribute)):
            name = dotted_name(current)
            if name is not None:
                found.add(name)
        if isinstance(current, cst.Attribute):
            pending.append(current.value)  # `.loss` of `out.loss` is not the name `loss`
        else:
            pending.extend(children_of(current))
    return found


def _combine(values: list[Value], scalar_if_all: bool = False) -> Value:
    """History if any part has it; clean if every part is clean."""
    with_history = [v for v in values if v.history]
    if with_history:
        scalar = scalar_if_all and all(v.scalar or not v.history for v in values)
        return Value(True, scalar=scalar)
    if values and all(v.history is False for v in values):
        return CLEAN
    return UNKNOWN


def _loss_result(arguments: list[Value]) -> Value:
    """A loss has history unless every input is known to be free of it
    (a loss on detached inputs, a metric computed under no_grad)."""
    if arguments and all(v.history is False for v in arguments):
        return CLEAN
    return HISTORY_SCALAR


def _function_key(func: cst.BaseExpression) -> str:
    """`train_step` for `train_step(...)` and `self.train_step(...)`."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and \
            func.value.value in ("self", "cls"):
        return func.attr.value
    return dotted_name(func) or ""


def _literal_index(node: cst.Subscript) -> int | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    return int(value.value) if isinstance(value, cst.Integer) else None


def _literal_key(node: cst.Subscript) -> str | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    value = node.slice[0].slice.value
    return value.raw_value if isinstance(value, cst.SimpleString) else None
