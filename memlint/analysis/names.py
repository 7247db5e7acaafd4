"""Resolve names through the file's own imports, without libcst's scope analysis.

A whole-tree `QualifiedNameProvider` costs 8-11x the parse (DESIGN.md), while
an alias table built from the import statements answers the only question the
rules ask: "is this expression `torch.utils.data.DataLoader`?".
"""

from __future__ import annotations

import libcst as cst
from memlint.analysis.torch_api import STAR_EXPORTS


def dotted_name(node: cst.BaseExpression | None) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None.

    Tested by exact type (Name and Attribute have no subclasses): an
    `isinstance` miss against a libcst class goes through ABCMeta, and every
    rule asks this of every call's function; this made it ~3x faster than the
    per-node lru_cache it replaced (which hashed nodes through a Python
    `__hash__`). The name is built from the right by concatenation, with the
    classes bound at module level: half the time of collecting the parts in a
    list and joining them reversed (chains are two or three names long)."""
    if type(node) is _ATTRIBUTE:
        name = node.attr.value
        node = node.value
        while type(node) is _ATTRIBUTE:
            name = f"{node.attr.value}.{name}"
            node = node.value
        if type(node) is not _NAME:
            return None
        return f"{node.value}.{name}"
    if type(node) is _NAME:
        return node.value
    return None


_NAME, _ATTRIBUTE = cst.Name, cst.Attribute


def _module_path(node: cst.BaseExpression) -> str:
    return dotted_name(node) or ""


#: Names that only ever mean these modules, also when another module's
#: `import *` brought them (KGAT's `from utils.metrics import *`).
_CONVENTIONAL_MODULES = {"torch": "torch", "nn": "torch.nn", "np": "numpy", "numpy": "numpy"}


class ImportTable:
    """Maps local names to the fully qualified names they were imported as."""

    def __init__(self) -> None:
        self._aliases: dict[str, str] = {}
        #: modules of `from torch import *` (see STAR_EXPORTS); names rebound since
        self._star_modules: list[str] = []
        self._rebound: set[str] = set()
        #: a `from helpers import *` of a module not listed in STAR_EXPORTS:
        #: `torch`, `np`, `nn` may come through it
        self._unknown_star = False
        #: bumped on every change, so that answers can be kept until the next
        self.changes = 0

    def local_name_of(self, module: str) -> str | None:
        """The name this module binds `module` to (`import torch as T` -> `T`),
        None where it binds none."""
        return next((local for local, full in self._aliases.items() if full == module), None)

    def add_import(self, node: cst.Import) -> None:
        self.changes += 1
        for alias in node.names:
            full = _module_path(alias.name)
            if alias.asname is not None:
                local = dotted_name(alias.asname.name)
                if local:
                    self._aliases[local] = full
            else:
                top = full.split(".", 1)[0]
                self._aliases[top] = top

    def add_import_from(self, node: cst.ImportFrom) -> None:
        self.changes += 1
        if node.relative or node.module is None:
            return
        module = _module_path(node.module)
        if isinstance(node.names, cst.ImportStar):
            if module in STAR_EXPORTS:
                self._star_modules.append(module)
            else:
                self._unknown_star = True
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if not name:
                continue
            local = dotted_name(alias.asname.name) if alias.asname else name
            if local:
                self._aliases[local] = f"{module}.{name}"

    def forget(self, local: str) -> None:
        """A name rebound by assignment no longer means the import."""
        self.changes += 1
        self._aliases.pop(local, None)
        self._rebound.add(local)

    def qualify(self, node: cst.BaseExpression | None) -> str | None:
        """`torch.utils.data.DataLoader` for `DL`, `tud.DataLoader`, ...; None if
        the expression's head was not imported."""
        name = dotted_name(node)
        return None if name is None else self.qualify_name(name)

    def qualify_name(self, name: str) -> str | None:
        """`qualify` of an expression already turned into its dotted name."""
        head, _, rest = name.partition(".")
        full = self._aliases.get(head)
        if full is None:
            if not self._star_modules and not self._unknown_star:  # the common case
                return None
            full = self._star_import(head)
            if full is None:
                return None
        return f"{full}.{rest}" if rest else full

    def _star_import(self, head: str) -> str | None:
        """`tensor` after `from torch import *`: `torch.tensor` (latest star import first)."""
        if head in self._rebound:
            return None
        for module in reversed(self._star_modules):
            if head in STAR_EXPORTS[module]:
                return f"{module}.{head}"
        if self._unknown_star:  # `from utils.metrics import *` of a module that imports torch
            return _CONVENTIONAL_MODULES.get(head)
        return None

    def imports(self, module: str) -> bool:
        """Whether anything in this file was imported from `module` or below."""
        prefix = module + "."
        return any(v == module or v.startswith(prefix) for v in self._aliases.values())


def literal_bool(node: cst.BaseExpression) -> bool | None:
    """True or False for the literals `True` / `False`, else None."""
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def defines_method(class_def: cst.ClassDef | None, name: str) -> bool:
    """Whether the class's own body defines a method called `name`."""
    return class_def is not None and any(
        type(statement) is cst.FunctionDef and statement.name.value == name
        for statement in class_def.body.body)


def call_arg(call: cst.Call, keyword: str, position: int | None = None) -> cst.Arg | None:
    """The argument given as `keyword=` or, if `position` is set, positionally."""
    positional = 0
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value == keyword:
                return arg
        elif arg.star:
            continue
        else:
            if position is not None and positional == position:
                return arg
            positional += 1
    return None


def has_star_kwargs(call: cst.Call) -> bool:
    """`f(**options)`: any keyword may hide inside."""
    return any(arg.star == "**" for arg in call.args)


def has_star_args(call: cst.Call) -> bool:
    return any(arg.star == "*" for arg in call.args)
