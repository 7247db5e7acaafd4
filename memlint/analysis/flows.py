"""Where a loader's batches go, and what a function does with its parameters.

MEM005 needs to know whether the tensors a DataLoader yields are themselves
copied to a GPU (pinning then pays) or only turned into numpy, strings or new
tensors first (pinning buys nothing). This follows, within a module, the
targets of every `for` over a name and the parameters of every function:
the names bound to parts of them (`x, y = batch`, `batch["image"]`,
`x.float()`, `Variable(x)`, `for xs in zip(x, y)`), whether one is copied to a
CUDA device, and which function it is handed to (by position or keyword).
What each top-level function does with each parameter becomes a project fact,
so a batch handed to `utils.test_single_volume(image, ...)` is judged by what
that function does in its own file.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import Context, Scope, either_values
from memlint.analysis.devices import moves_to_cuda
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.models import built_kind, unchained
from memlint.analysis.names import call_arg, dotted_name

GPU, STAY, UNKNOWN = "gpu", "stay", "unknown"

#: Calls that take a batch without moving it anywhere.
HARMLESS_BUILTINS = {"print", "len", "str", "repr", "int", "float", "bool", "isinstance", "type",
                     "enumerate", "zip", "range", "list", "tuple", "dict", "set", "sorted",
                     "min", "max", "sum", "any", "all", "next", "iter", "hasattr", "getattr"}
#: Python's own functions (`ord`, `round`): none puts a tensor on a GPU.
_PYTHON_BUILTINS = frozenset(dir(builtins))
#: Libraries that never put what they are given on a GPU.
_HOST_LIBRARIES = ("numpy.", "scipy.", "PIL.", "cv2.", "math.", "skimage.", "sklearn.",
                   "medpy.", "matplotlib.", "pandas.", "imageio.", "SimpleITK.", "nibabel.",
                   "logging.", "json.", "pickle.", "os.", "random.")
#: Wrappers whose iteration is the loader's (`enumerate(loader)`, `tqdm(loader)`).
_LOOP_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "list", "tqdm.tqdm", "tqdm.auto.tqdm",
                  "tqdm.notebook.tqdm", "trange"}
#: Methods that give (a view of, or the same data as) part of a batch.
_PART_METHODS = {"float", "double", "half", "long", "int", "bool", "view", "reshape", "permute",
                 "squeeze", "unsqueeze", "transpose", "contiguous", "items", "values", "get",
                 "type_as", "flatten", "t"}


@dataclass
class Flow:
    """What a `for` over a loader does with its batches, or a function with
    one of its parameters: the values followed are the loop's targets (the
    parameter) and the names bound to parts of them."""

    name: str  # the name iterated (`train_loader`), or the parameter's
    names: set[str]
    moved: bool = False  # one of them, or a part of one, is copied to a CUDA device
    #: functions of this module given one, with the argument it is (position or keyword)
    handed_to: list[tuple[str, int | str]] = field(default_factory=list)
    #: functions of other modules given one, as imported (`val_2D.test_single_volume`)
    handed_out: list[tuple[str, int | str]] = field(default_factory=list)
    unknown: bool = False  # one goes to code nobody can follow (a method of another object)
    #: the function whose parameter or local variable the loop iterates (None:
    #: a global, an attribute): a loader local to another function is another loader
    owner: cst.FunctionDef | None = None
    #: for a loop in a method: its class, when what it iterates was handed to
    #: the object (a parameter, an attribute of `self`), not built right there
    fed_class: str | None = None
    #: names a comprehension binds to parts of them (`{k: v.to(device) for k, v
    #: in batch.items()}`): followed only for a copy made right there
    in_comprehensions: set[str] = field(default_factory=set)


class ValueFlows:
    """The flows of one module, gathered during the walk."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.loops: list[Flow] = []
        #: per function name, each definition's parameters in order, each with its flow
        self.functions: dict[str, list[list[Flow]]] = {}
        self._open: dict[cst.CSTNode, list[Flow]] = {}

    @classmethod
    def of(cls, ctx: Context) -> ValueFlows:
        return ctx.shared(cls)

    # -- the walk ---------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        parts = {part_of(arg.value) for arg in node.iter.args} \
            if isinstance(node.iter, cst.Call) else {part_of(node.iter)}
        for flow in self._open_flows():
            if parts & flow.names:  # `for x_slice, y_slice in zip(x, y)`: parts of a batch
                flow.names.update(names_in(node.target))
        iterated = iterated_name(node.iter)
        if iterated is not None:
            loop = Flow(iterated, set(names_in(node.target)), owner=local_owner(self.ctx, iterated),
                        fed_class=self._fed_class(iterated))
            self.loops.append(loop)
            self._open[node] = [loop]

    def _fed_class(self, iterated: str) -> str | None:
        """The class of the method this loop is in, when it iterates what the
        object was given: a parameter, `self.loader`, a name bound to one."""
        class_def, function = self.ctx.class_def, self.ctx.function
        if class_def is None or function is None:
            return None
        bound = self.ctx.binding(iterated) if "." not in iterated else None
        source = (iterated_name(bound) or root_name(bound)) if bound is not None else iterated
        params = function.params
        given = (source or "").startswith("self.") or source == "self" or any(
            p.name.value == source for p in (*params.posonly_params, *params.params,
                                             *params.kwonly_params))
        return class_def.name.value if given else None

    def leave_For(self, node: cst.For) -> None:
        self._open.pop(node, None)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = [Flow(p.name.value, {p.name.value})
                  for p in (*node.params.posonly_params, *node.params.params,
                            *node.params.kwonly_params) if p.name.value not in ("self", "cls")]
        self.functions.setdefault(node.name.value, []).append(params)
        self._open[node] = params

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._open.pop(node, None)

    def _visit_comprehension(self, node: cst.BaseComp | cst.DictComp) -> None:
        """`[t.to(device) for t in batch]`, `{k: v.to(device) for k, v in
        batch.items()}`: the element is a part of the batch (seen before the
        element, which the walk visits first)."""
        if not self._open:
            return
        comp_for: cst.CompFor | None = node.for_in
        while comp_for is not None:
            root = part_of(comp_for.iter)
            for flow in self._open_flows():
                if root in flow.names or root in flow.in_comprehensions:
                    flow.in_comprehensions.update(names_in(comp_for.target))
            comp_for = comp_for.inner_for_in

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension

    def leave_Assign(self, node: cst.Assign) -> None:
        """`x, y = batch`, `x = batch["image"]`, `x = x.float()`: parts of a
        batch; `image = image.cpu().numpy()`: the name no longer holds one
        (decided after the value, whose calls saw the names as they were)."""
        if not self._open:
            return
        root = part_of(node.value)
        targets: set[str] | None = None  # worked out only when a flow needs them
        for flow in self._open_flows():
            if root in flow.names or flow.names:
                if targets is None:
                    targets = _assigned_names(node)
                if root in flow.names:
                    flow.names.update(targets)
                else:
                    flow.names.difference_update(targets)

    def visit_Yield(self, node: cst.Yield) -> None:
        """`for x, y in loader: yield x, y`: the batches go to whoever
        iterates the generator, which nobody here follows."""
        value = node.value
        if not self._open or value is None or isinstance(value, cst.From):
            return
        parts = {part_of(e.value) for e in value.elements} \
            if isinstance(value, cst.Tuple) else {part_of(value)}
        for flow in self._open_flows():
            if parts & flow.names:
                flow.unknown = True

    def visit_Call(self, node: cst.Call) -> None:
        """Is a followed value, or a part of one, copied to a CUDA device, or
        handed to a function (of this module, of another, or unknown)?"""
        if not self._open:
            return
        func = node.func
        receiver = part_of(func.value) if isinstance(func, cst.Attribute) else None
        # each argument's root once, not once per followed name (this runs for
        # every call inside every function of a file that moves tensors)
        roots = [part_of(arg.value) for arg in node.args]
        if receiver is not None and moves_to_cuda(node, self.ctx):
            for flow in self._open_flows():
                flow.moved |= receiver in flow.in_comprehensions
        flows = [f for f in self._open_flows()
                 if receiver in f.names or any(r in f.names for r in roots)]
        if not flows:
            return
        if isinstance(func, cst.Name) and (func.value in HARMLESS_BUILTINS or (
                func.value in _PYTHON_BUILTINS and func.value not in self.functions
                and self.ctx.binding(func.value) is None)):
            flows = [f for f in flows if receiver in f.names]  # `ord(c)`: Python's own
        moved = moves_to_cuda(node, self.ctx) if receiver is not None else False
        imported = self.ctx.qualify(func)  # `from val_2D import test_single_volume`
        local = self._callee(func) if imported is None else None
        if local is _Callee.MOVES_NOTHING:
            return
        for flow in flows:
            if receiver in flow.names:
                flow.moved |= moved
                continue
            position = 0
            for arg, root in zip(node.args, roots):
                slot: int | str = arg.keyword.value if arg.keyword else position
                if arg.keyword is None and not arg.star:
                    position += 1
                if root not in flow.names:
                    continue
                if arg.star:
                    flow.unknown = True
                elif local is not None:
                    flow.handed_to.append((local, slot))
                elif imported is not None and imported.startswith(_HOST_LIBRARIES):
                    continue  # numpy, scipy, PIL...: nothing there puts a tensor on a GPU
                elif imported is not None and not imported.startswith("torch."):
                    flow.handed_out.append((imported, slot))
                elif imported is None:
                    flow.unknown = True

    def _callee(self, func: cst.BaseExpression) -> str | _Callee | None:
        """The function of this module a call runs (`net(x)` after `net =
        linreg` runs `linreg`), or `_Callee.MOVES_NOTHING` for a module or loss built
        right here (`net = nn.Sequential(...)`, `criterion =
        nn.CrossEntropyLoss()`, `net = Net()`): calling one computes on its
        inputs where they are and moves none of them, unlike DataParallel and
        DistributedDataParallel, which scatter their inputs to the GPUs."""
        if not isinstance(func, cst.Name):
            return _local_callee(func)
        bound = self.ctx.resolve(func)
        if isinstance(bound, cst.Name):
            return bound.value
        built = unchained(bound)
        if built_kind(built, self.ctx) is None or "DataParallel" in _called_name(built):
            return func.value
        return _Callee.MOVES_NOTHING

    def _open_flows(self) -> list[Flow]:
        return [flow for flows in self._open.values() for flow in flows]

    # -- queries (complete once the walk is over) -------------------------
    def verdict(self, flow: Flow, depth: int = 0) -> tuple[str, list[tuple[str, int | str]]]:
        """GPU, STAY or UNKNOWN for what a loop or parameter does with its
        values, following the functions of this module it hands them to; with
        the functions of other modules it hands them to (the verdict is STAY
        only if they keep them on the host too: the project decides)."""
        if flow.moved:
            return GPU, []
        if depth > 3:  # a chain of helpers, or one that calls itself
            return UNKNOWN, []
        verdicts = {UNKNOWN} if flow.unknown else set()
        handed_out = list(flow.handed_out)
        for callee, slot in flow.handed_to:
            definitions = self.functions.get(callee)
            if not definitions:
                verdicts.add(UNKNOWN)
            for params in definitions or ():
                param = _parameter(params, slot)
                if param is None:
                    verdicts.add(UNKNOWN)
                    continue
                verdict, more = self.verdict(param, depth + 1)
                verdicts.add(verdict)
                handed_out += more
        if GPU in verdicts:
            return GPU, []
        return (UNKNOWN if UNKNOWN in verdicts else STAY), handed_out

    def batch_movers(self) -> set[str]:
        """The classes of this module that copy to a CUDA device the batches
        of a loader they are given (`Solver(config, train_loader)` whose
        `train()` runs `images.to(self.device)` over `self.train_loader`)."""
        return {loop.fed_class for loop in self.loops
                if loop.fed_class is not None and self.verdict(loop)[0] == GPU}

    def parameter_facts(self) -> dict[str, tuple[str, ...]]:
        """Per function of this module defined once, per parameter in the
        order `parameter_names` gives: GPU, STAY or UNKNOWN (a parameter handed
        on to yet another module is UNKNOWN: one file's facts do not follow
        it further)."""
        facts = {}
        for name, definitions in self.functions.items():
            if len(definitions) == 1:
                facts[name] = tuple(verdict if not out else UNKNOWN
                                    for verdict, out in map(self.verdict, definitions[0]))
        return facts

    def parameter_names(self) -> dict[str, tuple[str, ...]]:
        """The parameters `parameter_facts` answers for, by name: positional
        ones in order, then keyword-only ones (`self` and `cls` left out), so
        that a call naming an argument (`case=case_name`) finds its verdict."""
        return {name: tuple(flow.name for flow in definitions[0])
                for name, definitions in self.functions.items() if len(definitions) == 1}


class _Callee(enum.Enum):
    #: what `ValueFlows._callee` answers for a call that moves none of its arguments
    MOVES_NOTHING = enum.auto()


def _called_name(call: cst.BaseExpression) -> str:
    return (dotted_name(call.func) or "") if isinstance(call, cst.Call) else ""


def local_owner(ctx: Context, name: str) -> cst.FunctionDef | None:
    """The function `name` is a parameter or a local variable of, here; None
    for a global, an attribute, or code outside functions."""
    function = ctx.function
    if function is None or "." in name or ctx.scope.node is not function:
        return None
    return function if is_local(ctx.scope, name) else None


def is_local(scope: Scope, name: str) -> bool:
    """Whether `name` is bound in the function body `scope` so far: assigned,
    a loop's target, or a parameter."""
    if name in scope.bindings or name in scope.loop_targets:
        return True
    params = cast(cst.FunctionDef, scope.node).params
    return any(p.name.value == name for p in (
        *params.posonly_params, *params.params, *params.kwonly_params))


def _assigned_names(node: cst.Assign) -> set[str]:
    names: set[str] = set()
    for target in node.targets:
        name = dotted_name(target.target)
        names.update([name] if name is not None else names_in(target.target))
    return names


def _parameter(params: list[Flow], slot: int | str) -> Flow | None:
    if isinstance(slot, str):
        return next((f for f in params if f.name == slot), None)
    return params[slot] if slot < len(params) else None


def root_name(node: cst.BaseExpression) -> str | None:
    """`batch` for `batch`, `batch[0]`, `batch.x`, `batch["image"][0]`."""
    while type(node) is cst.Subscript or type(node) is cst.Attribute:
        node = node.value
    return dotted_name(node)


def part_of(value: cst.BaseExpression) -> str | None:
    """The name a value is a part of: `batch` for `batch[0]`, `batch.x.float()`,
    `Variable(batch[0])`."""
    if type(value) is cst.Name:  # the common case, first
        return value.value
    while type(value) is cst.Call:
        if type(value.func) is cst.Attribute and value.func.attr.value in _PART_METHODS:
            value = value.func.value
        elif (dotted_name(value.func) or "").endswith("Variable") and value.args:
            value = value.args[0].value
        else:
            break
    if type(value) is cst.Tuple or type(value) is cst.List:
        roots = {part_of(e.value) for e in value.elements}
        return roots.pop() if len(roots) == 1 else None
    return root_name(value) if type(value) in (cst.Name, cst.Subscript, cst.Attribute) \
        else None


def _local_callee(func: cst.BaseExpression) -> str | None:
    """`helper` for `helper(x)` and `self.helper(x)`: a function this module may define."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.value.value in ("self", "cls"):
        return func.attr.value
    return None


def reads_one_batch(node: cst.Call) -> bool:
    """`next(iter(loader))`, `next(loader_iter)`."""
    return isinstance(node.func, cst.Name) and node.func.value == "next" and bool(node.args)


def iterated_name(node: cst.BaseExpression) -> str | None:
    """The name a loop iterates, through `enumerate`, `tqdm`, `zip`'s first argument."""
    while isinstance(node, cst.Call) and node.args and \
            (dotted_name(node.func) or "") in _LOOP_WRAPPERS:
        node = node.args[0].value
    return dotted_name(node)


def returns_its_argument(params: cst.Parameters, body: Sequence[cst.CSTNode]) -> bool:
    """`(x): return x` / `lambda x: x`: one parameter, given back unchanged."""
    if len(params.params) != 1 or isinstance(params.star_arg, (cst.Param, cst.ParamStar)) \
            or params.kwonly_params or params.star_kwarg or params.posonly_params:
        return False
    name = params.params[0].name.value
    statement = body[0] if len(body) == 1 else None
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        statement = statement.body[0]
    value = statement.value if isinstance(statement, cst.Return) else statement
    return isinstance(value, cst.Name) and value.value == name


#: DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, ...)
_COLLATE_POSITION = 6


def collate_moves_to_device(loader: cst.Call, ctx: Context) -> bool:
    """`collate_fn=partial(collate, device=device)`: the collate function is
    given the training device, so the batches it returns are already there
    (also when every branch of an `if`/`elif`/`else` binds it so)."""
    collate = call_arg(loader, "collate_fn", position=_COLLATE_POSITION)
    if collate is None:
        return False
    choices = either_values(ctx.resolve(collate.value))
    return all(isinstance(c, cst.Call) and ctx.qualify(c.func) == "functools.partial"
               and call_arg(c, "device") is not None for c in choices)


def imported_callee(call: cst.Call, ctx: Context) -> tuple[str, str] | None:
    """(the module as the import names it, the name) of a call of another
    module's function or class (`BERTTrainer(...)` of `from .trainer import
    BERTTrainer`: `(".trainer", "BERTTrainer")`), whose summary the project
    holds; None for this module's own names and PyTorch's."""
    collector = FactCollector.of(ctx)
    written = dotted_name(call.func)
    imported = collector.imported_name(written) if collector and written else None
    if imported is None or "." not in imported or imported.startswith("torch."):
        return None
    owner, _, name = imported.rpartition(".")
    return owner, name
