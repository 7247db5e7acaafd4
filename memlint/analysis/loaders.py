"""What a DataLoader call is given, as far as its file shows it: how many
worker processes it starts (MEM002: code that runs in them), and the values
its arguments may take.

A value is read where the file shows it: a literal, every assignment to a
name in its scope, an argparse option's default, a parameter's default and
what this file's callers pass, an entry of a `**kwargs` dict built here. One
it does not show (a config entry, an argument nobody here sets) is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.devices import string_value
from memlint.analysis.flows import returns_its_argument
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name, has_star_args, literal_bool
from memlint.analysis.torch_api import (FLOAT_DTYPES, FLOAT_FACTORIES, INTEGER_DTYPES,
                                        INTEGER_FACTORIES, TENSOR_DATASETS)

#: DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
#: collate_fn, pin_memory, ...)
_WORKERS_POSITION = 5
COLLATE_POSITION = 6
PIN_MEMORY_POSITION = 7

#: methods that change a dict in place
_DICT_CHANGES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__"}
#: a `**kw` dict that has no such key
_ABSENT = cst.Name("absent")

#: a `num_workers` value: an int; None, unknown; str: an argparse dest;
#: (function, parameter, position): what callers pass
WorkerCount = int | str | tuple[cst.FunctionDef, str, int | None] | None


@dataclass
class Workers:
    """A loader's `num_workers` as the file shows it: the values it may take
    (an int, an argparse option's name to look up once the file is read, a
    parameter's default), or unknown (a config entry, an argument nobody here sets)."""

    written: str  # `num_workers=...` as written, for the message
    values: list[WorkerCount] = field(default_factory=list)


def assigned_values(expr: cst.BaseExpression, ctx: Context) -> list[cst.BaseExpression]:
    """What a name may hold here: every value assigned to it in its scope
    (`collate = partial(a, ...)` in one branch, `partial(b, ...)` in the other)."""
    name = dotted_name(expr)
    site = ctx.binding_site(name) if name else None
    found = []
    while site is not None:
        found.append(site.value)
        site = site.previous
    values = []
    seen: set[int] = set()  # `f = self.f` where `self.f = a if ... else f`: a cycle
    for value in found or [expr]:
        value = ctx.resolve(value)
        while isinstance(value, cst.IfExp) and id(value) not in seen:
            seen.add(id(value))  # `a if x else b`, or `if x: f = a else: f = b`
            values.append(ctx.resolve(value.body))
            value = ctx.resolve(value.orelse)
        values.append(value)
    return values


def collate_is_identity(loader: cst.Call, ctx: Context) -> bool:
    """`collate_fn=lambda x: x`, `collate_fn=fn` where a function `fn` defined
    above returns its argument: each batch is the list of the data set's items
    as they are (feature objects, strings), and the loop makes its own tensors."""
    collate = call_arg(loader, "collate_fn", position=COLLATE_POSITION)
    if collate is None:
        return False
    value = collate.value
    if isinstance(value, cst.Lambda):
        return returns_its_argument(value.params, [value.body])
    if not isinstance(value, cst.Name) or ctx.binding(value.value) is not None:
        return False
    return any(isinstance(info.node, cst.FunctionDef) and info.name == value.value
               and returns_its_argument(info.node.params, info.node.body.body)
               for info in ModuleIndex.of(ctx).functions.values())


class _TensorKind(NamedTuple):
    """How code spells a tensor of one kind of number: a conversion method
    (`x.long()`), a dtype (`.to(torch.long)`, `dtype=torch.long`), a factory."""

    methods: frozenset[str]
    dtypes: frozenset[str]
    factories: frozenset[str]


_INTEGERS = _TensorKind(frozenset({"long", "int", "short"}), INTEGER_DTYPES, INTEGER_FACTORIES)
_FLOATS = _TensorKind(frozenset({"float", "half", "double", "bfloat16"}), FLOAT_DTYPES,
                      FLOAT_FACTORIES)


def _built_as(value: cst.BaseExpression, ctx: Context, kind: _TensorKind) -> bool:
    """A tensor built as `kind`, through names bound to one."""
    value = ctx.resolve(value)
    if not isinstance(value, cst.Call):
        return False
    func = value.func
    if isinstance(func, cst.Attribute) and func.attr.value in kind.methods and not value.args:
        return True
    if isinstance(func, cst.Attribute) and func.attr.value == "to" and value.args:
        return ctx.qualify(value.args[0].value) in kind.dtypes
    dtype = call_arg(value, "dtype")
    if dtype is not None:
        return ctx.qualify(dtype.value) in kind.dtypes
    return ctx.qualify(func) in kind.factories


def integer_tensor(value: cst.BaseExpression, ctx: Context) -> bool:
    """A tensor built as integers (`torch.arange(n)`, `ids.long()`,
    `torch.tensor(x, dtype=torch.long)`): token ids and indices, a few bytes a
    sample, whose copy pinning barely speeds."""
    return _built_as(value, ctx, _INTEGERS)


def float_tensor(value: cst.BaseExpression, ctx: Context) -> bool:
    """A tensor built as floating point (`torch.randn(n, 3, 32, 32)`,
    `torch.from_numpy(x).float()`, `dtype=torch.float32`): samples, features,
    pixels."""
    return _built_as(value, ctx, _FLOATS)


def float_batches(dataset: cst.BaseExpression | None, ctx: Context) -> bool:
    """A `TensorDataset` with a floating-point tensor among its own: its
    batches carry samples or feature rows (issue 25: worth pinning)."""
    if not isinstance(dataset, cst.Call) or ctx.qualify(dataset.func) not in TENSOR_DATASETS:
        return False
    return any(arg.star == "" and float_tensor(arg.value, ctx) for arg in dataset.args)


def integer_batches(dataset: cst.BaseExpression | None, ctx: Context) -> bool:
    """A `TensorDataset` whose every tensor holds integers: its batches are ids
    or indices, not floating-point samples (issue 25: not worth pinning)."""
    if not isinstance(dataset, cst.Call) or ctx.qualify(dataset.func) not in TENSOR_DATASETS:
        return False
    tensors = [arg.value for arg in dataset.args]
    return bool(tensors) and all(arg.star == "" for arg in dataset.args) \
        and all(integer_tensor(tensor, ctx) for tensor in tensors)


def code_of(node: cst.CSTNode, limit: int = 40) -> str:
    """The node as written, on one line, cut to `limit` characters."""
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class LoaderArguments:
    """What the loaders of one file are given: how many worker processes they
    start, read while the walk is at the loader (`workers`) and settled once
    the file is read (`resolved`: argparse defaults, what callers pass); and
    whether their memory is pinned (`pin_memory`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.index = ModuleIndex.of(ctx)
        #: argparse options of this file: dest -> default (`--workers`, default=4)
        self.option_defaults: dict[str, cst.BaseExpression | None] = {}
        #: names of dicts changed after they were built (`kw["pin_memory"] = True`,
        #: `kw.update(...)`): what a `**kw` of them holds is not the literal
        self.changed_dicts: set[str] = set()

    @classmethod
    def of(cls, ctx: Context) -> LoaderArguments:
        return ctx.shared(cls)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument":
            self._note_option(node)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in _DICT_CHANGES:
            self.changed_dicts.add(dotted_name(node.func.value) or "")

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Subscript):
                self.changed_dicts.add(dotted_name(target.target.value) or "")

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.changed_dicts.add(dotted_name(node.target) or "")  # `kw |= {...}`

    def spread_dicts(self, expr: cst.BaseExpression) -> list[cst.Dict | None]:
        """The dicts `**expr` may unpack, when this file builds them as
        literals and changes them nowhere: one per value it may hold (None: a
        value that is not such a dict)."""
        if (dotted_name(expr) or "") in self.changed_dicts:
            return [None]
        found: list[cst.Dict | None] = []
        for value in assigned_values(expr, self.ctx):
            branches = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
            found += [branch if isinstance(branch, cst.Dict) else None for branch in branches]
        return found

    def pin_memory(self, loader: cst.Call) -> tuple[str, str]:
        """Whether `loader` pins its batches, and how the call says so:
        ("set", ...): True, or decided at run time (`device.type == "cuda"`);
        ("false", written): `pin_memory=False`; ("missing", written): not
        given, also not in a `**kw` dict this file builds; ("unknown", ...):
        it may come with `**kwargs` or `*args` this file does not show."""
        arg = call_arg(loader, "pin_memory", position=PIN_MEMORY_POSITION)
        if arg is not None:
            return ("false", "DataLoader(..., pin_memory=False)") \
                if literal_bool(arg.value) is False else ("set", "")
        spread = [a.value for a in loader.args if a.star == "**"]
        if not spread:
            return "missing", "DataLoader(...) without pin_memory"
        entries = [None if d is None or not all(  # `{**base, ...}`: may hold it
            isinstance(e, cst.DictElement) for e in d.elements) else next(
            (e.value for e in d.elements if isinstance(e, cst.DictElement)
             and string_value(e.key) == "pin_memory"), _ABSENT)
            for expr in spread for d in self.spread_dicts(expr)]
        written = f"DataLoader(..., **{code_of(spread[0])})"
        if any(e is None or (e is not _ABSENT and literal_bool(e) is not False)
               for e in entries):
            return "unknown", ""  # or set: a dict of unknown make, or True
        if any(e is not _ABSENT for e in entries):
            return "false", f"{written} with pin_memory=False"
        return "missing", f"{written} without pin_memory"

    def workers(self, node: cst.Call) -> Workers:
        """The `num_workers` of the loader call `node`, which the walk is at."""
        arg = call_arg(node, "num_workers", position=_WORKERS_POSITION)
        if arg is not None:
            written = code_of(arg.value)
            return Workers(written, self._worker_values(arg.value))
        spread = [a.value for a in node.args if a.star == "**"]
        if spread:  # DataLoader(ds, **kwargs)
            return Workers(f"**{code_of(spread[0])}", self._values_in_kwargs(spread[0]))
        if has_star_args(node):
            return Workers("*args", [None])
        return Workers("the default 0", [0])

    def _worker_values(self, expr: cst.BaseExpression, depth: int = 0) -> list[WorkerCount]:
        """The values `num_workers=expr` may take, as far as this file shows them."""
        if depth > 6:
            return [None]
        if isinstance(expr, cst.Integer):
            return [int(expr.evaluated_value)]
        if isinstance(expr, cst.IfExp):
            return (self._worker_values(expr.body, depth + 1)
                    + self._worker_values(expr.orelse, depth + 1))
        if isinstance(expr, cst.Call):
            function_name = dotted_name(expr.func) or ""
            if function_name.rsplit(".", 1)[-1] == "cpu_count":
                return [1]  # os.cpu_count(), multiprocessing.cpu_count()
            values = [v for arg in expr.args for v in self._worker_values(arg.value, depth + 1)]
            if function_name == "int" and values:
                return values
            counts = [v for v in values if isinstance(v, int)]
            if function_name in ("min", "max") and values and len(counts) == len(values):
                return [min(counts) if function_name == "min" else max(counts)]
            return [None]
        name = dotted_name(expr)
        if name is None:
            return [None]
        site = self.ctx.binding_site(name)
        if site is not None:
            values = []
            while site is not None:  # every assignment in its scope: `if ...: n = 4 else: n = 0`
                values += ([None] if site.unpacked_from is not None
                           else self._worker_values(site.value, depth + 1))
                site = site.previous
            return values
        parameter = self._parameter(name)
        if parameter is not None:
            function, param, position = parameter
            default: list[WorkerCount] = [None] if param.default is None \
                else self._worker_values(param.default, depth + 1)
            return default + [(function, name, position)]  # and what callers here pass
        if "." in name and not name.startswith(("self.", "cls.")):
            return [name.rsplit(".", 1)[-1]]  # `args.workers`: an argparse option, looked up later
        return [None]

    def _values_in_kwargs(self, expr: cst.BaseExpression) -> list[WorkerCount]:
        """`num_workers` inside `**kwargs`, when `kwargs` is a dict this file builds
        (`{'num_workers': 1, 'pin_memory': True} if args.cuda else {}`)."""
        values: list[WorkerCount] = []
        for branch in self.spread_dicts(expr):
            if branch is not None:
                entry = next((e for e in branch.elements if isinstance(e, cst.DictElement)
                              and string_value(e.key) == "num_workers"), None)
                values += self._worker_values(entry.value) if entry else [0]
            else:
                values.append(None)
        return values

    def _parameter(self, name: str) -> tuple[cst.FunctionDef, cst.Param, int | None] | None:
        """The enclosing function that has `name` as a parameter, the parameter,
        and its position for callers (None: keyword only, or a method)."""
        for scope in reversed(self.ctx.scopes):
            if isinstance(scope.node, cst.FunctionDef):
                params = scope.node.params
                positional = (*params.posonly_params, *params.params)
                for position, param in enumerate(positional):
                    if param.name.value == name:
                        method = self.index.info(scope.node)
                        return scope.node, param, None if method and method.class_name else position
                for param in params.kwonly_params:
                    if param.name.value == name:
                        return scope.node, param, None
        return None

    def _note_option(self, node: cst.Call) -> None:
        """`parser.add_argument('-j', '--workers', default=4, type=int)`."""
        flags = [text for arg in node.args if arg.keyword is None
                 for text in [string_value(arg.value)] if text]
        dest = call_arg(node, "dest")
        if dest is not None:
            names = [string_value(dest.value) or ""]
        else:
            long = [f for f in flags if f.startswith("--")] or flags
            names = [long[0].lstrip("-").replace("-", "_")] if long else []
        default = call_arg(node, "default")
        for name in names:
            self.option_defaults[name] = default.value if default else None

    def resolved(self, workers: Workers) -> list[int | None]:
        """The worker counts, with argparse options replaced by their defaults
        and parameters by what this file's callers pass (once the file is read)."""
        values: list[int | None] = []
        for value in workers.values:
            if isinstance(value, str):
                values.append(self._option_default(value))
            elif isinstance(value, tuple):
                values.extend(self._passed_by_callers(*value))
            else:
                values.append(value)
        return values

    def _option_default(self, dest: str) -> int | None:
        default = self.option_defaults.get(dest)
        return int(default.evaluated_value) if isinstance(default, cst.Integer) else None

    def _passed_by_callers(self, function: cst.FunctionDef, name: str,
                           position: int | None) -> list[int | None]:
        """`make_loader(ds, num_workers=8)`: literals, argparse options, else unknown."""
        info = self.index.info(function)
        values: list[int | None] = []
        for site in self.index.call_sites(info) if info else ():
            arg = call_arg(site.node, name, position)
            if arg is None:
                continue
            if isinstance(arg.value, cst.Integer):
                values.append(int(arg.value.evaluated_value))
            elif isinstance(arg.value, cst.Attribute):
                values.append(self._option_default(arg.value.attr.value))
            else:
                values.append(None)
        return values
