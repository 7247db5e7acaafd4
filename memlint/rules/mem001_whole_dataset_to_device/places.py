"""Where a move or a subscript stands in MEM001's reading of a file: a setup
function or a per-batch one, a model's constructor, an argument of a
forward, a parameter handed in, rows picked batch by batch."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import name_words, names_within, picks_a_batch
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import SAME_DATA_CALLS
from memlint.analysis.walker import children
from memlint.rules.mem001_whole_dataset_to_device.facts import (
    _chains_to, _paired_target, _puts_on_cuda, _target_names)

#: Function names where the whole data set is loaded and prepared.
_SETUP_WORDS = {"init", "setup", "prepare", "load", "read", "build", "make", "create",
                "preprocess", "main", "data", "dataset", "datasets"}
_NOT_SETUP_WORDS = {"batch", "step", "sample", "forward", "predict", "act", "feed", "loss"}
#: Words of a function run once per batch or step (not `predict(X_test)`,
#: which may be handed a whole split and slice it itself).
_STEP_WORDS = {"batch", "step", "loss", "feed", "forward", "act"}
#: Functions that run once per batch or sample, where an index picks a batch.
_PER_BATCH_FUNCTIONS = {"getitem", "getitems", "batch", "batches", "minibatch", "iterate"}
#: Words in a callee's name that say it is a model being run.
_MODEL_WORDS = {"model", "net", "network", "encoder", "decoder", "classifier", "gnn", "gcn",
                "gat", "mlp", "module"}


def in_step_function(ctx: Context) -> bool:
    """`unpack_batch(batch)`, `calc_loss_dqn(...)`, `feed_data(data)`: a
    function run once per batch or step, whose tensors are that batch's
    (sliced per sample afterwards, they are still one batch)."""
    function = ctx.function
    return function is not None and bool(set(name_words(function.name.value)) & _STEP_WORDS)


def in_per_batch_function(ctx: Context) -> bool:
    """`__getitem__`, `get_batch`, `iterate_minibatches`: run once per batch or sample."""
    function = ctx.function
    return function is not None \
        and bool(set(name_words(function.name.value)) & _PER_BATCH_FUNCTIONS)


def slices_batches(ctx: Context, node: cst.Subscript) -> bool:
    """Rows picked per iteration: `X[i:i + bs]`, `X[ids[k]:ids[k + 1]]` in a loop,
    `X[idx]` with `idx = perm[i:i + bs]`, `self.x[index]` in `__getitem__` (not
    `X[:32]`, `X[:, i]`, a mask `X[positive]`, nor row `i` of a batch `X[i]`)."""
    first = node.slice[0].slice if node.slice else None
    per_batch = in_per_batch_function(ctx)
    if not (ctx.in_loop or per_batch):
        return False
    if isinstance(first, cst.Slice):
        return any(names_within(bound) for bound in (first.lower, first.upper) if bound)
    if not isinstance(first, cst.Index) or not isinstance(first.value, cst.Name):
        return False
    index = first.value.value
    bound = ctx.binding(index)
    if isinstance(bound, cst.Subscript) and bound.slice \
            and isinstance(bound.slice[0].slice, cst.Slice):
        return True  # idx = perm[i:i + bs]
    return per_batch and is_parameter(ctx, index)


def is_parameter(ctx: Context, name: str) -> bool:
    function = ctx.function
    return function is not None and any(p.name.value == name for p in function.params.params)


def is_model(ctx: Context, func: cst.BaseExpression) -> bool:
    """`model(x)`, `self.net(x)`, or a name bound to a constructed class (`gat = GAT(...)`)."""
    name = dotted_name(func)
    if name is None or ctx.qualify(func) is not None:
        return False
    if set(name_words(name.rsplit(".", 1)[-1])) & _MODEL_WORDS:
        return True
    bound = ctx.binding(name)
    while isinstance(bound, cst.Call) and isinstance(bound.func, cst.Attribute) \
            and bound.func.attr.value in ("to", "cuda", "eval", "train", "double", "float"):
        bound = bound.func.value
    if not isinstance(bound, cst.Call):
        return False
    constructor = dotted_name(bound.func) or ""
    return constructor.rsplit(".", 1)[-1][:1].isupper() and not (
        ctx.qualify(bound.func) or "").startswith("torch.utils.data")


def at_setup_level(ctx: Context) -> bool:
    """Module level, a class body, or a function that sets data up, outside loops."""
    if ctx.in_loop:
        return False
    function = ctx.function
    if function is None:
        return True
    words = set(name_words(function.name.value))
    return bool(words & _SETUP_WORDS) and not words & _NOT_SETUP_WORDS


def from_a_parameter(ctx: Context, source: cst.BaseExpression) -> bool:
    """Whether `source` is what the enclosing function (or method) was handed
    (`data_dict["x"]` in `preprocess(self, data_dict)`): one batch or the
    whole set, which only its callers show; a data-like name alone does not
    tell. A class's `__init__` is left out: a data set is handed to its
    constructor (`Frames(data)`) once."""
    function = ctx.function
    if function is None or function.name.value == "__init__":
        return False
    node = source
    for _ in range(12):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and not (ctx.qualify(node.func) or "").startswith("torch."):
            node = node.func.value  # a method of the data returns the data
        elif isinstance(node, cst.Call) and node.args \
                and ctx.qualify(node.func) in SAME_DATA_CALLS:
            node = node.args[0].value
        elif isinstance(node, (cst.Subscript, cst.Attribute)):
            node = node.value
        else:
            break
    if not isinstance(node, cst.Name) or node.value in ("self", "cls") \
            or ctx.binding(node.value) is not None:
        return False  # `self.data`: the object's own, set where it was built
    return is_parameter(ctx, node.value)


def in_module_constructor(ctx: Context) -> bool:
    """In `__init__` of a `torch.nn.Module` subclass (not a Dataset's)."""
    function, class_def = ctx.function, ctx.class_def
    if function is None or function.name.value != "__init__" or class_def is None:
        return False
    return any((ctx.names.qualify(base.value) or "").startswith("torch.nn.")
               for base in class_def.bases)


def assigned_names(ctx: Context, call: cst.Call, statement: cst.CSTNode | None) -> frozenset[str]:
    """The names the current statement assigns `call`'s result to (`X`, `self.data`)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return frozenset()
    names: set[str] = set()
    for small in statement.body:
        if not isinstance(small, (cst.Assign, cst.AnnAssign)) or small.value is None:
            continue
        targets = small.targets if isinstance(small, cst.Assign) else [small]
        if _chains_to(small.value, call):
            for target in targets:
                names.update(_target_names(target.target))
            continue
        for target in targets:  # `X_train, y_train = X_train.to(dev), y_train.to(dev)`
            paired = _paired_target(target.target, small.value, call)
            if paired is not None:
                names.update(_target_names(paired))
    return frozenset(names)


def parameter_position(ctx: Context, name: str) -> int | None:
    """The position of `name` among the parameters of the enclosing module-level
    function (not a method), if it is one."""
    function = ctx.function
    if function is None or ctx.class_def is not None:
        return None
    for position, param in enumerate(function.params.params):
        if param.name.value == name:
            return position
    return None


def returns_moved(ctx: Context, move: cst.Call, targets: frozenset[str]) -> bool:
    """Whether the enclosing function returns what `move` moved:
    `return data.to(device)`, or `data = data.cuda()` ... `return data`
    (not `return net(x.to(device))`: that returns the model's output)."""
    function = ctx.function
    if function is None:
        return False
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Return):
            value = current.value
            if value is not None and (dotted_name(value) in targets or _chains_to(value, move)):
                return True
        elif not isinstance(current, cst.BaseExpression):
            stack.extend(children(current))
    return False


def parameter_moved(ctx: Context, source: cst.BaseExpression) -> tuple[str, int] | None:
    """The parameter whose data `source` is, through methods and local
    reassignments (`data = data.view(bsz, -1).t()`), if any."""
    node, seen = source, set()
    for _ in range(12):
        if isinstance(node, cst.Call):
            qualified = ctx.qualify(node.func) or ""
            if isinstance(node.func, cst.Attribute) and not qualified.startswith("torch."):
                node = node.func.value  # any method of the data returns the data
            elif qualified in SAME_DATA_CALLS and node.args:
                node = node.args[0].value
            else:
                return None
        elif isinstance(node, cst.Subscript):
            if picks_a_batch(node):
                return None
            node = node.value
        elif isinstance(node, cst.Name):
            bound = ctx.binding(node.value)
            site = ctx.binding_site(node.value)
            if site is not None and site.unpacked_from is not None:
                return None  # `data, target = batch`
            if bound is not None and id(bound) not in seen:
                seen.add(id(bound))
                node = bound
                continue
            position = parameter_position(ctx, node.value)
            return None if position is None else (node.value, position)
        else:
            return None
    return None


def fed_to_a_model(ctx: Context, move: cst.Call) -> bool:
    """`model(X_test.to(device))`: the moved copy is an argument of a forward
    (its methods applied first, `model(torch.tensor(X).float().cuda())`): fed
    whole, the data set is that forward's batch, and the copy is freed with
    the statement (full-batch use, as for a bound name fed whole)."""
    ancestors = ctx.ancestors
    i = len(ancestors) - 2  # the move is ancestors[-1]
    while i > 0 and isinstance(ancestors[i], cst.Attribute):
        outer = ancestors[i - 1]
        if not isinstance(outer, cst.Call) or outer.func is not ancestors[i]:
            break
        i -= 2  # `.float()` applied to the moved copy
    if i <= 0 or not isinstance(ancestors[i], cst.Arg):
        return False
    call = ancestors[i - 1]
    return isinstance(call, cst.Call) and is_model(ctx, call.func)


def batch_loader(ctx: Context, moved: cst.BaseExpression) -> str | None:
    """`x.to(device)` (`moved` is `x`) in `for x, y in loader:` (or of `x, y
    = batch` there): the loader whose batches are moved to the GPU one by one."""
    receiver = moved
    while isinstance(receiver, (cst.Attribute, cst.Subscript)):
        receiver = receiver.value
    if not isinstance(receiver, cst.Name):
        return None
    name = receiver.value
    site = ctx.binding_site(name)
    if ctx.loop_target(name) is None and site is not None \
            and isinstance(site.unpacked_from, cst.Name):
        name = site.unpacked_from.value  # `inputs, labels = batch`
    loop = ctx.loop_target(name)
    if not isinstance(loop, cst.For):
        return None
    iterable = loop.iter
    while isinstance(iterable, cst.Call) and iterable.args:  # enumerate(), tqdm()
        iterable = iterable.args[0].value
    return dotted_name(iterable)


def names_moved_before(ctx: Context, dataset: cst.Call) -> set[str]:
    """The arguments of `TensorDataset(X, Y)` that name tensors put on the GPU
    where they were bound in this scope (`X = X.cuda()`); a parameter of the
    function is what a caller handed, not followed."""
    return {name for arg in dataset.args for name in [dotted_name(arg.value)]
            if name and name in ctx.scope.bindings
            and _puts_on_cuda(ctx.resolve(arg.value), ctx)}
