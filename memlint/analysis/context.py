"""What the traversal knows about the place it is at, shared by every rule.

The walker keeps this up to date as it enters and leaves nodes, so a rule asks
`ctx.in_loop` or `ctx.grad_disabled` instead of re-deriving it. Bindings are
recorded in source order, so `ctx.binding("device")` is the last value assigned
before the current point (flow-insensitive within branches, which is what a
reader of the code would assume too).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import libcst as cst

from memlint.analysis.names import ImportTable, dotted_name, literal_bool
from memlint.analysis.project import ModuleFacts
from memlint.analysis.torch_api import GRAD_MODE_SETTERS, GRAD_OFF_CONTEXTS, GRAD_ON_CONTEXTS


class SharedAnalysis(Protocol):
    """A module-wide analysis: one per file, made from the file's context."""

    def __init__(self, ctx: Context) -> None: ...


AnalysisT = TypeVar("AnalysisT", bound=SharedAnalysis)
#: the context's bookkeeping for one node type; the node is of the type the
#: hook is filed under in `_ENTER` / `_LEAVE`
ContextHook = Callable[["Context", Any], None]
#: a loop whose body runs per iteration
Loop = cst.For | cst.While


class BindingSite(NamedTuple):
    """Where a name got its current value: the loops of the function around the
    assignment (to tell an accumulator rebuilt every iteration from one that
    outlives them), the grad mode then, and for `a, b = f(x)` the unpacked value
    and position (the binding itself is unknown). `previous` is the site this
    one replaced, so `loss = loss / steps` can be followed to the first `loss`.

    A named tuple, as immutable as the frozen dataclass it was and compared
    alike, made in a third of the time (one per assignment)."""

    value: cst.BaseExpression
    loops: tuple[Loop, ...]
    grad_enabled: bool
    unpacked_from: cst.BaseExpression | None = None
    unpacked_index: int | None = None
    previous: BindingSite | None = None
    #: the `if`/`elif`/`else` chains around the assignment, each with the branch it is in
    branches: tuple[tuple[cst.If, cst.CSTNode], ...] = ()
    #: for `a, b = f(x)`, how many names the value was unpacked into
    unpacked_length: int | None = None


@dataclass
class Scope:
    """A module, class or function body: its bindings and its own grad mode."""

    node: cst.CSTNode
    bindings: dict[str, cst.BaseExpression] = field(default_factory=dict)
    sites: dict[str, BindingSite] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    loop_targets: dict[str, cst.For] = field(default_factory=dict)
    #: innermost last: (enabled, chosen), chosen when the code set the mode
    #: itself (`no_grad`, `enable_grad`, `set_grad_enabled(training)`), not
    #: left it at autograd's default
    grad: list[tuple[bool, bool]] = field(default_factory=list)


class Context:
    """Traversal state: scopes, loops, grad mode, ancestors."""

    def __init__(self, names: ImportTable, path: str = "<stdin>") -> None:
        self.names = names
        #: the file being checked (a rule may treat test files differently)
        self.path = path
        #: module-wide analyses shared by rules (one instance per type), walked
        #: before the rules so their facts are current when a rule visits a node
        self.analyses: dict[type, object] = {}
        #: what this file tells the rest of the project, filled in during the walk
        #: (None where a file is walked on its own, outside the engine)
        self.facts: ModuleFacts | None = None
        self.ancestors: list[cst.CSTNode] = []
        #: id of each walked node -> the top-level statement it is in; kept
        #: only when asked for (a tree built from pieces: `engine/chunks.py`)
        self.top_statements: dict[int, cst.CSTNode] | None = None
        self.scopes: list[Scope] = []
        self._if_depth = 0  # `if` statements around the current node
        #: `qualify`'s answers, kept while neither the scopes nor the import
        #: table change (`_changes` + `names.changes` is the same): every rule
        #: asks it of the same call's function, ~8 times a call
        self._changes = 0
        self._qualified: dict[int, tuple[cst.BaseExpression | None, str | None]] = {}
        self._qualified_at = -1

    def shared(self, analysis_type: type[AnalysisT]) -> AnalysisT:
        """The one `analysis_type` of this file, made on first use (a rule asks
        for it in its constructor; the engine walks analyses before rules)."""
        analysis = self.analyses.get(analysis_type)
        if analysis is None:
            made = self.analyses[analysis_type] = analysis_type(self)
            return made
        return cast(AnalysisT, analysis)  # filed under its own type

    def close(self) -> None:
        """Drop the analyses, breaking their reference cycles (an analysis refers
        back to `ctx`; the index links functions and call sites both ways).

        The check runs with the cyclic collector paused, so a cycle that holds
        nodes keeps the file's tree alive until the collector is back, which
        then spends ~10% of a parse walking it; broken, reference counting
        frees the tree at once."""
        for analysis in self.analyses.values():
            close = getattr(analysis, "close", None)
            if close is not None:
                close()
        self.analyses.clear()
        self._qualified.clear()

    # -- queries rules use ------------------------------------------------
    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    @property
    def function(self) -> cst.FunctionDef | None:
        # exact types here and below: these libcst classes have no subclasses,
        # and an isinstance miss against one goes through ABCMeta (~250 ns)
        for scope in reversed(self.scopes):
            if type(scope.node) is cst.FunctionDef:
                return scope.node
        return None

    @property
    def class_def(self) -> cst.ClassDef | None:
        """The class whose body (or method) we are in."""
        for scope in reversed(self.scopes):
            if type(scope.node) is cst.ClassDef:
                return scope.node
        return None

    @property
    def loops(self) -> list[Loop]:
        """Loops of the current function (or module) enclosing this point."""
        return self.scope.loops

    @property
    def in_loop(self) -> bool:
        return bool(self.scope.loops)

    @property
    def grad_disabled(self) -> bool:
        """True under `with torch.no_grad()`, `@torch.inference_mode()`,
        `torch.set_grad_enabled(False)` ... in this function or one enclosing it."""
        for scope in reversed(self.scopes):
            if scope.grad:
                return not scope.grad[-1][0]
        return False

    @property
    def grad_chosen(self) -> bool:
        """True where the code sets the grad mode itself: under `no_grad`,
        `enable_grad`, or `set_grad_enabled(is_train)`, whose argument decides
        at run time. Its author decided whether autograd records there."""
        for scope in reversed(self.scopes):
            if scope.grad:
                return scope.grad[-1][1]
        return False

    @property
    def in_test_file(self) -> bool:
        """A test module: `test_*.py`, `*_test.py`, `tests.py`, `conftest.py`, or
        any file under a `tests` folder (unittest suites name files freely)."""
        return is_test_path(self.path)

    @property
    def in_pytest_test(self) -> bool:
        """In a `test_*` function (or a method of a `Test*` class) of a test
        file: a unit test, which builds its own small model and data. A
        research repository's `test_classification.py` script, which evaluates
        the trained model, has no such function around its code."""
        if not self.in_test_file:
            return False
        function, class_def = self.function, self.class_def
        return (function is not None and function.name.value.startswith("test_")) or \
            (class_def is not None and class_def.name.value.startswith("Test"))

    def in_cpu_branch(self) -> bool:
        """Inside the branch of an `if` on CUDA that runs without it: the `else`
        of `if use_gpu:` / `if torch.cuda.is_available():`, the body of
        `if not args.cuda:`."""
        for i, ancestor in enumerate(self.ancestors[:-1]):
            if type(ancestor) is not cst.If:
                continue
            test, negated = ancestor.test, False
            if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                test, negated = test.expression, True
            if not _tests_for_cuda(test):
                continue
            in_else = self.ancestors[i + 1] is ancestor.orelse
            if in_else != negated:
                return True
        return False

    def in_version_gate(self) -> bool:
        """Inside either branch of an `if` on the installed PyTorch's version
        (`if LooseVersion(torch.__version__) > LooseVersion('0.3.1'):`): code
        for one release line, its author's shim for the other."""
        return any(type(ancestor) is cst.If and _tests_torch_version(ancestor.test)
                   for ancestor in self.ancestors[:-1])

    @property
    def parent(self) -> cst.CSTNode | None:
        return self.ancestors[-2] if len(self.ancestors) > 1 else None

    def under_main_guard(self) -> bool:
        """Inside `if __name__ == "__main__":` at the top level: code that runs
        only when the file is the program, so a name it binds is no other
        module's to import."""
        ancestors = self.ancestors
        guard = ancestors[1] if len(ancestors) > 2 else None  # the module's own statement
        return type(guard) is cst.If and ancestors[2] is guard.body and _is_main_test(guard.test)

    def qualify(self, node: cst.BaseExpression | None) -> str | None:
        """The imported name an expression refers to, unless a local variable of
        an enclosing function shadows the import (`for data in loader:`)."""
        memo = self._qualified
        now = self._changes + self.names.changes
        if now != self._qualified_at:
            memo.clear()
            self._qualified_at = now
        else:
            known = memo.get(id(node))
            if known is not None and known[0] is node:  # the node is kept, so its id is its own
                return known[1]
        qualified = memo[id(node)] = (node, self._qualify(node))
        return qualified[1]

    def _qualify(self, node: cst.BaseExpression | None) -> str | None:
        name = dotted_name(node)
        if name is None:
            return None
        qualified = self.names.qualify_name(name)
        if qualified is None:  # most names: nothing to look for in the scopes
            return None
        head = name.partition(".")[0]
        scopes = self.scopes
        for i in range(1, len(scopes)):
            if head in scopes[i].bindings or head in scopes[i].loop_targets:
                return None
        return qualified

    def loop_target(self, name: str) -> cst.For | None:
        """The For loop that binds `name` as its target, if any encloses us."""
        for scope in reversed(self.scopes):
            loop = scope.loop_targets.get(name)
            if loop is not None:
                return loop
        return None

    def binding(self, name: str) -> cst.BaseExpression | None:
        """The value last assigned to `name` (a dotted name such as `self.device`)
        in the innermost scope that has one."""
        for scope in reversed(self.scopes):
            value = scope.bindings.get(name)
            if value is not None:
                return value
        return None

    def binding_site(self, name: str) -> BindingSite | None:
        """Where `name` (plain or dotted) got the value `binding(name)` returns."""
        for scope in reversed(self.scopes):
            if name in scope.bindings:
                return scope.sites.get(name)
        return None

    def branch_values(self, name: str) -> list[cst.BaseExpression]:
        """Every value `name` may hold here: the last one bound, and those
        bound in the other branches of the same `if` chain before it
        (`device = torch.device("cuda", rank)` / `else: device = "cuda"`)."""
        site = self.binding_site(name)
        if site is None:
            value = self.binding(name)
            return [] if value is None else [value]
        values = [site.value]
        while site.previous is not None and other_branch(site.previous.branches, site.branches):
            site = site.previous
            values.append(site.value)
        return values

    def resolve(self, node: cst.BaseExpression, depth: int = 4) -> cst.BaseExpression:
        """Follow `x = <expr>` bindings of plain or dotted names a few steps."""
        seen = 0
        while seen < depth:
            name = dotted_name(node)
            value = self.binding(name) if name else None
            if value is None or value is node:
                return node
            node = value
            seen += 1
        return node

    def grad_mode_of(self, node: cst.BaseExpression) -> bool | None:
        """False for a grad-disabling context expression, True for enable_grad,
        None for anything else. Follows `ctx = torch.no_grad()`, and a name
        bound to grad modes in every branch (`mode = torch.no_grad if compiled
        else torch.inference_mode`, then `@mode()`)."""
        node = self.resolve(node)
        call = node if isinstance(node, cst.Call) else None
        target = self.resolve(call.func) if call is not None else node
        modes = {self._grad_mode_named(choice, call) for choice in either_values(target)}
        return modes.pop() if len(modes) == 1 else None

    def decorator_grad_mode(self, decorator: cst.BaseExpression) -> bool | None:
        """The grad mode a function decorated so runs in: torch's, or False for
        a project's own wrapper named like one (yolov5's `@smart_inference_mode()`)."""
        mode = self.grad_mode_of(decorator)
        return False if mode is None and _named_like_grad_off(decorator) else mode

    def _grad_mode_named(self, target: cst.BaseExpression, call: cst.Call | None) -> bool | None:
        qualified = self.names.qualify(target)
        if qualified in GRAD_OFF_CONTEXTS:
            return False
        if qualified in GRAD_ON_CONTEXTS:
            return True
        if qualified in GRAD_MODE_SETTERS and call is not None and call.args:
            return literal_bool(call.args[0].value)
        return None

    # -- the walker's side ------------------------------------------------
    def enter(self, node: cst.CSTNode) -> None:
        self.ancestors.append(node)
        # dispatch on the exact type: libcst's isinstance checks are slow, and
        # this runs for every node of every file
        handler = _ENTER.get(type(node))
        if handler is not None:
            handler(self, node)

    def leave(self, node: cst.CSTNode) -> None:
        handler = _LEAVE.get(type(node))
        if handler is not None:
            handler(self, node)
        self.ancestors.pop()

    def enter_body(self, node: Loop) -> None:
        """Called when the walker reaches the body of a For/While."""
        self.scope.loops.append(node)
        if type(node) is cst.For:
            for name in _target_names(node.target):
                self.scope.loop_targets[name] = node
                self.scope.bindings.pop(name, None)
                self._changes += 1
                self.scope.sites.pop(name, None)

    def leave_body(self, node: Loop) -> None:
        self.scope.loops.pop()

    def _enter_scope(self, node: cst.Module | cst.ClassDef | cst.Lambda) -> None:
        self.scopes.append(Scope(node))
        self._changes += 1

    def _enter_module(self, node: cst.Module) -> None:
        """A module's top-level imports bind their names before any of its
        functions runs: `torch` imported below a function is `torch` in it
        (medical_mae's `import torch.optim` after `evaluate`). Statements
        above an import still run without it."""
        defined = False
        for statement in node.body:
            defined = defined or type(statement) in (cst.FunctionDef, cst.ClassDef)
            if defined and type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.Import:
                        self.names.add_import(small)
                    elif type(small) is cst.ImportFrom:
                        self.names.add_import_from(small)
        self._enter_scope(node)

    def _enter_function(self, node: cst.FunctionDef) -> None:
        scope = Scope(node)
        for decorator in node.decorators:
            mode = self.decorator_grad_mode(decorator.decorator)
            if mode is not None:
                scope.grad.append((mode, True))
        self.scopes.append(scope)
        self._changes += 1

    def _enter_with(self, node: cst.With) -> None:
        modes = [self.grad_mode_of(item.item) for item in node.items]
        known = [m for m in modes if m is not None]
        if known:
            self.scope.grad.append((known[-1], True))
        else:
            chosen = any(self.sets_grad_mode(item.item) for item in node.items)
            self.scope.grad.append((self._current_grad(), chosen or self.grad_chosen))

    def _leave_scope(self, node: cst.CSTNode) -> None:
        self.scopes.pop()
        self._changes += 1
        if (type(node) is cst.ClassDef or type(node) is cst.FunctionDef) and self.scopes:
            self.scope.bindings.pop(node.name.value, None)

    def _leave_with(self, node: cst.With) -> None:
        self.scope.grad.pop()

    def _leave_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def _leave_ann_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def switched_grad_mode(self, statement: cst.Expr) -> bool | None:
        """The grad mode a bare `torch.set_grad_enabled(False)` (or `True`)
        statement switches to from here on; None for any other statement."""
        call = statement.value
        if isinstance(call, cst.Call) and self.names.qualify(call.func) in GRAD_MODE_SETTERS \
                and call.args:
            return literal_bool(call.args[0].value)
        return None

    def sets_grad_mode(self, node: cst.BaseExpression) -> bool:
        """`torch.set_grad_enabled(...)` whatever its argument (`is_train`,
        `self.training`): the mode is the code's choice, made at run time."""
        node = self.resolve(node)
        return isinstance(node, cst.Call) and bool(node.args) \
            and self.names.qualify(node.func) in GRAD_MODE_SETTERS

    def _leave_expression_statement(self, node: cst.Expr) -> None:
        mode = self.switched_grad_mode(node)
        if mode is not None:
            # a global switch back on is no sign of a need for gradients, as a
            # scoped `with torch.enable_grad():` is (ElegantRL's validation)
            self.scope.grad.append((mode, not mode))
        elif self.sets_grad_mode(node.value):
            self.scope.grad.append((self._current_grad(), True))

    def _current_grad(self) -> bool:
        return not self.grad_disabled

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression,
              unpacked: tuple[cst.BaseExpression, int, int] | None = None) -> None:
        # runs for every assignment target: exact types, no ABC isinstance misses
        if type(target) is cst.Tuple or type(target) is cst.List:
            values = value.elements if type(value) is cst.Tuple or type(value) is cst.List \
                else None
            for i, element in enumerate(target.elements):
                inner = values[i].value if values is not None and i < len(values) else value
                if values is not None:
                    self._bind(element.value, inner)
                else:
                    self._bind(element.value, _UNKNOWN, (value, i, len(target.elements)))
            return
        name = dotted_name(target)
        if name is None:
            return
        scopes = self.scopes
        if len(scopes) == 1 and "." not in name:
            self.names.forget(name)
        innermost = scope = scopes[-1]
        if name.startswith(("self.", "cls.")):
            scope = next((s for s in reversed(scopes) if type(s.node) is cst.ClassDef), scope)
        previous = scope.sites.get(name)
        branches = self.branches() if self._if_depth else ()
        if branches and previous is not None and previous.branches \
                and other_branch(previous.branches, branches):
            # `if cuda: device = "cuda"` / `else: device = "cpu"`: either value may hold
            value = cst.IfExp(test=cst.Name("__memlint_either__"), body=previous.value,
                              orelse=value)
        scope.bindings[name] = value
        self._changes += 1
        unpacked_from, unpacked_index, unpacked_length = unpacked or (None, None, None)
        scope.sites[name] = BindingSite(value, tuple(innermost.loops), not self.grad_disabled,
                                        unpacked_from, unpacked_index, previous, branches,
                                        unpacked_length)

    def branches(self) -> tuple[tuple[cst.If, cst.CSTNode], ...]:
        """The `if`/`elif`/`else` chains the current statement is in (within
        its function), each as its first `if` and the block of the branch taken."""
        found: list[tuple[cst.If, cst.CSTNode]] = []
        ancestors = self.ancestors
        for i in range(len(ancestors) - 1, 0, -1):
            node = ancestors[i]
            node_type = type(node)
            if node_type in _SCOPE_NODES:
                break
            if node_type is cst.IndentedBlock and type(ancestors[i - 1]) in _BRANCH_NODES:
                j = i - 1 if type(ancestors[i - 1]) is cst.If else i - 2
                while j > 0:
                    earlier = ancestors[j - 1]
                    if type(earlier) is not cst.If or earlier.orelse is not ancestors[j]:
                        break
                    j -= 1
                chain = ancestors[j]
                if type(chain) is cst.If:
                    found.append((chain, node))
        return tuple(found)


_UNKNOWN = cst.Name("__memlint_unknown__")
#: exact node types for the hot paths (none of these libcst classes has subclasses)
_SCOPE_NODES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_BRANCH_NODES = frozenset({cst.If, cst.Else})


def either_values(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The values a name may hold where `_bind` joined the assignments of an
    `if`/`elif`/`else` chain into one conditional expression (nested:
    `IfExp(IfExp(a, b), c)`), or `a if x else b` as written; else `[value]`."""
    pending, found = [value], []
    while pending:
        node = pending.pop()
        if isinstance(node, cst.IfExp):
            pending += [node.orelse, node.body]
        else:
            found.append(node)
    return found


def other_branch(before: tuple[tuple[cst.If, cst.CSTNode], ...],
                  now: tuple[tuple[cst.If, cst.CSTNode], ...]) -> bool:
    """Whether two assignments sit in different branches of one `if` chain."""
    taken = {id(chain): block for chain, block in before}
    return any(id(chain) in taken and taken[id(chain)] is not block for chain, block in now)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if type(target) is cst.Tuple or type(target) is cst.List:
        return [n for element in target.elements for n in _target_names(element.value)]
    name = dotted_name(target)
    return [name] if name else []


#: not `test.py`: in research code that is the evaluation script
_TEST_FILE = re.compile(r"(test_.*|.*_test|tests|tests_.*|conftest)\.py$")
_TEST_FOLDERS = {"tests", "testing"}


def is_test_path(path: str) -> bool:
    parts = re.split(r"[\\/]", path)
    return bool(_TEST_FILE.fullmatch(parts[-1])) or any(p in _TEST_FOLDERS for p in parts[:-1])


def _tests_torch_version(test: cst.BaseExpression) -> bool:
    return "torch.__version__" in _EMPTY_MODULE.code_for_node(test)


_EMPTY_MODULE = cst.Module([])


def _tests_for_cuda(test: cst.BaseExpression) -> bool:
    """`use_gpu`, `args.cuda`, `torch.cuda.is_available()`: a test of whether a GPU is used."""
    if isinstance(test, cst.Call):
        test = test.func
    name = (dotted_name(test) or "").lower()
    last = name.rsplit(".", 1)[-1]
    return "cuda" in last or "gpu" in last or name.endswith("cuda.is_available")


def _named_like_grad_off(decorator: cst.BaseExpression) -> bool:
    """A project's own wrapper such as yolov5's `@smart_inference_mode()`."""
    target = decorator.func if isinstance(decorator, cst.Call) else decorator
    last = (dotted_name(target) or "").rsplit(".", 1)[-1].lower()
    return "no_grad" in last or "inference_mode" in last


def _enter_if(ctx: Context, node: cst.If) -> None:
    ctx._if_depth += 1


def _leave_if(ctx: Context, node: cst.If) -> None:
    ctx._if_depth -= 1


_ENTER: dict[type, ContextHook] = {
    cst.Module: Context._enter_module,
    cst.ClassDef: Context._enter_scope,
    cst.Lambda: Context._enter_scope,
    cst.FunctionDef: Context._enter_function,
    cst.With: Context._enter_with,
    cst.If: _enter_if,
    cst.Import: lambda ctx, node: ctx.names.add_import(node),
    cst.ImportFrom: lambda ctx, node: ctx.names.add_import_from(node),
}
_LEAVE: dict[type, ContextHook] = {
    cst.Module: Context._leave_scope,
    cst.ClassDef: Context._leave_scope,
    cst.Lambda: Context._leave_scope,
    cst.FunctionDef: Context._leave_scope,
    cst.With: Context._leave_with,
    cst.If: _leave_if,
    cst.Assign: Context._leave_assign,
    cst.AnnAssign: Context._leave_ann_assign,
    cst.Expr: Context._leave_expression_statement,
}


def context_handlers(node_type: type) -> tuple[ContextHook | None, ContextHook | None]:
    """The context's own (enter, leave) bookkeeping for a node type, each None
    when it has none: the walker calls them directly, once per node."""
    return _ENTER.get(node_type), _LEAVE.get(node_type)


def _is_main_test(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 \
            or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    sides = (test.left, test.comparisons[0].comparator)
    return any(type(side) is cst.Name and side.value == "__name__" for side in sides) and \
        any(type(side) is cst.SimpleString and side.evaluated_value == "__main__"
            for side in sides)
