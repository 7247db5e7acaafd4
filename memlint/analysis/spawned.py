"""Which code of a file runs in the processes its `mp.spawn(fn, ...)` starts.

A script that spawns one process per GPU runs `fn` (and what it calls) in
each child; its `main`, and the functions `main` calls before spawning,
run once, in the parent. A checkpoint loaded there is loaded once, not once
per rank (TimesFM's `get_model`, called before `mp.spawn`). Without a spawn
in the file, a script that joins a process group is launched once per GPU
(`torchrun`): all of it runs in every rank."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.gpu_selection import reads_launcher_rank
from memlint.analysis.module_index import FunctionInfo, ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.torch_api import RANK_STARTERS, RUNS_PER_GPU, SPAWN

#: how many calls deep a spawned function's own code is followed
_DEPTH = 6


class SpawnedCode:
    """The spawn targets of one file and the rank code outside them."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.index = ModuleIndex.of(ctx)
        self.targets: list[cst.BaseExpression] = []
        #: where the file joins or starts ranks other than by spawning: the function
        #: (None: module level) of each `init_process_group`, DDP wrap, rank read
        self.rank_code: list[FunctionInfo | None] = []
        self._in_children: set[FunctionInfo] | None = None

    @classmethod
    def of(cls, ctx: Context) -> SpawnedCode:
        return ctx.shared(cls)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified == SPAWN:
            target = call_arg(node, "fn", position=0)
            if target is not None:
                self.targets.append(target.value)
        elif qualified in RANK_STARTERS or qualified in RUNS_PER_GPU \
                or reads_launcher_rank(node, self.ctx):
            self.rank_code.append(self.index.current)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if reads_launcher_rank(node, self.ctx):  # `os.environ["LOCAL_RANK"]`
            self.rank_code.append(self.index.current)

    def runs_once(self, function: cst.FunctionDef | None) -> bool:
        """Whether code directly in `function` runs only in the parent: the
        file spawns its ranks, `function` is not reached from what it spawns,
        and nothing outside the spawned code joins a process group."""
        if not self.targets or function is None:
            return False  # module level runs again in each spawned child
        children = self._children()
        if children is None or any(unit is None or unit not in children
                                   for unit in self.rank_code):
            return False
        unit = self.index.info(function)
        return unit is not None and unit not in children

    def _children(self) -> set[FunctionInfo] | None:
        """What the spawned functions run; None when one of them is not
        defined in this file (what it calls cannot be told)."""
        if self._in_children is None:
            found: set[FunctionInfo] = set()
            for target in self.targets:
                named = self.index.functions_by_name.get(
                    (dotted_name(target) or "").rsplit(".", 1)[-1], [])
                if not named:
                    return None
                for function in named:
                    found.update(self.index.reachable(function, _DEPTH))
            self._in_children = found
        return self._in_children
