"""Work put on the default GPU (cuda:0) by a program that picks a GPU per process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.gpu_selection import (BY_INDEX, default_device_use,
                                            in_single_process_arm, selects_a_gpu,
                                            sets_current_device, tests_a_handed_device,
                                            under_device_guard)
from memlint.analysis.names import dotted_name
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.project import UnlessHelpersSetDevice
from memlint.analysis.stores import code
from memlint.analysis.torch_api import DEVICE_FACTORIES
from memlint.rules.base import Rule, RuleOptions

#: callees never worth asking about: they cannot make a GPU current
_NEVER_SETTER_MODULES = ("torch.", "os.", "sys.", "numpy.", "np.", "random.", "time.",
                         "logging.", "json.", "argparse.", "math.")
_NEVER_SETTER_BUILTINS = {"print", "len", "int", "str", "float", "range", "dict", "list",
                          "tuple", "isinstance", "super", "open"}


def _asks_nothing(written: str) -> bool:
    return written.split(".", 1)[0] in _NEVER_SETTER_BUILTINS \
        or written.startswith(_NEVER_SETTER_MODULES)


class _Use(NamedTuple):
    node: cst.Call
    statement: cst.CSTNode | None
    scopes: tuple[int, ...]  # ids of the enclosing functions, innermost first; () at top level
    order: int
    how: str
    arms: tuple[int, ...]  # ids of the other arms of every `if` around it


class _Event(NamedTuple):
    order: int
    scopes: tuple[int, ...]
    within: frozenset[int]  # ids of every node around it
    node: cst.CSTNode


class _Call(NamedTuple):
    """A call of a function that may make a GPU current (a helper's)."""

    order: int
    scopes: tuple[int, ...]
    node: cst.Call


class ImplicitDefaultGpu(Rule):
    """A program that runs one process per GPU, or picks its GPU by index
    (`LOCAL_RANK`, `init_process_group`, `f"cuda:{args.gpu}"`),
    then puts memory on the *current* device before making its own GPU
    current with `torch.cuda.set_device`: `.cuda()` with no index,
    `.to("cuda")`, `device="cuda"`, `torch.load(..., map_location="cuda")`,
    `torch.cuda.synchronize()`. The current device is cuda:0 until then, so
    every rank creates a CUDA context (about 0.5 GiB) and puts those tensors
    on GPU 0, which runs out of memory first."""

    code = "MEM008"

    VALID = [
        # never picks a GPU: the default device is the one it means
        "import torch\nmodel = Net().cuda()\nx = torch.zeros(3, device='cuda')",
        # set_device first
        "import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
        "torch.cuda.set_device(local_rank)\nmodel = Net().cuda()",
        # an explicit index
        "import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
        "model = Net().cuda(local_rank)\nx = torch.zeros(3, device=f'cuda:{local_rank}')",
        # the single-process branch of the usual fallback
        "import torch\nimport torch.distributed as dist\n"
        "def main(args):\n    if args.local_rank == -1:\n        device = torch.device('cuda')\n"
        "        model = Net().to(device)\n    else:\n"
        "        torch.cuda.set_device(args.local_rank)\n"
        "        dist.init_process_group('nccl')\n        model = Net().cuda()",
        # CUDA_VISIBLE_DEVICES set before CUDA is touched
        "import os, torch\nos.environ['CUDA_VISIBLE_DEVICES'] = os.environ['LOCAL_RANK']\n"
        "model = Net().cuda()",
        # under `with torch.cuda.device(i)`, "cuda" is GPU i
        "import os, torch\nrank = int(os.environ['LOCAL_RANK'])\nwith torch.cuda.device(rank):\n"
        "    buf = torch.empty(10, device='cuda')",
        # a device string assigned before set_device but used after it
        "import os, torch\ndevice = torch.device('cuda')\nrank = int(os.environ['LOCAL_RANK'])\n"
        "torch.cuda.set_device(rank)\nmodel = Net().to(device)",
        # rank 0 alone: its default device is its own
        "import torch, torch.distributed as dist\ndef main(rank):\n"
        "    dist.init_process_group('nccl', rank=rank, world_size=2)\n    if rank == 0:\n"
        "        state = torch.load('ckpt.pt', map_location='cuda')",
        # a same-file helper makes the GPU current first
        "import torch, torch.distributed as dist\ndef setup(rank):\n"
        "    dist.init_process_group('nccl')\n    torch.cuda.set_device(rank)\n"
        "def train(rank):\n    setup(rank)\n    model = Net().cuda()",
        # the device bound per branch: indexed where the program runs as ranks
        "import os, torch, torch.distributed as dist\nif distributed:\n"
        "    dist.init_process_group('nccl')\n    local_rank = int(os.environ['LOCAL_RANK'])\n"
        "    device = torch.device('cuda', local_rank)\nelse:\n    device = torch.device('cuda')\n"
        "state = torch.load('w.pth', map_location=device)",
        # a leftover --local_rank option in a one-process script
        "import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--local_rank', type=int, default=-1)\nmodel = Net().cuda()",
        # one process with a --gpu option that defaults to None (CMC): `.cuda(args.gpu)`
        # is the current GPU unless given, like the `.cuda()` beside it
        "import argparse, torch\np = argparse.ArgumentParser()\n"
        "p.add_argument('--gpu', type=int, default=None)\nargs = p.parse_args()\n"
        "criterion = torch.nn.CrossEntropyLoss().cuda(args.gpu)\nmodel = Net().cuda()\n"
        "torch.cuda.synchronize()",
        # processes spawned for CPU work (Hogwild, RPC): no GPU is picked
        "import torch\nimport torch.multiprocessing as mp\ndef train(model):\n"
        "    model.cuda()\nmp.spawn(train, args=(Net(),), nprocs=4)",
        # does not create a context (measured)
        "import os, torch\nrank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.empty_cache()\n"
        "torch.cuda.manual_seed(0)\ntorch.cuda.set_device(rank)",
    ]
    INVALID = [
        # LOCAL_RANK read and never used: every rank on cuda:0
        "import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\nmodel = Net().cuda()",
        # set_device comes too late
        "import torch, torch.distributed as dist\ndef main(local_rank):\n"
        "    dist.init_process_group('nccl')\n    model = Net().to('cuda')\n"
        "    torch.cuda.set_device(local_rank)",
        "import os, torch\nrank = int(os.environ['LOCAL_RANK'])\n"
        "state = torch.load('ckpt.pt', map_location='cuda')",
        "import torch\nimport torch.multiprocessing as mp\ndef worker(gpu, args):\n"
        "    torch.cuda.synchronize()\n    x = torch.zeros(8, device=f'cuda:{gpu}')\n"
        "mp.spawn(worker, nprocs=2, args=(None,))",
        # a device picked by option, and one move that ignores it
        "import torch\ndevice = torch.device(f'cuda:{args.gpu}')\nmodel = Net().to(device)\n"
        "mask = torch.ones(4, device='cuda')",
        # before deepspeed.initialize, which makes the GPU current only inside
        "import torch, deepspeed\nmodel = Net().cuda()\n"
        "engine, *_ = deepspeed.initialize(model=model, config='ds.json')",
        # a device named "cuda" in a file that also reads the rank
        "import os, torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "rank = int(os.environ.get('LOCAL_RANK', 0))\nmodel = Net().to(device)",
        "import torch, torch.distributed as dist\ndist.init_process_group('nccl')\n"
        "x = torch.cuda.FloatTensor(10)",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.order = 0
        #: what shows the program picks a GPU, with where: a launcher's rank
        #: counts for the whole file, a device indexed by a variable only
        #: for the function it is written in
        self.selections: list[tuple[_Event, str]] = []
        self.setters: list[_Event] = []
        self.index_picks: list[_Event] = []
        self.calls: list[_Call] = []
        self.uses: list[_Use] = []
        #: functions whose body makes a GPU current: name -> ids of such defs
        self.setter_functions: dict[str, set[int]] = {}

    # -- what the walk records ------------------------------------------------
    def visit_Subscript(self, node: cst.Subscript) -> None:
        value = node.value
        if type(value) is cst.Attribute and value.attr.value == "environ":
            self._selection(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._selection(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if type(node.targets[0].target) is cst.Subscript and sets_current_device(node, self.ctx):
            self._setter(node)

    def visit_Call(self, node: cst.Call) -> None:
        self.order += 1
        self._selection(node)
        if sets_current_device(node, self.ctx):
            self._setter(node)
            return
        how = default_device_use(node, self.ctx)
        if how is not None:
            handed = tests_a_handed_device(self.ctx)
            if handed is not None and not self.ctx.in_test_file and not any(
                    s.scopes and s.scopes[0] == id(self.ctx.function) for s in self.setters):
                # `if "cuda" in device: torch.cuda.synchronize()`: not the device it is handed
                self.report(node, _HANDED.format(code=code(node), how=how), self.statement(),
                            related=[(handed.test, "the device this function is handed is "
                                                   "checked for CUDA here")])
                return
            if not self.ctx.in_test_file and not under_device_guard(self.ctx) \
                    and not in_single_process_arm(self.ctx):
                self.uses.append(_Use(node, self.statement(), self._scopes(), self.order, how,
                                      self._other_arms()))
            return
        written = dotted_name(node.func)
        if written is not None and not _asks_nothing(written):
            self.calls.append(_Call(self.order, self._scopes(), node))

    def _selection(self, node: cst.CSTNode) -> bool:
        what = selects_a_gpu(node, self.ctx)
        if what is None:
            return False
        event = self._event(node)
        self.selections.append((event, what))
        if what == BY_INDEX:
            self.index_picks.append(event)
        return True

    def _setter(self, node: cst.CSTNode) -> None:
        self.setters.append(self._event(node))
        for ancestor in self.ctx.ancestors:
            if type(ancestor) is cst.FunctionDef:
                self.setter_functions.setdefault(ancestor.name.value, set()).add(id(ancestor))

    def _event(self, node: cst.CSTNode) -> _Event:
        return _Event(self.order, self._scopes(), frozenset(map(id, self.ctx.ancestors)), node)

    def _scopes(self) -> tuple[int, ...]:
        return tuple(id(a) for a in reversed(self.ctx.ancestors) if type(a) is cst.FunctionDef)

    def _arms(self) -> Iterator[tuple[cst.If, bool]]:
        """(the `if`, whether we are in its body) for every `if` around us."""
        ancestors = self.ctx.ancestors
        for i in range(len(ancestors) - 1):
            branch = ancestors[i]
            if type(branch) is cst.If:
                yield branch, ancestors[i + 1] is branch.body

    def _other_arms(self) -> tuple[int, ...]:
        return tuple(id(branch.orelse if in_body else branch.body)
                     for branch, in_body in self._arms()
                     if branch.orelse is not None or not in_body)

    # -- what it adds up to ---------------------------------------------------
    def finish(self) -> None:
        collector = FactCollector.of(self.ctx)
        if not (collector is not None and collector.facts.distributed) and all(
                what == BY_INDEX for _, what in self.selections):
            # one process (no launcher's rank, spawn or world size): an index
            # given as an argument, `.cuda(args.gpu)`, may be None, the current
            # GPU; only a device string that always names one (`f"cuda:{gpu}"`)
            # shows a choice that other work on the default GPU ignores
            self.selections = [(event, what) for event, what in self.selections
                               if not self._index_argument(event.node)]
        if not self.selections or not self.uses:
            return
        #: per function, its uses, each with the selection it ignores
        by_scope: dict[tuple[int, ...], list[tuple[_Use, tuple[_Event, str]]]] = {}
        for use in self.uses:
            selection_for = self._selection_for(use)
            if selection_for is not None and not self._made_current_before(use):
                by_scope.setdefault(use.scopes, []).append((use, selection_for))
        for uses in by_scope.values():
            first, (selection, what) = uses[0]
            later = [s for s in self.setters if s.order > first.order and _within(first, s)]
            related = [(selection.node, f"the program {what} here")]
            if later:
                related.append((later[0].node, "the GPU is made current only here, later"))
            self.report(first.node, _message(first, len(uses) - 1, what, bool(later)),
                        first.statement, self._unless(first, collector), related)

    def _index_argument(self, node: cst.CSTNode) -> bool:
        """`.cuda(args.gpu)`, `torch.device("cuda", args.gpu)`: the index as an argument."""
        return type(node) is cst.Call and (
            (type(node.func) is cst.Attribute and node.func.attr.value == "cuda")
            or self.ctx.qualify(node.func) in DEVICE_FACTORIES)

    def _selection_for(self, use: _Use) -> tuple[_Event, str] | None:
        """The first sign that `use`'s process picked a GPU other than the default."""
        return next(((event, what) for event, what in self.selections
                     if what != BY_INDEX or _within(use, event)), None)

    def _made_current_before(self, use: _Use) -> bool:
        """Whether the process has (or may have) made its GPU current when `use` runs."""
        if any(arm in s.within for s in self.setters + self.index_picks for arm in use.arms):
            return True  # the other branch is the distributed one: this is the fallback
        for setter in self.setters:
            if not use.scopes:  # top level: only an earlier top-level setter has run
                if not setter.scopes and setter.order < use.order:
                    return True
            elif setter.scopes and setter.scopes[0] in use.scopes:
                if setter.order < use.order:
                    return True  # earlier in its function (or one around it)
            else:
                return True  # at top level or in another function: its callers may run it first
        for call in self._calls_before(use):
            defs = self.setter_functions.get(_last_name(call.node), ())
            if any(d not in use.scopes for d in defs):
                return True  # a helper that makes it current (not the function it is in)
        return False

    def _calls_before(self, use: _Use) -> list[_Call]:
        """Calls that may run before `use`: earlier ones in its function (or
        at top level); for a use inside a function, any in the file (its
        caller may make the GPU current before calling it)."""
        if use.scopes:
            return self.calls
        return [c for c in self.calls if not c.scopes and c.order < use.order]

    def _unless(self, use: _Use, collector: FactCollector | None) -> UnlessHelpersSetDevice | None:
        if collector is None:
            return None
        imported = []
        for call in self._calls_before(use):
            written = dotted_name(call.node.func) or ""
            qualified = collector.imported_name(written)
            if qualified and "." in qualified and not _asks_nothing(qualified):
                module, _, function = qualified.rpartition(".")
                imported.append((module, function))
        if not imported:
            return None
        return UnlessHelpersSetDevice(collector.facts.module, tuple(sorted(set(imported))))


def _within(use: _Use, event: _Event) -> bool:
    """`event` sits in `use`'s function or one around it (or both at top level)."""
    return not event.scopes or event.scopes[0] in use.scopes


def _last_name(call: cst.Call) -> str:
    return (dotted_name(call.func) or "").rsplit(".", 1)[-1]


_HANDED = ("'{code}' works on the current CUDA device (cuda:0 unless set), not on the device "
           "this function is handed, which may be another GPU (`--device cuda:1`): {how}, so "
           "that GPU gets a CUDA context (about 0.5 GiB) and the work meant for the handed "
           "device; pass the device (`torch.cuda.synchronize(device)`, `.to(device)`)")


def _message(use: _Use, more: int, selection: str, set_later: bool) -> str:
    when = "before making its GPU current with torch.cuda.set_device()" if set_later \
        else "without making its GPU current (torch.cuda.set_device())"
    where = "in this function" if use.scopes else "at top level"
    others = f" ({more} more such use{'s' if more > 1 else ''} {where})" if more else ""
    return (f"'{code(use.node)}' uses the current CUDA device, cuda:0 in every process, though "
            f"this program {selection}{others}: {use.how}, run {when}, so every rank puts a CUDA "
            f"context (about 0.5 GiB) and this memory on GPU 0, which runs out while the others "
            f"sit half empty; call torch.cuda.set_device(<the rank's GPU>) as soon as the rank "
            f"is known, or name the device (`.cuda(local_rank)`, `f\"cuda:{{local_rank}}\"`)")
