"""What a module unpickled from a file holds: the parameters it was pickled
with. A project that snapshots its models frozen (StyleGAN's training loop:
`copy.deepcopy(G_ema).eval().requires_grad_(False)` into the dict it
`pickle.dump`s) gives frozen models to whoever unpickles them
(`legacy.load_network_pkl(f)['G_ema']`): their forwards record no graph.

Read with Python's own parser from the files' text, for the few findings
that ask, once per project."""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.analysis.project import Condition, Project, ast_dotted_name, read_tree

#: calls that return what a file holds, unpickled
UNPICKLING_CALLS = {"pickle.load", "pickle.loads", "dill.load", "cloudpickle.load"}
#: how a file's text shows it pickles something
_DUMP = b"pickle.dump"

_frozen_snapshots: weakref.WeakKeyDictionary[Project, bool] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class UnlessUnpickledFrozen(Condition):
    """A model unpickled by `loader` (as `importer` names it: `pickle.load`,
    or a project function returning what an unpickler gives,
    `legacy.load_network_pkl`): dropped when the project pickles modules
    only frozen (`.requires_grad_(False)`), so what it loads records no graph."""

    importer: str
    loader: str

    def drops(self, project: Project) -> bool:
        return _unpickles(project, self.importer, self.loader) and pickles_frozen(project)


def pickles_frozen(project: Project) -> bool:
    """Whether the project pickles modules, each made frozen first, and none
    it makes trainable (`.train()`, `.requires_grad_(True)`). A dump whose
    content cannot be told (`pickle.dump(obj, f)` of a parameter) says nothing."""
    verdict = _frozen_snapshots.get(project)
    if verdict is None:
        kinds: set[str] = set()
        for facts in project.modules:
            if facts.path.endswith(".py"):
                read = read_tree(facts.path, _DUMP)
                if read is not None:
                    kinds |= _dumped_kinds(read[1])
        verdict = _frozen_snapshots[project] = kinds == {"frozen"}
    return verdict


def _unpickles(project: Project, importer: str, loader: str) -> bool:
    if loader in UNPICKLING_CALLS:
        return True
    owner, _, function = loader.rpartition(".")
    if not owner:
        return False
    for facts in project.defining(importer, owner, function):
        read = read_tree(facts.path, b"load")
        if read is not None and returns_unpickled(read[1], function):
            return True
    return False


def returns_unpickled(tree: ast.Module, function: str) -> bool:
    """Whether the top-level `def function` returns what it unpickles
    (`data = _LegacyUnpickler(f).load()` ... `return data`)."""
    unpicklers = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                  and any((ast_dotted_name(base) or "").endswith("Unpickler")
                          for base in node.bases)}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            names = {target.id for statement in ast.walk(node) if isinstance(statement, ast.Assign)
                     and _unpickling(statement.value, unpicklers)
                     for target in statement.targets if isinstance(target, ast.Name)}
            return any(isinstance(ret, ast.Return) and ret.value is not None and (
                _unpickling(ret.value, unpicklers)
                or isinstance(ret.value, ast.Name) and ret.value.id in names)
                for ret in ast.walk(node))
    return False


def _unpickling(value: ast.expr, unpicklers: set[str]) -> bool:
    """`pickle.load(f)`, or `load()` of an unpickler (`_LegacyUnpickler(f).load()`)."""
    if not isinstance(value, ast.Call):
        return False
    if ast_dotted_name(value.func) in UNPICKLING_CALLS:
        return True
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == "load" and isinstance(func.value, ast.Call):
        maker = ast_dotted_name(func.value.func) or ""
        return maker in unpicklers or maker.endswith("pickle.Unpickler")
    return False


def _dumped_kinds(tree: ast.Module) -> set[str]:
    """For each function's `pickle.dump(snapshot, f)`: "frozen" where what it
    stores in `snapshot` was made by `.requires_grad_(False)`, "trainable"
    where by `.train()` or `.requires_grad_(True)`; nothing where neither shows."""
    kinds: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and ast_dotted_name(call.func) == "pickle.dump" \
                    and call.args and isinstance(call.args[0], ast.Name):
                stored = _stored_in(function, call.args[0].id)
                kinds |= {kind for kind in map(_made, stored) if kind}
    return kinds


def _stored_in(function: ast.AST, name: str) -> list[ast.expr]:
    """What `function` puts in the container `name`: values written to
    `name[key]`, each followed back to its binding when a name
    (`module = deepcopy(module).requires_grad_(False)`, `snapshot[key] = module`)."""
    stored: list[ast.expr] = []
    bound: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id == name and node.value not in stored:
                    stored.append(node.value)
    found: list[ast.expr] = []
    for value in stored:
        found.extend(bound.get(value.id, []) if isinstance(value, ast.Name) else [value])
    return found


def _made(value: ast.expr) -> str | None:
    """"frozen" for a chain through `.requires_grad_(False)`, "trainable"
    through `.train()` or `.requires_grad_(True)`, else None."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        method, args = value.func.attr, value.args
        if method == "requires_grad_":
            off = bool(args) and isinstance(args[0], ast.Constant) and args[0].value is False
            return "frozen" if off else "trainable"
        if method == "train" and not (args and isinstance(args[0], ast.Constant)
                                      and args[0].value is False):
            return "trainable"
        value = value.func.value
    return None


def unpickling_loader(built: cst.BaseExpression | None, ctx: Context) -> str | None:
    """The imported function a model was built by, as imported, where the
    model may be what it unpickled (`legacy.load_network_pkl(f)['G_ema']`,
    `pickle.load(f)`): `UnlessUnpickledFrozen` asks the project whether it was."""
    if isinstance(built, cst.Subscript):
        built = built.value
    written = dotted_name(built.func) if isinstance(built, cst.Call) else None
    return ctx.names.qualify_name(written) if written is not None else None
