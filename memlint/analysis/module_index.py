"""Module-wide facts: the functions and classes a file defines, and every call
site with the grad mode in force there.

Rules that follow calls across a file read this: MEM002 walks from DataLoader
worker entry points into the helpers they call, MEM004 asks whether every
caller of an eval helper already disabled grad. It is filled during the
engine's single walk (a rule asks `ModuleIndex.of(ctx)` in its constructor;
the engine walks shared analyses before the rules), so it costs a few
isinstance checks per function and call, and no second pass or parse.
Resolution is by name within the file, as a reader would do it: `helper(x)`,
`self.method(x)` (the class and its local bases and subclasses), `Class.method(x)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.analysis.torch_api import COMPILERS, TRACERS

PARTIALS = {"functools.partial", "functools.partialmethod"}
#: nn.Module's own methods: `obj.eval()` on an object of unknown class is one of
#: these, not whichever class of the file defines a method of that name.
_MODULE_API = {"eval", "train", "to", "cuda", "cpu", "half", "float", "double", "zero_grad",
               "parameters", "state_dict", "load_state_dict", "requires_grad_", "apply"}


@dataclass(eq=False)
class FunctionInfo:
    """A `def` or a lambda, with the calls made directly in its body."""

    node: cst.FunctionDef | cst.Lambda
    name: str
    class_name: str | None = None
    parent: FunctionInfo | None = None
    calls: list[CallSite] = field(default_factory=list)
    children: list[FunctionInfo] = field(default_factory=list)
    #: decorated with a project's own grad-disabling wrapper (`@smart_inference_mode()`)
    grad_off_decorator: bool = False

    @property
    def qualname(self) -> str:
        return f"{self.class_name}.{self.name}" if self.class_name else self.name


@dataclass(eq=False)
class ClassInfo:
    node: cst.ClassDef
    name: str
    bases: list[cst.BaseExpression]
    methods: dict[str, FunctionInfo] = field(default_factory=dict)


@dataclass(eq=False)
class CallSite:
    node: cst.Call
    caller: FunctionInfo | None  # None at module or class level
    class_name: str | None  # the class `self` means here
    grad_disabled: bool


class ModuleIndex:
    """Functions, classes and call sites of one module, gathered during the walk."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.functions: dict[cst.CSTNode, FunctionInfo] = {}
        self.functions_by_name: dict[str, list[FunctionInfo]] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.calls: list[CallSite] = []
        #: functions named as values (`partial(evaluate)`, `pool.map(predict, xs)`):
        #: called from places this file does not show
        self.escaped: list[tuple[cst.BaseExpression, str | None]] = []
        #: the same, with the call each is handed to
        self._handed: list[tuple[cst.BaseExpression, CallSite]] = []
        self._stack: list[FunctionInfo | ClassInfo] = []
        self._grad_off_entries = 0
        #: per class name: (how many classes were known then, its subclasses)
        self._subclasses: dict[str, tuple[int, list[ClassInfo]]] = {}
        self._grad_off_by_callers: set[FunctionInfo] | None = None
        self._sites_by_callee: dict[FunctionInfo, list[CallSite]] | None = None

    @classmethod
    def of(cls, ctx: Context) -> ModuleIndex:
        """The one index of this module, created on first use."""
        return ctx.shared(cls)

    def close(self) -> None:
        """Unlink functions from their call sites and children (see `Context.close`)."""
        for info in self.functions.values():
            info.calls.clear()
            info.children.clear()

    # -- the walk ---------------------------------------------------------
    @property
    def current(self) -> FunctionInfo | None:
        """The innermost function or lambda being walked."""
        for entry in reversed(self._stack):
            if isinstance(entry, FunctionInfo):
                return entry
        return None

    @property
    def current_class(self) -> str | None:
        """The class whose body or method we are in (what `self` means)."""
        for entry in reversed(self._stack):
            if isinstance(entry, ClassInfo):
                return entry.name
            if isinstance(entry, FunctionInfo) and entry.class_name:
                return entry.class_name
        return None

    @property
    def grad_disabled(self) -> bool:
        """`ctx.grad_disabled`, or inside a function whose decorator is a
        project's wrapper around no_grad / inference_mode."""
        return self.ctx.grad_disabled or self._grad_off_entries > 0

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        info = ClassInfo(node, node.name.value,
                         [arg.value for arg in node.bases if arg.keyword is None])
        self.classes.setdefault(info.name, info)
        self._stack.append(info)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        owner = self._stack[-1] if self._stack else None
        info = FunctionInfo(node, node.name.value, parent=self.current,
                            grad_off_decorator=any(
                                self.ctx.decorator_grad_mode(d.decorator) is False
                                for d in node.decorators))
        if isinstance(owner, ClassInfo):
            info.class_name = owner.name
            owner.methods.setdefault(info.name, info)
        else:
            self.functions_by_name.setdefault(info.name, []).append(info)
        self._enter(info)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._enter(FunctionInfo(node, "<lambda>", parent=self.current))

    def _enter(self, info: FunctionInfo) -> None:
        if info.parent is not None:
            info.parent.children.append(info)
        self.functions[info.node] = info
        self._stack.append(info)
        if info.grad_off_decorator:
            self._grad_off_entries += 1

    def _leave_function(self) -> None:
        info = self._stack.pop()
        assert isinstance(info, FunctionInfo)  # a function's own entry, pushed by `_enter`
        if info.grad_off_decorator:
            self._grad_off_entries -= 1

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._leave_function()

    def leave_Lambda(self, node: cst.Lambda) -> None:
        self._leave_function()

    def visit_Call(self, node: cst.Call) -> None:
        caller = self.current
        site = CallSite(node, caller, self.current_class, self.grad_disabled)
        self.calls.append(site)
        if caller is not None:
            caller.calls.append(site)
        compiles = None
        for arg in node.args:
            if isinstance(arg.value, (cst.Name, cst.Attribute)):
                self.escaped.append((arg.value, site.class_name))
                if compiles is None:
                    called = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
                    compiles = called in ("compile", "script") \
                        and self.ctx.qualify(node.func) in COMPILERS
                if not compiles:  # compiled, it runs where the result is called
                    self._handed.append((arg.value, site))

    # -- queries (complete once the walk is over) -------------------------
    def info(self, node: cst.CSTNode) -> FunctionInfo | None:
        return self.functions.get(node)

    def local_class(self, expr: cst.BaseExpression | None) -> ClassInfo | None:
        """The class defined in this module that `expr` names (`Foo`)."""
        if isinstance(expr, cst.Name):
            return self.classes.get(expr.value)
        return None

    def lineage(self, class_name: str) -> Iterator[ClassInfo]:
        """The class and its bases defined in this module, nearest first."""
        seen: set[str] = set()
        pending = [class_name]
        while pending:
            name = pending.pop(0)
            info = self.classes.get(name)
            if info is None or name in seen:
                continue
            seen.add(name)
            yield info
            pending.extend(b.value for b in info.bases if isinstance(b, cst.Name))

    def subclasses(self, class_name: str) -> Iterator[ClassInfo]:
        known = self._subclasses.get(class_name)
        if known is None or known[0] != len(self.classes):
            known = self._subclasses[class_name] = (len(self.classes), [
                info for info in self.classes.values()
                if info.name != class_name
                and any(c.name == class_name for c in self.lineage(info.name))])
        yield from known[1]

    def methods_named(self, class_name: str, method: str) -> list[FunctionInfo]:
        """`self.method` inside `class_name`: its own or inherited definition,
        and overrides in subclasses of this module."""
        found = []
        for info in (*self.lineage(class_name), *self.subclasses(class_name)):
            if method in info.methods:
                found.append(info.methods[method])
        return found

    def resolve_reference(self, expr: cst.BaseExpression, class_name: str | None,
                          loose: bool = False) -> list[FunctionInfo]:
        """The functions of this module that `expr` (a callee or a value) names.

        `loose` also matches `obj.method` against every class's method of
        that name, for questions where a wrong match only makes a rule quieter.
        """
        if isinstance(expr, cst.Name):
            return list(self.functions_by_name.get(expr.value, ()))
        if isinstance(expr, cst.Call) and self.ctx.names.qualify(expr.func) in PARTIALS \
                and expr.args:
            return self.resolve_reference(expr.args[0].value, class_name, loose)
        if not isinstance(expr, cst.Attribute):
            return []
        method = expr.attr.value
        owner = expr.value
        if isinstance(owner, cst.Name) and owner.value in ("self", "cls") and class_name:
            return self.methods_named(class_name, method)
        if isinstance(owner, cst.Call) and dotted_name(owner.func) == "super" and class_name:
            return [f for c in list(self.lineage(class_name))[1:]
                    for f in [c.methods.get(method)] if f]
        if isinstance(owner, cst.Name) and owner.value in self.classes:
            return self.methods_named(owner.value, method)
        if loose:
            return [c.methods[method] for c in self.classes.values() if method in c.methods]
        return []

    def callees(self, site: CallSite, loose: bool = False) -> list[FunctionInfo]:
        return self.resolve_reference(site.node.func, site.class_name, loose)

    def call_sites(self, function: FunctionInfo) -> list[CallSite]:
        """The calls in this module that may run `function` (methods matched by name)."""
        if self._sites_by_callee is None:
            self._sites_by_callee = {}
            for site in self.calls:
                # `self.embedder.eval()` is nn.Module's eval, not a project
                # class's own `eval` method that happens to share the name
                loose = not (isinstance(site.node.func, cst.Attribute)
                             and site.node.func.attr.value in _MODULE_API)
                for callee in self.callees(site, loose=loose):
                    self._sites_by_callee.setdefault(callee, []).append(site)
        return self._sites_by_callee.get(function, [])

    def only_traced(self, function: FunctionInfo) -> bool:
        """Whether `function` is never called here, only handed to a tracer or
        exporter (`torch.onnx.export(forward_for_export, dummy, path)`): it
        runs once, on an example input, to record its operators."""
        if self.call_sites(function):
            return False
        handed = [site for expr, site in self._handed
                  if function in self.resolve_reference(expr, site.class_name, loose=True)]
        return bool(handed) and all(self.ctx.qualify(site.node.func) in TRACERS
                                    for site in handed)

    def forward_disables_grad(self, class_name: str | None) -> bool:
        """A class of this file whose `forward` is decorated `@torch.no_grad()`."""
        info = self.classes.get(class_name) if class_name else None
        forward = info.methods.get("forward") if info is not None else None
        return forward is not None and forward.grad_off_decorator

    def init_turns_grad_off(self, class_name: str) -> bool:
        """`torch.set_grad_enabled(False)` called as a statement in the class's
        `__init__` (YOLOv6's `Inferer`): grad is off for the thread from the
        moment the object exists, so its methods run without autograd."""
        info = self.classes.get(class_name)
        init = info.methods.get("__init__") if info is not None else None
        if init is None or type(init.node) is not cst.FunctionDef:  # methods are all defs
            return False
        for line in init.node.body.body:
            if type(line) is not cst.SimpleStatementLine:
                continue
            for statement in line.body:
                if type(statement) is cst.Expr and self.ctx.switched_grad_mode(statement) is False:
                    return True
        return False

    def runs_grad_off(self, node: cst.CSTNode) -> bool:
        """A function (`eval_one_batch(...)`) whose every call in this module
        is under `torch.no_grad()`, or in a function of which that holds: its
        values carry no history, whatever its own body says."""
        info = self.info(node) if isinstance(node, cst.FunctionDef) else None
        return info is not None and self.grad_disabled_by_callers(info)

    def grad_disabled_by_callers(self, function: FunctionInfo) -> bool:
        """Whether every call of `function` in this module runs with grad
        disabled: under no_grad at the call, or from a function of which that
        holds in turn. A function with no call site here, or one passed around
        as a value, may be called from anywhere: False."""
        return function in self._grad_off_by_callers_set()

    def entered_from(self, function: FunctionInfo
                     ) -> tuple[list[FunctionInfo], list[FunctionInfo]] | None:
        """How other files can run `function` with grad on, when every call
        of it here that runs with grad on comes from top-level functions:
        (the functions no call here reaches, which must be called from
        elsewhere, each time with grad off; the functions on the way,
        `function` among them, which other files may call too). DHC's
        `test_single_case`, called by `test_all_case` only, which `test.py`
        calls under `torch.no_grad()`. None when a path starts at module
        level, in a method or a nested function, or in one named as a value
        and not handed to a call (it may run anywhere)."""
        sites = self._sites_with_handed()
        off = self._grad_off_by_callers_set()
        loose = {f for expr, class_name in self.escaped
                 for f in self.resolve_reference(expr, class_name, loose=True)}
        loose -= {f for expr, site in self._handed
                  for f in self.resolve_reference(expr, site.class_name, loose=True)}
        roots: list[FunctionInfo] = []
        passed: list[FunctionInfo] = []
        seen, todo = {function}, [function]
        while todo:
            current = todo.pop()
            if current in loose or current.class_name is not None or current.parent is not None:
                return None
            calls = sites.get(current, [])
            (passed if calls else roots).append(current)
            for site in calls:
                if site.grad_disabled or site.caller in off:
                    continue
                if site.caller is None:
                    return None
                if site.caller not in seen:
                    seen.add(site.caller)
                    todo.append(site.caller)
        return roots, passed

    def ways_in(self, function: FunctionInfo) -> tuple[FunctionInfo, ...] | None:
        """The functions and methods of this module through which other code
        runs `function` with grad on: it, or the callers here with no caller
        of their own that reach it. None when the module's top level runs it
        so (a script's `__main__` block). Unlike `entered_from`, methods are
        ways in too (other files call them by name); a function handed to a
        call as a value is not followed here."""
        roots: list[FunctionInfo] = []
        seen, todo = {function}, [function]
        while todo:
            current = todo.pop()
            callers = [site for site in self.call_sites(current) if not site.grad_disabled
                       and (site.caller is None or not self.grad_disabled_by_callers(site.caller))]
            if any(site.caller is None for site in callers):
                return None
            roots += [] if callers else [current]
            for site in callers:
                if site.caller is not None and site.caller not in seen:
                    seen.add(site.caller)
                    todo.append(site.caller)
        return tuple(roots)

    def _grad_off_by_callers_set(self) -> set[FunctionInfo]:
        if self._grad_off_by_callers is None:
            self._grad_off_by_callers = self._solve_grad_off_by_callers()
        return self._grad_off_by_callers

    def _sites_with_handed(self) -> dict[FunctionInfo, list[CallSite]]:
        """Each function's call sites, a call it is handed to among them (a
        closure or bound method as a callback, `run_loop(loader,
        self._eval_step)`, runs in that call's grad mode)."""
        sites = {function: list(self.call_sites(function)) for function in self.functions.values()}
        for expr, site in self._handed:
            for function in self.resolve_reference(expr, site.class_name, loose=True):
                sites.setdefault(function, []).append(site)
        return sites

    def _solve_grad_off_by_callers(self) -> set[FunctionInfo]:
        sites = self._sites_with_handed()
        off: set[FunctionInfo] = set()
        changed = True
        while changed:
            changed = False
            for function, calls in sites.items():
                if not calls or function in off:
                    continue
                if all(s.grad_disabled or s.caller in off for s in calls):
                    off.add(function)
                    changed = True
        return off

    def reachable(self, entry: FunctionInfo, depth: int = 3) -> dict[FunctionInfo, int]:
        """Functions `entry` runs: itself and the lambdas in it, and the
        same-module functions it calls, `depth` calls deep. Maps each to its
        call depth."""
        found: dict[FunctionInfo, int] = {}
        frontier = [entry]
        for level in range(depth + 1):
            next_frontier: list[FunctionInfo] = []
            for function in frontier:
                for unit in (function, *_lambdas_in(function)):
                    if unit in found:
                        continue
                    found[unit] = level
                    for site in unit.calls:
                        next_frontier.extend(f for f in self.callees(site) if f not in found)
            frontier = next_frontier
        return found


def _lambdas_in(function: FunctionInfo) -> Iterator[FunctionInfo]:
    for child in function.children:
        if isinstance(child.node, cst.Lambda):
            yield child
            yield from _lambdas_in(child)
