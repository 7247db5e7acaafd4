"""A forward or backward hook that keeps every call's activation (or gradient) on the GPU."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.analysis.project import UnlessProjectOnCpu
from memlint.analysis.stores import STORING_METHODS, code, container_name
from memlint.analysis.torch_api import GRAD_MODE_QUERIES
from memlint.finding import UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions

#: registration method -> how many leading parameters are not tensors (the module)
_MODULE_HOOKS = {"register_forward_hook": 1, "register_full_backward_hook": 1,
                 "register_backward_hook": 1, "register_forward_pre_hook": 1,
                 "register_full_backward_pre_hook": 1}
_TENSOR_HOOKS = {"register_hook": 0}
_HOOKS = {**_MODULE_HOOKS, **_TENSOR_HOOKS}
#: Methods whose result is on the host or a number, or a summary of a few values.
_RELEASING = {"cpu", "item", "tolist", "numpy", "mean", "std", "var", "sum", "norm", "max", "min",
              "size", "dim", "numel", "argmax", "abs_", "__len__"}
#: Statements that empty a container (`feats.clear()`, `feats = []`).
_EMPTYING = {"clear"}
#: ... or take one item back: only as many as the calls that take them
_POPPING = {"pop", "popleft"}


class _Kept(NamedTuple):
    store: cst.CSTNode  # the append / extend / insert call, or the cat assignment
    statement: cst.CSTNode | None
    container: str
    stored: cst.BaseExpression
    detached: bool
    verb: str


class HookKeepsActivations(Rule):
    """A function registered as a forward or backward hook
    (`register_forward_hook`, `register_full_backward_hook`,
    `register_forward_pre_hook`, `Tensor.register_hook`, lambdas included)
    that appends its `output`, `input` or `grad` tensor to a container that
    outlives the call (an attribute, a global, a closure's list): each
    forward adds an activation that stays on the GPU, and without
    `.detach()`, with autograd on, its graph keeps the earlier layers' saved
    activations too. Feature-extraction and Grad-CAM code that runs out of
    memory after a few hundred batches. Store `.detach().cpu()`, a summary,
    or empty the container every step."""

    code = "MEM009"

    VALID = [
        # a host copy
        "import torch\nfeats = []\ndef hook(module, inp, out):\n"
        "    feats.append(out.detach().cpu())\n"
        "model.layer4.register_forward_hook(hook)",
        # a statistic
        "import torch\nnorms = []\ndef hook(module, inp, out):\n"
        "    norms.append(out.norm().item())\n"
        "model.fc.register_forward_hook(hook)",
        # overwritten under a fixed key each forward
        "import torch\nacts = {}\ndef get(name):\n"
        "    def hook(m, i, o):\n        acts[name] = o.detach()\n"
        "    return hook\nmodel.layer4.register_forward_hook(get('layer4'))",
        # emptied every call by the owner
        "import torch\nclass GradCAM:\n    def __init__(self, layer):\n        self.acts = []\n"
        "        layer.register_forward_hook(self.save)\n    def save(self, m, i, o):\n"
        "        self.acts.append(o)\n    def __call__(self, x):\n        self.acts = []\n"
        "        return self.model(x)",
        # a list local to the hook call
        "import torch\ndef hook(m, i, o):\n    parts = []\n    parts.append(o)\n    return parts\n"
        "model.register_forward_hook(hook)",
        # not a hook
        "import torch\nfeats = []\ndef keep(m, i, o):\n    feats.append(o)\nkeep(None, None, x)",
        # pushed in the forward hook only when a backward can follow, popped there
        "import torch\nstack = []\ndef fwd(m, i, o):\n    if torch.is_grad_enabled():\n"
        "        stack.append(o)\ndef bwd(m, gi, go):\n    stack.pop()\n"
        "net.register_forward_hook(fwd)\nnet.register_full_backward_hook(bwd)",
        # the module argument, not a tensor
        "import torch\nseen = []\ndef hook(module, inp, out):\n    seen.append(module)\n"
        "net.register_forward_hook(hook)",
        # the argument rebound to its host copy first (llm-awq's input cache)
        "import torch\nfeat = []\ndef hook(m, x, y):\n    x = x[0]\n    x = x.detach().cpu()\n"
        "    feat.append(x)\nnet.register_forward_hook(hook)",
    ]
    INVALID = [
        "import torch\nnet = model = build().cuda()\nfeatures = []\n"
        "def hook(module, inp, out):\n    features.append(out)\n"
        "model.layer4.register_forward_hook(hook)",
        # detached: no graph, but the activation stays on the GPU
        "import torch\nnet = model = build().cuda()\nfeatures = []\n"
        "def hook(module, inp, out):\n    features.append(out.detach())\n"
        "model.layer4.register_forward_hook(hook)",
        "import torch\nnet = model = build().cuda()\nclass Extractor:\n"
        "    def __init__(self, model):\n        self.outputs = []\n"
        "        model.fc.register_forward_hook(self.save)\n    def save(self, m, i, o):\n"
        "        self.outputs.append(o)",
        "import torch\nnet = model = build().cuda()\n"
        "grads = []\nx.register_hook(lambda g: grads.append(g))",
        "import torch\nnet = model = build().cuda()\nacts = []\n"
        "model.layer3.register_forward_hook(lambda m, i, o: acts.append(o))",
        # through a local name
        "import torch\nnet = model = build().cuda()\nkept = []\n"
        "def hook(m, i, o):\n    a = o.flatten(1)\n    kept.append(a)\n"
        "net.register_forward_hook(hook)",
        # the argument rebound to a part of itself, still on the GPU
        "import torch\nnet = model = build().cuda()\nfeat = []\ndef hook(m, x, y):\n"
        "    x = x[0]\n    feat.append(x)\nnet.register_forward_hook(hook)",
        # the input of a pre-hook
        "import torch\nnet = model = build().cuda()\n"
        "inputs = []\ndef pre(m, args):\n    inputs.extend(args)\n"
        "net.register_forward_pre_hook(pre)",
        # pushed in the forward hook, popped in the backward hook: a forward
        # under no_grad leaves its activation behind
        "import torch\nnet = model = build().cuda()\nstack = []\ndef fwd(m, i, o):\n"
        "    stack.append(o.detach())\ndef bwd(m, gi, go):\n    stack.pop()\n"
        "net.register_forward_hook(fwd)\nnet.register_full_backward_hook(bwd)",
        # a running concatenation on the module object
        "import torch\nnet = model = build().cuda()\nclass Probe:\n"
        "    def __init__(self, layer):\n        self.cache = None\n"
        "        layer.register_forward_hook(self.grab)\n    def grab(self, m, i, o):\n"
        "        self.cache = o if self.cache is None else torch.cat([self.cache, o])",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        #: hooks as registered: (what names the function, tensor parameters to skip)
        self.registered: list[tuple[str, int]] = []
        #: kept stores by the function they are in (its name, `Class.method` too)
        self.kept_by_function: dict[str, list[_Kept]] = {}
        self.emptied: set[str] = set()  # containers something empties or resets
        self.popped: set[str] = set()  # containers something takes items back from
        #: functions that ask whether autograd is on (`torch.is_grad_enabled()`)
        self.grad_checked: set[str] = set()
        self.lambda_kept: list[_Kept] = []

    # -- registrations ---------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in (*_EMPTYING, *_POPPING):
            name = dotted_name(func.value)
            if name:
                (self.emptied if func.attr.value in _EMPTYING else self.popped).add(name)
        if self.ctx.qualify(func) in GRAD_MODE_QUERIES and self.ctx.function is not None:
            self.grad_checked.add(self.ctx.function.name.value)
        if isinstance(func, cst.Attribute) and func.attr.value in _HOOKS and node.args:
            skip = _HOOKS[func.attr.value]
            hook = node.args[0].value
            if isinstance(hook, cst.Lambda):
                self._lambda_hook(hook, skip)
                return
            while isinstance(hook, cst.Call):  # `get_activation("fc")`, `partial(fn, ...)`
                hook = hook.func if not hook.args or dotted_name(hook.func) not in (
                    "partial", "functools.partial") else hook.args[0].value
            for name in self._functions_named_by(hook):
                self.registered.append((name.rsplit(".", 1)[-1], skip))
            return
        self._note_store(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = dotted_name(target.target) or keyed_name(target.target)
            if name and isinstance(node.value, (cst.List, cst.Dict)) and not node.value.elements:
                function = self.ctx.function
                per_call = function is not None and function.name.value != "__init__"
                if (self.ctx.in_loop or per_call) and not self._set_up_when_missing():
                    self.emptied.add(name)  # reset per step, not set up once
        self._note_store(node)

    def _set_up_when_missing(self) -> bool:
        """Under `if not hasattr(module, "activations"):`: made on first use."""
        return any(type(a) is cst.If and type(a.test) is cst.UnaryOperation
                   and type(a.test.expression) is cst.Call
                   and dotted_name(a.test.expression.func) == "hasattr"
                   for a in self.ctx.ancestors)

    def _functions_named_by(self, hook: cst.BaseExpression) -> list[str]:
        """`keep` for `register_forward_hook(keep)`; each function of the tuple a
        loop goes through for `for hook in (keep, log): ...register_forward_hook(hook)`."""
        name = dotted_name(hook)
        if name is None:
            return []
        loop = self.ctx.loop_target(name)
        if isinstance(loop, cst.For) and isinstance(loop.iter, (cst.Tuple, cst.List)) \
                and self.ctx.binding(name) is None:
            return [n for e in loop.iter.elements for n in [dotted_name(e.value)] if n]
        return [name]

    def _lambda_hook(self, hook: cst.Lambda, skip: int) -> None:
        params = [p.name.value for p in hook.params.params][skip:]
        body = hook.body
        if isinstance(body, cst.Call) and isinstance(body.func, cst.Attribute) \
                and body.func.attr.value in STORING_METHODS and body.args:
            stored = body.args[-1].value
            container = container_name(body.func.value)
            if container and container not in params and _reads(stored, params, {}):
                verb = STORING_METHODS[body.func.attr.value]
                self.lambda_kept.append(_Kept(body, self.statement(), container, stored,
                                              _detached(stored), verb))

    # -- stores in functions that may be hooks --------------------------------
    def _note_store(self, node: cst.CSTNode) -> None:
        function = self.ctx.function
        if function is None:
            return
        kept = self._kept_by(node, function)
        if kept is not None:
            self.kept_by_function.setdefault(function.name.value, []).append(kept)

    def _kept_by(self, node: cst.CSTNode, function: cst.FunctionDef) -> _Kept | None:
        if isinstance(node, cst.Call):
            func = node.func
            if not isinstance(func, cst.Attribute) or func.attr.value not in STORING_METHODS \
                    or not isinstance(self.ctx.parent, cst.Expr) or not node.args:
                return None
            container, stored = func.value, node.args[-1].value
            verb = STORING_METHODS[func.attr.value]
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            container = node.targets[0].target
            concatenated = _concatenated_onto(node.value, dotted_name(container))
            if concatenated is None:
                return None
            stored, verb = concatenated, "concatenate"
        else:
            return None
        owner = container_name(container)
        if owner is None or "." not in owner and owner in self.ctx.scope.bindings \
                and not isinstance(node, cst.Assign):
            return None  # a list local to the call, freed with it
        params = [p.name.value for p in function.params.params]
        local = {name: value for name, value in self.ctx.scope.bindings.items()}
        if not _reads(stored, params, local):
            return None
        return _Kept(node, self.statement(), owner, stored, _detached(stored), verb)

    def finish(self) -> None:
        found: list[tuple[_Kept, str | None]] = [(kept, None) for kept in self.lambda_kept]
        for name, skip in self.registered:
            for kept in self.kept_by_function.get(name, ()):
                found.append((kept, name))
        seen = set()
        for kept, hook in found:
            if id(kept.store) in seen or kept.container in self.emptied \
                    or _keyed_receiver(kept.store) in self.emptied:
                continue  # emptied per step: `self.cache["hooks"] = []` after each loss
            popped = kept.container in self.popped
            if popped and hook in self.grad_checked:
                continue  # kept only when a backward can follow, which pops it
            seen.add(id(kept.store))
            self.report(kept.store, _message(kept) + _POPPED_TOO * popped, kept.statement,
                        UnlessProjectOnCpu.here(self.ctx), fix=_to_host(kept))


def _concatenated_onto(value: cst.BaseExpression, name: str | None) -> cst.BaseExpression | None:
    """`o` in `self.cache = o if self.cache is None else torch.cat([self.cache, o])`."""
    if name is None:
        return None
    if isinstance(value, cst.IfExp):
        return _concatenated_onto(value.orelse, name) or _concatenated_onto(value.body, name)
    if isinstance(value, cst.Call) and (dotted_name(value.func) or "").endswith(("cat", "stack")) \
            and value.args and isinstance(sequence := value.args[0].value, (cst.List, cst.Tuple)):
        parts = [e.value for e in sequence.elements]
        if any(dotted_name(p) == name for p in parts):
            others = [p for p in parts if dotted_name(p) != name]
            return others[0] if others else None
    return None


def _reads(stored: cst.BaseExpression, params: list[str], local: dict[str, cst.BaseExpression],
           depth: int = 0) -> bool:
    """Whether `stored` is one of the hook's tensors (or made from one by
    element-wise and shape methods), not released to the host or summarised."""
    if depth > 6:
        return False
    node = stored
    while isinstance(node, (cst.Call, cst.Subscript, cst.Attribute)):
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute):
                if node.func.attr.value in _RELEASING:
                    return False
                node = node.func.value
                continue
            return False  # a function of the tensor: its result is not the activation
        if isinstance(node, cst.Attribute) and dotted_name(node) is not None:
            break
        node = node.value
    name = dotted_name(node)
    if name is None:
        return False
    if name in local and local[name] is not stored:  # rebound in the hook first
        return _reads(local[name], params, local, depth + 1)  # (`x = x.detach().cpu()`)
    return name in params[1:] or (len(params) == 1 and name == params[0])


def _detached(stored: cst.BaseExpression) -> bool:
    node = stored
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if node.func.attr.value == "detach":
            return True
        node = node.func.value
    return False


def _message(kept: _Kept) -> str:
    text = code(kept.stored)
    cost = ("every forward adds its activation, which stays on the GPU" if kept.detached else
            "every forward adds its activation, which stays on the GPU, and with autograd on "
            "its graph keeps the earlier layers' saved activations too")
    return (f"hook keeps '{text}' in '{kept.container}' on every call: {cost}; "
            f"{kept.verb} {text}.detach().cpu() (or a summary) instead, or empty "
            f"'{kept.container}' every step")


_POPPED_TOO = (" (taking one back in the backward pass frees only what a backward follows: "
               "a forward under no_grad leaves its activation behind; return from the hook "
               "when `not torch.is_grad_enabled()`)")


def _to_host(kept: _Kept) -> FixPlan | None:
    """`feats.append(out)` -> `feats.append(out.detach().cpu())`. Unsafe: code
    that uses what the hook kept on the GPU (Grad-CAM weights multiplied
    with device tensors) then mixes devices; and `.detach()` drops a graph
    someone may back-propagate through."""
    if kept.verb == "concatenate":
        return None
    stored = kept.stored
    base = stored if isinstance(stored, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) \
        else stored.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    if not kept.detached:
        base = cst.Call(func=cst.Attribute(value=base, attr=cst.Name("detach")))
    on_host = cst.Call(func=cst.Attribute(value=base, attr=cst.Name("cpu")))
    return FixPlan(UNSAFE, f"{kept.verb} {code(on_host)}", ((kept.stored, on_host),))


def keyed_name(node: cst.BaseExpression) -> str | None:
    """`self.cache['outputs']`: a container under literal keys, as written."""
    keys: list[str] = []
    while isinstance(node, cst.Subscript) and len(node.slice) == 1 \
            and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, (cst.SimpleString, cst.Integer)):
        key = node.slice[0].slice.value
        written = key.evaluated_value if isinstance(key, cst.SimpleString) else key.value
        keys.insert(0, f"[{written!r}]")
        node = node.value
    name = dotted_name(node)
    return name + "".join(keys) if name is not None and keys else None


def _keyed_receiver(store: cst.CSTNode) -> str | None:
    """The keyed container an `append` stores into (`self.cache['outputs']`)."""
    if isinstance(store, cst.Call) and isinstance(store.func, cst.Attribute):
        return keyed_name(store.func.value)
    return None
