"""Does this expression carry autograd history? A small flow analysis over the
bindings the traversal has seen so far in the current function.

A value has history when it comes out of a module call (`model(x)`,
`self.net(x)`), a loss (`nn.*Loss` instances, `torch.nn.functional` losses,
callees named like one), or tensor arithmetic on such a value, followed through
plain assignments (`out = model(x); loss = crit(out, y); total = loss * 2`).
It has none after `.item()`, `float()`, `.detach()`, `.data`, `.numpy()`, an
`argmax`, a comparison, an integer cast, the indices of `torch.max`, or when it
was bound under `torch.no_grad()`. Whether a callee is a module or a loss is
asked of `memlint.analysis.models`, the one owner of that answer.

A call of a function of the module that the walk has not reached yet (defined
further down, as notebooks and scripts often do) is answered once the whole
module is walked: the value waits on it (`Value.waits`), and `settled()` gives
the answer from what the function returns.

Answers are three-valued (`Value.history`): True, False (known to be free of
history), None (cannot tell, e.g. a function parameter). Rules flag only True.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from memlint.analysis.context import BindingSite, Context
from memlint.analysis.devices import ModelPlacements
from memlint.analysis.models import built_kind, called_kind
from memlint.analysis.names import ImportTable, dotted_name
from memlint.analysis.walker import children as children_of
from memlint.analysis.torch_api import AUTOGRAD_ENTRY, FUNCTIONAL_LOSS, TENSOR_TYPES


@dataclass(frozen=True)
class Value:
    """What an expression holds. `scalar`: a loss-like 0-d value, whose cheap
    fix is `.item()` rather than `.detach()`. `waits`: calls of same-module
    functions not walked yet, as `(function, position in its returned tuple
    or None, what the callee's name alone says)`; the value has history if one
    of them returns some (see `AutogradValues.settled`). `host`: the history
    is in host memory, every model whose forward made it known to be on the CPU
    there (see `devices.ModelPlacements`)."""

    history: bool | None
    scalar: bool = False
    waits: frozenset[tuple[str, int | None, Value]] = frozenset()
    host: bool = False


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
    "generate", "predict", "predict_proba", "backward", "register_hook", "multinomial",
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
_MAX_DEPTH = 12
#: the key of a wait on a method of an object the module does not show (`.get_loss`)
_METHOD_KEY = "."


def _on_self(func: cst.Attribute) -> bool:
    return isinstance(func.value, cst.Name) and func.value.value in ("self", "cls")


class AutogradValues:
    """Answers `value_of(expr)` at the walker's current point.

    Results of same-module functions are learnt as the walk passes their
    `return` statements (`note_return`), so `loss = train_step(batch)` where
    `train_step` returns `loss.item()` is known to be a float, wherever
    `train_step` is defined: a call the walk meets first waits on it
    (`settled()` answers once the module is walked).
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.placements = ctx.shared(ModelPlacements)
        self._returns: dict[str, list[Value]] = {}
        self._return_elements: dict[str, list[list[Value]]] = {}
        #: names brought by relative imports (`from .ch05 import evaluate_model`),
        #: which the import table does not resolve: local name -> (module as
        #: written, name there)
        self.imported: dict[str, tuple[str, str]] = {}
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

    def note_import(self, node: cst.ImportFrom) -> None:
        """Record the names of a relative import (the import table skips them)."""
        if not node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = "." * len(node.relative) + (dotted_name(node.module) or "")
        for alias in node.names:
            name = dotted_name(alias.name)
            local = dotted_name(alias.asname.name) if alias.asname else name
            if name and local:
                self.imported[local] = (module, name)

    # -- once the module is walked -------------------------------------------
    def settled(self, value: Value, trust_imported_names: bool = True) -> Value:
        """`value` with the calls it waits on answered from what those functions
        return. A callee the module does not define is judged by its name (as
        at the call); with `trust_imported_names=False`, a relatively imported
        one is taken to return no history (its facts are in another file)."""
        return self._settle(value, trust_imported_names, frozenset())

    def imported_waits(self, value: Value) -> list[tuple[str, str]]:
        """The relatively imported callees (module as written, name) that a
        value waits on, directly or through same-module functions; a method
        of an object the module does not show comes as ("", its name)."""
        found: list[tuple[str, str]] = []
        pending, seen = [value], set()
        while pending:
            current = pending.pop()
            for key, _, guess in current.waits:
                if key in seen:
                    continue
                seen.add(key)
                if key in self._returns:
                    pending.extend(self._returns[key])
                    pending.extend(v for e in self._return_elements.get(key, ()) for v in e)
                elif key in self.imported:
                    found.append(self.imported[key])
                elif key.startswith(_METHOD_KEY):
                    found.append(("", key[len(_METHOD_KEY):]))  # a method, of any class
                pending.append(guess)
        return found

    def function_results(self) -> dict[str, bool | None]:
        """What each function of the module returns: True (history), False
        (none), None (cannot tell)."""
        return {name: self._settle(_combine(values, scalar_if_all=True), True,
                                   frozenset()).history
                for name, values in self._returns.items()}

    def _settle(self, value: Value, trust: bool, seen: frozenset[str]) -> Value:
        if value.history or not value.waits:
            return replace(value, waits=frozenset()) if value.waits else value
        parts = [Value(value.history)]
        for key, index, guess in value.waits:
            parts.append(self._result(key, index, guess, trust, seen))
        answer = _combine(parts, scalar_if_all=True)
        # `outputs.loss`, `.mean()` of what the call returns: a scalar whatever it is
        return replace(answer, scalar=True) if value.scalar and answer.history else answer

    def _result(self, key: str, index: int | None, guess: Value, trust: bool,
                seen: frozenset[str]) -> Value:
        if key in seen:
            return UNKNOWN
        seen = seen | {key}
        if key in self._returns:
            if index is None:
                returned = self._returns[key]
            else:
                elements = self._return_elements.get(key)
                if not elements or not all(index < len(e) for e in elements):
                    return UNKNOWN
                returned = [e[index] for e in elements]
            return _combine([self._settle(v, trust, seen) for v in returned], scalar_if_all=True)
        if not trust and (key in self.imported or key.startswith(_METHOD_KEY)):
            return CLEAN
        return self._settle(guess, trust, seen)

    # -- queries ------------------------------------------------------------
    def value_of(self, node: cst.BaseExpression) -> Value:
        return self._trace(node, set(), 0)

    def carries_history(self, node: cst.BaseExpression) -> bool | None:
        return self.value_of(node).history

    def kept_backpropagated(self, stored: cst.BaseExpression, totals: set[str]) -> bool:
        """Whether `stored` holds a graph that was back-propagated (`totals`,
        from `backpropagated`): the loss itself, the same item of a dict
        (`output[self.metric]`), the dict one of whose items was
        (`outputs.append(output)` after `output['loss'].backward()`), or a term
        unpacked with the loss from one call on values with history (`loss,
        mse = loss_fn(pred, y)`, then `loss.backward()`, whatever `loss_fn` is)."""
        name = dotted_name(stored)
        if name is None:
            item = _item_of(stored)
            return item is not None and item in totals
        if name in totals or name + "[]" in totals:
            return True
        site = self.ctx.binding_site(name)
        source = site.unpacked_from if site is not None else None
        if type(source) is not cst.Call or self.settled(self.value_of(stored)).history is False:
            return False  # (`n_correct` a loss helper of this module returns as `.item()`)
        for total in totals:
            other = self.ctx.binding_site(total)
            if other is not None and other.unpacked_from is source:
                return any(self.settled(self.value_of(a.value)).history for a in source.args)
        return False

    def callee_kind(self, func: cst.BaseExpression) -> str | None:
        """"module", "loss", "other" or None: what calling `func` runs."""
        return self._callee_kind(func)

    def forward_element(self, stored: cst.BaseExpression) -> tuple[int, int] | None:
        """`acc` of `loss, acc = model(x)`: its position and the tuple's length."""
        site = self.ctx.binding_site(stored.value) if type(stored) is cst.Name else None
        if site is None or site.unpacked_length is None or type(site.unpacked_from) is not cst.Call:
            return None
        if self.callee_kind(site.unpacked_from.func) != "module":
            return None
        return site.unpacked_index or 0, site.unpacked_length

    def depends_on(self, node: cst.BaseExpression, name: str) -> bool:
        """Whether `node` reads `name`, directly or through the bindings of the
        names it reads (`out = layer(h); h = h + out` depends on `h`)."""
        pending = [node]
        seen: set[str] = set()
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
        if type(node) is cst.Name:
            return self._trace_name(node.value, seen, depth)
        if type(node) is cst.Call:
            return self._trace_call(node, seen, depth)
        if type(node) is cst.Attribute:
            return self._trace_attribute(node, seen, depth)
        if type(node) is cst.Subscript:
            return self._trace_subscript(node, seen, depth)
        if type(node) in _CLEAN_TYPES:
            return CLEAN
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
            if _number_in_one_arm(node):
                return CLEAN
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
        if (value.history or value.waits) and "loss" in attr.lower():
            # `outputs.loss` of a model's output object
            return replace(value, scalar=True)
        return value

    def _trace_subscript(self, node: cst.Subscript, seen: set[int], depth: int) -> Value:
        index = _literal_index(node)
        if index is not None and index >= 1 and self._returns_values_indices(node.value):
            return CLEAN  # `torch.max(out, 1)[1]`: the indices
        value = self._trace(node.value, seen, depth)
        key = _literal_key(node)
        if key is not None and "loss" in key.lower() and (value.history or value.waits):
            return replace(value, scalar=True)
        return Value(True, host=value.host) if value.history else value

    def _trace_comprehension(self, node: cst.ListComp | cst.GeneratorExp | cst.SetComp,
                             seen: set[int], depth: int) -> Value:
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
        # `loss, mse, ce = loss_fn(pred, y)`: the total first, then its terms,
        # each computed from the same prediction (history when it has some)
        parts = self._loss_parts(source, seen, depth) if callee == "loss" and index else UNKNOWN
        guesses = {"module": self._forward_result(source.func), "other": CLEAN,
                   "loss": HISTORY_SCALAR if index == 0 else parts}
        guess = guesses.get(callee, UNKNOWN) if callee is not None else UNKNOWN
        later = self._not_walked_yet(source.func)
        if later is not None:
            return Value(None, waits=frozenset({(later, index, guess)}))
        if callee is not None:
            return guess
        elements = self._return_elements.get(_function_key(source.func))
        if elements and all(index < len(e) for e in elements):
            return _combine([e[index] for e in elements], scalar_if_all=True)
        return UNKNOWN

    def _loss_parts(self, call: cst.Call, seen: set[int], depth: int) -> Value:
        arguments = [self._trace(a.value, seen, depth) for a in call.args]
        return _loss_result(arguments) if any(v.history for v in arguments) else UNKNOWN

    def _trace_call(self, node: cst.Call, seen: set[int], depth: int) -> Value:
        value = self._trace_call_by_kind(node, seen, depth)
        func = node.func
        if value.history and type(func) is cst.Attribute and func.attr.value.startswith("get_") \
                and not _on_self(func) and self.ctx.qualify(func) is None:
            # `self.loss.get_loss()`: no tensor method is called get_*: a method of an
            # object of the program's, whose definition says what it returns
            return Value(None, waits=frozenset({(_METHOD_KEY + func.attr.value, None, value)}))
        return value

    def _trace_call_by_kind(self, node: cst.Call, seen: set[int], depth: int) -> Value:
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
        later = self._not_walked_yet(func)
        if callee is None and later is None:
            learnt = self._returns.get(_function_key(func))
            if learnt is not None:
                return _combine(learnt, scalar_if_all=True)
        if callee == "module":
            guess = self._forward_result(func)
        elif callee == "loss":
            guess = _loss_result([self._trace(a, seen, depth) for a in args])
        elif callee == "other":
            guess = CLEAN
        elif isinstance(func, cst.Attribute):
            guess = self._trace_method(func, node, seen, depth)
        else:
            guess = UNKNOWN
        if later is not None:
            return Value(None, waits=frozenset({(later, None, guess)}))
        return guess

    def _trace_qualified_call(self, qualified: str, node: cst.Call,
                              args: list[cst.BaseExpression], seen: set[int], depth: int) -> Value:
        if not qualified.startswith("torch."):
            return CLEAN if qualified.split(".", 1)[0] in ("numpy", "math", "statistics") \
                else UNKNOWN
        short = qualified.rsplit(".", 1)[-1]
        if FUNCTIONAL_LOSS.match(qualified):
            return _loss_result([self._trace(a, seen, depth) for a in args])
        if qualified.startswith("torch.nn.") and not qualified.startswith("torch.nn.functional."):
            return CLEAN  # building a module or loss object, not running it
        if short in _CLEAN_TORCH or qualified.startswith(("torch.optim.", "torch.utils.",
                                                          "torch.cuda.")):
            return CLEAN
        if short in TENSOR_TYPES:
            return CLEAN  # `torch.BoolTensor(mask)`: a new tensor from data, no history
        traced = [self._trace(a, seen, depth) for a in args]
        scalar = short in _REDUCTIONS and len(node.args) == 1
        combined = _combine(traced)
        return replace(combined, scalar=bool(combined.history) and scalar)

    def _trace_method(self, func: cst.Attribute, node: cst.Call,
                      seen: set[int], depth: int) -> Value:
        method = func.attr.value
        if method in _CLEAN_METHODS:
            return CLEAN
        if method in ("forward", "rsample", "log_prob", "entropy") or \
                method == "__call__":
            receiver = self._trace(func.value, seen, depth)
            if method == "forward" and self._callee_kind(func.value) == "module":
                return self._forward_result(func.value)
            return replace(receiver, scalar=False)
        receiver = self._trace(func.value, seen, depth)
        reduces = method in _REDUCTIONS and not node.args
        if not receiver.history:
            return replace(receiver, scalar=True) if receiver.waits and reduces else receiver
        return Value(True, scalar=receiver.scalar or reduces, host=receiver.host)

    def _forward_result(self, model: cst.BaseExpression) -> Value:
        """What a module's forward returns: history, in host memory where the
        model is known to be on the CPU at this point."""
        return Value(True, host=True) if self.placements.on_host(model) else HISTORY_TENSOR

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
        """"module", "loss", "other" or None for what a call runs: judged by
        `memlint.analysis.models` from the callee's binding (`nn.CrossEntropyLoss()`,
        `Net().to(device)`) or else its name."""
        name = dotted_name(func)
        if name is None:
            return None
        if self.ctx.qualify(func) is not None:
            return None
        binding = self.ctx.binding(name)
        if binding is not None:
            kind = built_kind(binding, self.ctx)
            if kind is not None:
                return kind
            if isinstance(binding, cst.Attribute) and hops < 4:
                # `decoder = self.char_decode`: an alias is what it names
                return self._callee_kind(binding, hops + 1)
            if isinstance(binding, (cst.Lambda, cst.Name)) or _function_key(func) in self._returns:
                return None
        if _function_key(func) in self._returns:
            return None  # a function of this module: judged by what it returns
        return called_kind(name)

    def _not_walked_yet(self, func: cst.BaseExpression) -> str | None:
        """The function key of `f(...)` / `self.f(...)` when nothing binds it
        here and no function of that name was walked yet: it may be defined
        further down (or come from a relative import)."""
        if isinstance(func, cst.Attribute):
            if not (isinstance(func.value, cst.Name) and func.value.value in ("self", "cls")):
                return None
        elif not isinstance(func, cst.Name):
            return None
        key, name = _function_key(func), dotted_name(func)
        if key in self._returns or (name is not None and self.ctx.binding(name) is not None) \
                or self.ctx.qualify(func) is not None:
            return None
        return key


def number_made_of(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` of `x.item()`, `float(x)` or `int(x)`: what the call makes a number of."""
    if type(value) is not cst.Call:
        return None
    func = value.func
    if type(func) is cst.Attribute and func.attr.value == "item" and not value.args:
        return func.value
    if type(func) is cst.Name and func.value in ("float", "int") and len(value.args) == 1:
        return value.args[0].value
    return None


def _number_in_one_arm(node: cst.IfExp) -> bool:
    """`x.item() if c else x` (or `float(x)`): the code turns `x` into a number
    on the branch where it is a tensor, so on the other it already is one
    (PyCIL's `flat_loss` is the float 0.0 in the first task, a tensor after)."""
    for converted, kept in ((node.body, node.orelse), (node.orelse, node.body)):
        value = number_made_of(converted)
        if value is not None and kept.deep_equals(value):
            return True
    return False


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


class BackwardFlows:
    """Which kept graphs a later `backward()` consumes: how values flow inside
    each function of a module (and its own top-level code), and between them.

    `losses.append(loss)` keeps each loss's graph; that is the algorithm, not a
    leak, when a backward later reaches the list: `torch.stack(losses).sum()
    .backward()` in the same function, a helper given the list (ACER's
    `compute_loss(policies, values)`), a helper whose result is built from it
    (`total = self.total_loss()` reading `self.log_probs`, then
    `self.apply(total)` calling `total.backward()`), or, for a container on
    `self` or a module-level object that is emptied somewhere (`del
    policy.rewards[:]`, `.clear()`, `= []`), any function of the module
    (REINFORCE's `finish_episode()`, an agent's `update()`).

    Inside a function the order counts: the backward must come after the store
    and every step between them (`loss = -torch.stack(log_probs).sum()`), so
    `loss` reused for logging after its backward does not consume what it
    reads then. What goes through `.detach()`, `.item()`, `.data`, `float()` is
    not followed: a backward on it never needed the graph.

    Built on demand, in one walk of the module, only for files with a store to
    judge."""

    def __init__(self, module: cst.Module, names: ImportTable, wanted: set[int]) -> None:
        self._names = names
        self._wanted = wanted
        self._positions: dict[int, int] = {}
        self._flows: dict[int, _Flow] = {}
        self._by_name: dict[str, list[_Flow]] = {}
        self._loop_resets: dict[int, set[str]] = {}
        self._position = 0
        self._walk_scope(module, module.body, [], None)
        self._settle()

    # -- queries ----------------------------------------------------------
    def reset_every_iteration(self, loop: cst.CSTNode) -> set[str]:
        """Names emptied or rebound afresh (not from themselves) by a statement
        that runs on every iteration of `loop`, before or after the growth."""
        return self._loop_resets.get(id(loop), set())

    def consumed(self, scope: cst.CSTNode, container: str, statement: cst.CSTNode | None) -> bool:
        """Whether a backward reaches `container` after `statement` stored into it."""
        flow = self._flows.get(id(scope))
        if flow is None:
            return False
        stored_at = self._positions.get(id(statement), -1)
        if any(start <= stored_at < end for start, end in flow.reach.get(container, ())):
            return True
        if not _outside_function(container, flow):
            return False
        owner = flow.class_name if container.startswith(("self.", "cls.")) else None
        shared = [f for f in self._flows.values() if _outside_function(container, f)
                  and (owner is None or f.class_name == owner)]
        return any(container in f.resets for f in shared) and \
            any(container in f.reach for f in shared)

    def result_backpropagated(self, function: cst.CSTNode) -> bool:
        """Whether a caller in this module back-propagates what `function`
        returns (`out = self.inference(x)`, then `crit(out, y).backward()`):
        its forward is part of a training step, whatever it is named."""
        flow = self._flows.get(id(function))
        return flow is not None and flow.result_to_backward

    def backwarded_after(self, scope: cst.CSTNode, name: str,
                         statement: cst.CSTNode | None) -> bool:
        """Whether the value `name` holds when `statement` runs later reaches a
        backward in the same function (`history.append(fake)`, then
        `classifier(fake).mean().backward()`): that backward frees the tensors
        its graph saved."""
        flow = self._flows.get(id(scope))
        stored_at = self._positions.get(id(statement), -1)
        return flow is not None and any(start <= stored_at < end
                                        for start, end in flow.reach.get(name, ()))

    def binding_backwarded(self, scope: cst.CSTNode, name: str,
                           statement: cst.CSTNode | None) -> bool:
        """Whether the value `statement` binds to `name` (`out = model(x)`)
        reaches a backward in the same function (`loss = crit(out, y)`, then
        `loss.backward()` or `loss_scaler(loss, optimizer)`)."""
        flow = self._flows.get(id(scope))
        if flow is None:
            return False
        stored_at = self._positions.get(id(statement), -1)
        bound = min((at for at, _, _ in flow.sources.get(name, ()) if at > stored_at),
                    default=None)
        return any(start == bound for start, _ in flow.reach.get(name, ()))

    def value_backwarded(self, scope: cst.CSTNode, name: str,
                         statement: cst.CSTNode | None) -> bool:
        """Whether the value `name` holds at `statement` reaches a backward in
        the same function, through a read before it or after it (`loss +=
        loss_fn(im, y)`, then `pred = torch.cat((pred, im))`, then
        `loss.backward()`): what `statement` keeps is in that backward's graph."""
        flow = self._flows.get(id(scope))
        if flow is None:
            return False
        stored_at = self._positions.get(id(statement), -1)
        bound = max((at for at, _, whole in flow.sources.get(name, ())
                     if whole and at < stored_at), default=-1)
        return any(start == bound or start <= stored_at < end
                   for start, end in flow.reach.get(name, ()))

    # -- the walk -----------------------------------------------------------
    def _walk_scope(self, node: cst.CSTNode, body: Sequence[cst.CSTNode],
                    params: list[str], class_name: str | None) -> None:
        name = node.name.value if isinstance(node, cst.FunctionDef) else None
        flow = _Flow(name, params, class_name)
        self._flows[id(node)] = flow
        if name is not None:
            self._by_name.setdefault(name, []).append(flow)
        for statement in body:
            self._walk(statement, flow, class_name)
        for at, handed in flow.handed:
            # `loss_scaler(loss, optimizer, parameters=...)` (timm, MAE): a call
            # given the optimizer this function steps or zeroes, and the loss,
            # runs the backward and the step
            if any(name in flow.stepped for name, _ in handed):
                flow.sinks.append((at, frozenset().union(
                    *(reads for name, reads in handed if name not in flow.stepped))))

    def _walk(self, node: cst.CSTNode, flow: _Flow, class_name: str | None) -> None:
        self._position += 1
        here = self._position
        if id(node) in self._wanted:
            self._positions[id(node)] = here
        # exact types (none of these is subclassed): isinstance against libcst's
        # ABC-based classes costs a Python-level check per node and per test
        if type(node) is cst.FunctionDef:
            params = [p.name.value for p in (*node.params.posonly_params, *node.params.params,
                                             *node.params.kwonly_params)]
            self._walk_scope(node, (node.body,), params, class_name)
            return
        if type(node) is cst.ClassDef:
            self._walk(node.body, flow, node.name.value)
            return
        if type(node) is cst.For or type(node) is cst.While:
            self._loop_resets[id(node)] = _resets_in(node.body)
        if type(node) is cst.Assign:
            reads = self._reads(node.value)
            for target in node.targets:
                for name, whole in _bound_names(target.target):
                    flow.add(name, here, reads, whole)
                    if whole and name not in reads and flow.name not in (None, "__init__"):
                        flow.resets.add(name)  # rebound afresh, not first built
        elif type(node) is cst.AnnAssign and node.value is not None:
            for name, whole in _bound_names(node.target):
                flow.add(name, here, self._reads(node.value), whole)
        elif type(node) is cst.AugAssign:
            for name, _ in _bound_names(node.target):
                flow.add(name, here, self._reads(node.value), False)
        elif type(node) is cst.For:
            reads = self._reads(node.iter)
            for name, whole in _bound_names(node.target):
                flow.add(name, here, reads, whole)
        elif type(node) is cst.WithItem and node.asname is not None:
            for name, whole in _bound_names(node.asname.name):
                flow.add(name, here, self._reads(node.item), whole)
        elif type(node) is cst.Return and node.value is not None:
            flow.returns.append((here, self._reads(node.value)))
        elif type(node) is cst.Del:
            flow.resets.update(name for name, _ in _bound_names(node.target))
        elif type(node) is cst.Call:
            self._note_call(node, flow, here)
        for child in children_of(node):
            self._walk(child, flow, class_name)

    def _note_call(self, node: cst.Call, flow: _Flow, here: int) -> None:
        func = node.func
        args = node.args
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in BACKWARD_METHODS:
                reads = self._reads(func.value) | {r for a in args for r in self._reads(a.value)}
                flow.sinks.append((here, reads))
                return
            container = _container_of(func.value)
            if method in _GROWING_METHODS and container is not None:
                flow.add(container, here, frozenset(r for a in args for r in self._reads(a.value)),
                         False)
            elif method == "clear" and container is not None:
                flow.resets.add(container)
            if method in _OPTIMIZER_METHODS and not args:
                flow.stepped.add(dotted_name(func.value) or "")
        if self._names.qualify(func) in AUTOGRAD_ENTRY:
            flow.sinks.append((here, frozenset(r for a in args for r in self._reads(a.value))))
            return
        if len(args) > 1:
            flow.handed.append((here, [(dotted_name(a.value), self._reads(a.value)) for a in args]))
        callee = _local_callee(func)
        if callee is not None:
            positional = [self._reads(a.value) for a in args if a.keyword is None]
            keywords = {a.keyword.value: self._reads(a.value) for a in args
                        if a.keyword is not None}
            flow.calls.append((here, callee, positional, keywords))

    def _reads(self, node: cst.CSTNode) -> frozenset[Read]:
        """Names an expression reads, and `(callee, is_method)` for the results
        of same-module calls, not looking through `.detach()` and the like."""
        found: set[Read] = set()
        pending = [node]
        while pending:
            current = pending.pop()
            if type(current) is cst.Call:  # exact types: see `_walk`
                func = current.func
                if type(func) is cst.Attribute and func.attr.value in _DETACHING_METHODS:
                    continue
                if type(func) is cst.Name and func.value in ("float", "int", "bool", "len"):
                    continue
                callee = _local_callee(func)
                if callee is not None:
                    found.add(callee)
            elif type(current) is cst.Name:
                found.add(current.value)
                continue
            elif type(current) is cst.Attribute:
                if current.attr.value in _DETACHED_ATTRIBUTES:
                    continue
                name = dotted_name(current)
                if name is not None:
                    found.add(name)
                pending.append(current.value)
                continue
            pending.extend(children_of(current))
        return frozenset(found)

    # -- between functions ------------------------------------------------
    def _settle(self) -> None:
        """Which functions run a backward, whose results reach one, and which
        outside names each result is built from, to a fixed point."""
        flows = list(self._flows.values())
        for _ in range(8):
            changed = False
            for flow in flows:
                runs_backward = bool(flow.sinks) or any(
                    callee.runs_backward for _, (name, _), _, _ in flow.calls
                    for callee in self._by_name.get(name, ()))
                results_used: set[str] = set()
                reach = self._closure(flow, self._seeds(flow), results_used)
                returned = self._closure(flow, flow.returns)
                return_sources = {n for n in returned if _outside_function(n, flow)}
                for name in results_used:
                    for callee in self._by_name.get(name, ()):
                        if not callee.result_to_backward:
                            callee.result_to_backward = changed = True
                if (runs_backward, reach, return_sources) != \
                        (flow.runs_backward, flow.reach, flow.return_sources):
                    flow.runs_backward, flow.reach = runs_backward, reach
                    flow.return_sources = return_sources
                    changed = True
            if not changed:
                return

    def _seeds(self, flow: _Flow) -> list[tuple[int, frozenset[Read]]]:
        """What a backward reads here: its own operands, what is handed to a
        function that runs one (the ACER `compute_loss(policies, values)`),
        and what this function returns when its caller back-propagates it."""
        seeds = list(flow.sinks)
        for at, (name, _), positional, keywords in flow.calls:
            if any(callee.runs_backward for callee in self._by_name.get(name, ())):
                seeds.extend((at, reads) for reads in (*positional, *keywords.values()))
        if flow.result_to_backward:
            seeds.extend(flow.returns)
        return seeds

    def _closure(self, flow: _Flow, seeds: Iterable[tuple[int, frozenset[Read]]],
                 results_used: set[str] | None = None) -> dict[str, set[tuple[int, int]]]:
        """Every name whose value flows into a seed, with the stretches of the
        walk (from its last whole rebinding, -1 for the function's entry, to the
        read) in which what is put into it gets there. `results_used` collects
        the same-module functions whose results flow in."""
        live: dict[str, set[tuple[int, int]]] = {}
        pending: list[tuple[Read, int]] = [(r, at) for at, reads in seeds for r in reads]
        while pending:
            item, before = pending.pop()
            if isinstance(item, tuple):
                if results_used is not None:
                    results_used.add(item[0])
                for callee in self._by_name.get(item[0], ()):
                    pending.extend((n, before) for n in callee.return_sources)
                continue
            edges = [e for e in flow.sources.get(item, ()) if e[0] < before]
            start = next((at for at, _, whole in reversed(edges) if whole), -1)
            stretch = (start, before)
            if stretch in live.setdefault(item, set()):
                continue
            live[item].add(stretch)
            for at, reads, _ in edges:
                if at >= start:
                    pending.extend((r, at) for r in reads)
        return live


#: what a value is built from: a name it reads, or `(callee, is_method)` for
#: the result of a same-module call
Read = str | tuple[str, bool]


@dataclass
class _Flow:
    """Flow-insensitive facts of one function, each with its walk position."""

    name: str | None  # None: the module's own code
    params: list[str]
    class_name: str | None
    #: name -> (position, what it reads, whether it rebinds the whole name)
    sources: dict[str, list[tuple[int, frozenset[Read], bool]]] = field(default_factory=dict)
    sinks: list[tuple[int, frozenset[Read]]] = field(default_factory=list)
    #: (position, (callee, is_method), what each positional and keyword argument reads)
    calls: list[tuple[int, tuple[str, bool], list[frozenset[Read]],
                      dict[str, frozenset[Read]]]] = field(default_factory=list)
    returns: list[tuple[int, frozenset[Read]]] = field(default_factory=list)
    resets: set[str] = field(default_factory=set)
    #: names whose `.zero_grad()` is called here: optimizers (and models)
    stepped: set[str] = field(default_factory=set)
    #: calls given two or more arguments: (position, [(argument's name, what it reads)])
    handed: list[tuple[int, list[tuple[str | None, frozenset[Read]]]]] = \
        field(default_factory=list)
    runs_backward: bool = False  # itself or through a function it calls
    result_to_backward: bool = False  # a caller back-propagates what it returns
    reach: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    return_sources: set[str] = field(default_factory=set)

    def add(self, name: str, at: int, reads: frozenset[Read], whole: bool) -> None:
        self.sources.setdefault(name, []).append((at, reads, whole))


#: What runs a backward: `loss.backward()`, `self.manual_backward(loss)`,
#: `torch.autograd.grad(...)`.
BACKWARD_METHODS = {"backward", "manual_backward"}


def backpropagated(call: cst.Call, qualified: str | None) -> set[str]:
    """The names whose graph a backward call may run through: `loss` of
    `loss.backward()`, `accelerator.backward(loss)`, `self.manual_backward(loss)`,
    `scaler.scale(loss).backward()`, `torch.autograd.backward(loss)`. A value
    back-propagated carries autograd history, whatever made it. `x.backward(y)`
    names both: `y` is the loss of an accelerator or engine, the gradient of a tensor."""
    func = call.func
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if qualified in AUTOGRAD_ENTRY:
        targets = positional[:1]
    elif type(func) is cst.Attribute and func.attr.value in BACKWARD_METHODS:
        receiver = func.value
        if type(receiver) is cst.Call and len(receiver.args) == 1 \
                and type(receiver.func) is cst.Attribute and receiver.func.attr.value == "scale":
            receiver = receiver.args[0].value  # `scaler.scale(loss).backward()`, a GradScaler's
        targets = [receiver, *positional[:1]]
    else:
        return set()
    found: set[str] = set()
    for target in targets:
        name = dotted_name(target)
        if name is not None:
            found.add(name)
            continue
        item = _item_of(target)
        if item is not None:  # `output['loss'].backward()`: the item, and its container
            found.update((item, item.split("[", 1)[0] + "[]"))
    return found


def forget_rebound(totals: set[str], node: cst.Assign) -> set[str]:
    """`totals` less what an assignment rebinds (`output = step(batch)` drops
    `output` and its items)."""
    names = rebound(node)
    return {t for t in totals if t.split("[", 1)[0] not in names}


def _item_of(node: cst.BaseExpression) -> str | None:
    """`output['loss']`, written alike wherever it is (spaces dropped), for an
    item of a named container; None for anything else."""
    if type(node) is not cst.Subscript or dotted_name(node.value) is None:
        return None
    return "".join(cst.Module(body=[]).code_for_node(node).split())


_OPTIMIZER_METHODS = {"zero_grad"}
_GROWING_METHODS = {"append", "extend", "insert", "appendleft", "add", "update"}
_DETACHING_METHODS = {"detach", "detach_", "item", "tolist", "numpy"}
_DETACHED_ATTRIBUTES = {"data", "grad", "shape", "dtype", "device"}


def rebound(node: cst.Assign) -> set[str]:
    """The names an assignment binds anew (`loss = ...`, `a, b = ...`; not the
    container of `d[k] = ...`): whatever they held before is gone."""
    return {name for target in node.targets for name, whole in _bound_names(target.target)
            if whole}


def _bound_names(target: cst.BaseExpression) -> list[tuple[str, bool]]:
    """`a, self.b, d[k]` -> `a`, `self.b` (bound whole), `d` (one item set)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _bound_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    name = _container_of(target)
    return [(name, not isinstance(target, cst.Subscript))] if name is not None else []


def _container_of(node: cst.BaseExpression) -> str | None:
    while isinstance(node, cst.Subscript):
        node = node.value
    return dotted_name(node)


def _local_callee(func: cst.BaseExpression) -> tuple[str, bool] | None:
    """`("update", True)` for `self.update(...)`, `("finish", False)` for `finish(...)`."""
    if isinstance(func, cst.Name):
        return func.value, False
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and \
            func.value.value in ("self", "cls"):
        return func.attr.value, True
    return None


def _outside_function(name: str, flow: _Flow) -> bool:
    """`self.log_probs`, or a module-level `policy.rewards` / `saved_actions`:
    a name other functions can see (not bound in or passed to this one)."""
    head = name.split(".", 1)[0]
    if head in ("self", "cls"):
        return "." in name
    return flow.name is None or (head not in flow.params and head not in flow.sources)


def _resets_in(body: cst.BaseSuite) -> set[str]:
    """Names a loop body empties on every iteration: `xs = []`, `total = 0`,
    `xs.clear()`, `del xs[:]` as statements of the body itself (not under an `if`)."""
    found: set[str] = set()
    statements = list(getattr(body, "body", ()))
    while statements:
        statement = statements.pop()
        if isinstance(statement, cst.With):
            statements.extend(statement.body.body)
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign):
                reads = names_in(small.value)
                for target in small.targets:
                    name = dotted_name(target.target)
                    if name is not None and name not in reads:
                        found.add(name)
            elif isinstance(small, cst.Del):
                found.update(name for name, _ in _bound_names(small.target))
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and \
                    isinstance(small.value.func, cst.Attribute) and \
                    small.value.func.attr.value == "clear":
                name = _container_of(small.value.func.value)
                if name is not None:
                    found.add(name)
    return found


def _combine(values: list[Value], scalar_if_all: bool = False) -> Value:
    """History if any part has it; clean if every part is clean; the calls
    the parts wait on are kept."""
    with_history = [v for v in values if v.history]
    if with_history:
        scalar = scalar_if_all and all(v.scalar or not v.history for v in values)
        return Value(True, scalar=scalar, host=all(v.host for v in with_history))
    waits = frozenset().union(*(v.waits for v in values))
    if values and all(v.history is False for v in values):
        return Value(False, waits=waits) if waits else CLEAN
    return Value(None, waits=waits) if waits else UNKNOWN


def _loss_result(arguments: list[Value]) -> Value:
    """A loss has history unless its input (the first argument, the
    prediction) is known to be free of it and no other argument is known to
    carry any (a loss of a prediction made under no_grad, whatever targets it
    is compared with; a loss on detached inputs)."""
    if arguments and arguments[0].history is False \
            and not any(v.history is True for v in arguments):
        return CLEAN
    with_history = [v for v in arguments if v.history]
    if with_history and all(v.host for v in with_history):
        return Value(True, scalar=True, host=True)  # the loss of a forward on the CPU
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


_CLEAN_TYPES = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                          cst.FormattedString, cst.ConcatenatedString, cst.Comparison,
                          cst.Lambda})


_OPTIMIZER = re.compile(r"optim|(^|[._])opt(_\w+)?$|scheduler|scaler", re.IGNORECASE)


def steps_an_optimizer(method: cst.Attribute) -> bool:
    """`optimizer.step`, `self.opt_g.step`, `scaler.step`: the end of a
    training step, by the name real code gives what it steps."""
    return method.attr.value == "step" and \
        _OPTIMIZER.search(dotted_name(method.value) or "") is not None
