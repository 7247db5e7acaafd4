"""Wrap exactly the flagged statements of a script in probe calls, in memory.

Each flagged statement `S` becomes

    __memlint_probe__.enter(K)
    try:
        S
    except BaseException:
        __memlint_probe__.failed(K)
        raise
    finally:
        __memlint_probe__.exit(K)

with every new node placed on `S`'s own lines, so tracebacks, `# noqa`
positions and line numbers in the report stay those of the user's file.
Unflagged lines are left untouched and cost nothing at run time. The file
on disk is never written.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from types import CodeType

PROBE_NAME = "__memlint_probe__"


@dataclass
class ProbedStatement:
    """One statement that carries a probe, and the findings it measures."""

    key: int
    line: int
    end_line: int
    kind: str  #: the ast class name: Assign, Expr, For, ...
    findings: list[tuple[int, str]] = field(default_factory=list)  #: (finding id, code)
    #: the container or running value the statement adds to, as written
    #: (`losses` of `losses.append(loss)`, `total` of `total += loss`), if any
    accumulator: str | None = None


@dataclass
class Instrumented:
    code: CodeType  #: compiled with the script's own file name
    statements: list[ProbedStatement]
    #: finding id -> why no probe could be placed on its line
    unprobed: dict[int, str]


def _statements_at(tree: ast.Module, line: int) -> list[ast.stmt]:
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.stmt) and node.lineno == line]


def choose_statement(tree: ast.Module, line: int) -> ast.stmt | str:
    """The statement to wrap for a finding on `line`, or why there is none.

    The innermost simple statement that starts there wins (`if ok: x = f()`
    probes `x = f()`); a loop or `with` header is probed as a whole; a `def`
    or `class` line only defines something, so nothing there can be measured.
    """
    candidates = _statements_at(tree, line)
    if not candidates:
        return f"no statement starts on line {line}"
    simple = [s for s in candidates if not hasattr(s, "body")]
    if simple:
        return simple[-1]
    runnable = [s for s in candidates
                if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if runnable:
        return runnable[-1]
    return f"line {line} is a {type(candidates[0]).__name__} header: nothing runs there"


class _Wrapper(ast.NodeTransformer):
    def __init__(self, keys: dict[int, int]) -> None:
        self.keys = keys  # id(stmt) -> probe key

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, name, self._wrap_list(value))
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)
        return node

    def _wrap_list(self, statements: list[ast.stmt]) -> list[ast.stmt]:
        result: list[ast.stmt] = []
        for stmt in statements:
            self.visit(stmt)
            key = self.keys.get(id(stmt))
            if key is None:
                result.append(stmt)
            else:
                result.extend(_wrapped(stmt, key))
        return result


def _probe_call(method: str, key: int, where: ast.stmt) -> ast.stmt:
    call = ast.Expr(ast.Call(
        func=ast.Attribute(ast.Name(PROBE_NAME, ast.Load()), method, ast.Load()),
        args=[ast.Constant(key)], keywords=[]))
    for node in ast.walk(call):
        if isinstance(node, (ast.expr, ast.stmt)):  # not `Load()`, which has no position
            ast.copy_location(node, where)
            node.end_lineno, node.end_col_offset = where.lineno, where.col_offset
    return call


def _wrapped(stmt: ast.stmt, key: int) -> list[ast.stmt]:
    # `except BaseException: probe.failed(K); raise` binds no name in the
    # user's scope; the probe reads the error from sys.exc_info()
    reraise = ast.copy_location(ast.Raise(exc=None, cause=None), stmt)
    handler = ast.copy_location(ast.ExceptHandler(
        type=ast.copy_location(ast.Name("BaseException", ast.Load()), stmt), name=None,
        body=[_probe_call("failed", key, stmt), reraise]), stmt)
    guarded = ast.Try(body=[stmt], handlers=[handler], orelse=[],
                      finalbody=[_probe_call("exit", key, stmt)])
    ast.copy_location(guarded, stmt)
    return [_probe_call("enter", key, stmt), guarded]


def instrument(source: str, filename: str,
               findings: list[tuple[int, int, str]]) -> Instrumented:
    """Compile `source` with probes around the statements of `findings`
    (each `(finding id, line, code)`)."""
    tree = ast.parse(source, filename)
    by_statement: dict[int, ProbedStatement] = {}
    keys: dict[int, int] = {}
    unprobed: dict[int, str] = {}
    for finding_id, line, code in findings:
        chosen = choose_statement(tree, line)
        if isinstance(chosen, str):
            unprobed[finding_id] = chosen
            continue
        if id(chosen) not in keys:
            key = len(by_statement)
            keys[id(chosen)] = key
            by_statement[key] = ProbedStatement(
                key, chosen.lineno, chosen.end_lineno or chosen.lineno, type(chosen).__name__,
                accumulator=accumulator_of(chosen))
        by_statement[keys[id(chosen)]].findings.append((finding_id, code))
    tree = _Wrapper(keys).visit(tree)
    ast.fix_missing_locations(tree)
    compiled = compile(tree, filename, "exec", dont_inherit=True)
    return Instrumented(compiled, list(by_statement.values()), unprobed)


def accumulator_of(stmt: ast.stmt) -> str | None:
    """`losses` of `losses.append(x)` / `.extend` / `.insert`, `total` of
    `total += x` or `total = total + x`, `outs` of `outs[k] = x`: a plain or
    dotted name only (reading it back has no side effect to speak of)."""
    target = None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
            and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr in ("append", "extend", "insert"):
        target = stmt.value.func.value
    elif isinstance(stmt, ast.AugAssign):
        target = stmt.target
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript):
            target = target.value
    if isinstance(target, ast.Subscript) and not isinstance(stmt, ast.Assign):
        target = None
    if target is None:
        return None
    node = target
    while isinstance(node, ast.Attribute):
        node = node.value
    return ast.unparse(target) if isinstance(node, ast.Name) else None


def is_runnable(source: str) -> bool:
    """A script that does something when run: it has an `if __name__ ==
    "__main__":` block or top-level statements beyond imports, definitions
    and assignments (a loop, a `with`, a bare call)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) \
                and "__main__" in ast.unparse(node.test):
            return True
        if isinstance(node, (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)):
            return True
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant):
            return True
    return False
