"""How a module uses its names, as far as MEM005 needs it to tell whether a
loader's batches are ever loaded: named again, handed to a call (here or in
another module), returned, kept in a list, or read once at the top level."""

from __future__ import annotations

from collections import Counter
from typing import cast

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import Context, Scope
from memlint.analysis.flows import (HARMLESS_BUILTINS, imported_callee, is_local,
                                    iterated_name, local_owner, reads_one_batch)
from memlint.analysis.names import dotted_name
from memlint.analysis.walker import returns_in

#: Calls that only look at a loader (`len(loader)`, `print(loader)`): no batch is loaded.
_LOOKS = {"print", "len", "str", "repr", "type", "display"}


class NameUses:
    """The uses of one module's names, gathered during the walk."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        #: `next(iter(loader))` at the top level, by name (and owner: None)
        self.single_batch_reads: Counter[tuple[str | None, cst.FunctionDef | None]] = Counter()
        #: names handed to a call (`fit(model, loader)`), each with the
        #: function it is a local variable of (None: a global, an attribute)
        self.passed_names: set[tuple[str, cst.FunctionDef | None]] = set()
        self.returned_names: set[str] = set()  # names a function returns (`return loader`)
        #: names handed to a function or class of another module, each with
        #: those callees as imported (module, name)
        self.kept_in: dict[str, str | None] = {}  # `loaders.append(loader)`: loader -> loaders
        self.imported_callees: dict[tuple[str, cst.FunctionDef | None],
                                    set[tuple[str, str]]] = {}
        #: how often each identifier is read or written in the module, to tell a
        #: loader that is never used again
        self.identifiers: Counter[str] = Counter()
        #: the same for plain names, by the function each is local to (None: a
        #: global): a parameter that shares a global loader's name is another name
        self.uses: Counter[tuple[str, cst.FunctionDef | None]] = Counter()
        #: names read in a function's own body, by that body's scope, whose
        #: owner is settled once the function's bindings are all known: a name
        #: bound anywhere in a function is its local everywhere in it (Python's
        #: rule), and one look per name and scope is cheaper than one per read
        self._reads_in: Counter[tuple[str, int]] = Counter()
        self._scopes: dict[int, Scope] = {}

    @classmethod
    def of(cls, ctx: Context) -> NameUses:
        return ctx.shared(cls)

    def visit_Name(self, node: cst.Name) -> None:
        if self._only_looked_at(node):
            return
        name = node.value
        self.identifiers[name] += 1
        ctx = self.ctx
        function = ctx.function
        if function is None:
            self.uses[(name, None)] += 1
        elif type(ctx.ancestors[-2]) is cst.AssignTarget:  # bound here: its local
            self.uses[(name, function)] += 1
        elif ctx.scope.node is function:
            scope = ctx.scope
            self._scopes[id(scope)] = scope
            self._reads_in[(name, id(scope))] += 1
        else:  # a comprehension or lambda of the function: read as a global
            self.uses[(name, None)] += 1

    def _only_looked_at(self, node: cst.Name) -> bool:
        """`len(loader)`, `print(loader)`, a notebook cell ending in `loader`:
        shown, not iterated; and a parameter's name in a `def` or a keyword
        argument, which is not the variable of that name outside."""
        ancestors = self.ctx.ancestors
        parent = ancestors[-2] if len(ancestors) > 1 else None
        # exact types: isinstance against libcst's ABC-based classes is a Python
        # call per test, and this runs for every name of the file
        if type(parent) is cst.Param and parent.name is node:
            return True  # `def train(loader)`: a parameter's name
        if type(parent) is cst.Arg and parent.keyword is node:
            return True  # `train(loader=other)`: a keyword, not the variable
        if type(parent) is cst.Element and len(ancestors) > 3 \
                and type(ancestors[-3]) is cst.Tuple and type(ancestors[-4]) is cst.Expr:
            return True  # a cell ending in `train_loader, test_loader`
        if type(parent) is cst.Expr:
            return True
        if type(parent) is cst.Arg and len(ancestors) > 2:
            call = ancestors[-3]
            return type(call) is cst.Call and type(call.func) is cst.Name \
                and call.func.value in _LOOKS and self.ctx.binding(call.func.value) is None
        return False

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returned_names.update(names_in(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Name) and node.func.value in HARMLESS_BUILTINS):
            handed = {(name, local_owner(self.ctx, name)) for name in
                      filter(None, (dotted_name(a.value) for a in node.args))}
            self.passed_names.update(handed)
            callee = imported_callee(node, self.ctx)  # the project says what it does
            for passed in handed:
                if callee is not None:
                    self.imported_callees.setdefault(passed, set()).add(callee)
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "append":
                self.kept_in.update((name, dotted_name(node.func.value)) for name, _ in handed)
        if reads_one_batch(node) and self.ctx.function is None:  # once, at a script's top level
            read = iterated_name(node.args[0].value)
            owner = local_owner(self.ctx, read) if read is not None else None
            self.single_batch_reads[(read, owner)] += 1

    def uses_of(self, name: str, assigned: str | None, owner: cst.FunctionDef | None) -> int:
        """How often the loader bound to `assigned` is named: a plain name in
        its own function (or at the top level), else `name` anywhere."""
        if assigned is not None and "." not in assigned:
            self._settle_reads()
            return self.uses[(assigned, owner)]
        return self.identifiers[name.rsplit(".", 1)[-1]]

    def _settle_reads(self) -> None:
        """Count the reads in functions' bodies under the function each name
        is local to (None: a global)."""
        for (name, scope_id), count in self._reads_in.items():
            scope = self._scopes[scope_id]
            function = cast(cst.FunctionDef, scope.node)
            self.uses[(name, function if is_local(scope, name) else None)] += count
        self._reads_in.clear()


def returned_position(function: cst.FunctionDef, name: str) -> int | None:
    """Where `function` returns the local `name`: its position in the tuple
    every `return` naming it gives back (`return train, val, None`), else None
    (returned whole, inside another value, or at different positions)."""
    positions: set[int] = set()
    for statement in returns_in(function):
        value = statement.value
        if value is None or name not in names_in(value):
            continue
        if type(value) is not cst.Tuple:
            return None
        for position, element in enumerate(value.elements):
            if type(element) is cst.StarredElement:
                return None  # positions after it depend on what is starred
            if type(element.value) is cst.Name and element.value.value == name:
                positions.add(position)
            elif name in names_in(element.value):
                return None
    return positions.pop() if len(positions) == 1 else None
