"""Facts that cross files, and the findings that wait on them.

Real code answers a rule's question in another file: `evaluate()` in
`utils.py` is called under `no_grad` from `train.py`; a project that never
mentions CUDA runs on the CPU. During each file's one walk, `ModuleFacts`
records what other files may need to know of it (small, picklable: no tree
nodes, so it crosses process boundaries). A rule that cannot decide alone
reports with a `Condition`; once every file is walked, `Project` holds all
the facts and drops the findings whose condition says so. A file checked
alone (stdin, flake8, pre-commit) is a project of one: it is judged on what
it shows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.names import dotted_name
from memlint.finding import Finding

#: Text that shows a file may put something on a CUDA device.
_CUDA_TEXT = re.compile(r"cuda|nccl|accelerator|\.to\(\s*0\s*[,)]|set_default_device|local_rank",
                        re.IGNORECASE)


@dataclass(frozen=True)
class CallFact:
    """A call of a project function from this file: the callee as this file
    names it through its imports (`utils.evaluate`, `.utils.evaluate`,
    `evaluate`), and the grad mode in force at the call."""

    callee: str
    grad_disabled: bool


@dataclass
class ModuleFacts:
    """What one file tells the rest of the project."""

    path: str
    module: str  # dotted name under the checked root: `src.utils`
    mentions_cuda: bool
    #: runs as several processes (ranks): `init_process_group`, `LOCAL_RANK`, DDP, `mp.spawn`
    distributed: bool = False
    calls: list[CallFact] = field(default_factory=list)


def module_name(path: str, root: str | None = None) -> str:
    """`src/utils.py` -> `src.utils`; a package's `__init__.py` is the package."""
    relative = os.path.relpath(path, root) if root else os.path.basename(path)
    stem = os.path.splitext(relative)[0].replace(os.sep, "/")
    parts = [p for p in stem.split("/") if p not in ("", ".", "..")]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def mentions_cuda(source: str) -> bool:
    return _CUDA_TEXT.search(source) is not None


_DISTRIBUTED_TEXT = re.compile(r"init_process_group|DistributedDataParallel|local_rank|"
                               r"mp\.spawn|multiprocessing\.spawn|torchrun|WORLD_SIZE",
                               re.IGNORECASE)


def runs_distributed(source: str) -> bool:
    return _DISTRIBUTED_TEXT.search(source) is not None


_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_SKIPPED_DIRS = {".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "env", "__pycache__",
                 "build", "dist", "site-packages", "node_modules", ".eggs"}
_MAX_SCANNED_FILES = 5000


@lru_cache(maxsize=64)
def project_root(path: str) -> str | None:
    """The nearest folder above `path` that holds a project marker."""
    if not os.path.isfile(path):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in _PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


@lru_cache(maxsize=64)
def _tree_mentions_cuda(root: str) -> bool:
    scanned = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if not name.endswith((".py", ".ipynb", ".yaml", ".yml", ".json", ".sh", ".cfg")):
                continue
            scanned += 1
            if scanned > _MAX_SCANNED_FILES:
                return True  # too big to read: assume it may, and say what the file shows
            try:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    if mentions_cuda(f.read(1_000_000)):
                        return True
            except OSError:
                continue
    return False


class FactCollector:
    """Gathers a file's `ModuleFacts` during the walk (an analysis the engine
    walks before the rules, like the module index)."""

    def __init__(self, ctx: Context, facts: ModuleFacts) -> None:
        self.ctx = ctx
        self.facts = facts

    @classmethod
    def of(cls, ctx: Context) -> FactCollector | None:
        return ctx.analyses.get(cls)  # type: ignore[return-value]

    def visit_Call(self, node: cst.Call) -> None:
        callee = self.ctx.names.qualify(node.func) or dotted_name(node.func)
        if callee is None or callee.startswith(("self.", "cls.", "torch.")):
            return
        self.facts.calls.append(CallFact(callee, self.ctx.grad_disabled))


class Condition:
    """Why a finding may not hold, decided once the whole project is known."""

    def drops(self, project: Project) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Either(Condition):
    """Dropped when any of its conditions drops it."""

    conditions: tuple[Condition, ...]

    def drops(self, project: Project) -> bool:
        return any(condition.drops(project) for condition in self.conditions)


@dataclass(frozen=True)
class UnlessProjectOnCpu(Condition):
    """The finding only matters on a GPU: dropped when no file of the project
    mentions CUDA (nor an accelerator, nor a local rank)."""

    def drops(self, project: Project) -> bool:
        return not project.mentions_cuda


@dataclass(frozen=True)
class UnlessCallersDisableGrad(Condition):
    """An inference function with no caller in its own file: dropped when the
    project calls it, and every such call runs with grad disabled."""

    module: str
    function: str

    def drops(self, project: Project) -> bool:
        sites = project.calls_of(self.module, self.function)
        return bool(sites) and all(site.grad_disabled for site in sites)


class Project:
    """Every file's facts, with the queries conditions ask."""

    def __init__(self, facts: Iterable[ModuleFacts], look_around: bool = True) -> None:
        """`look_around=False` when a whole tree was checked: its files are the
        project, nothing around them is read."""
        self.modules = [f for f in facts if f is not None]
        self.look_around = look_around

    @cached_property
    def mentions_cuda(self) -> bool:
        """Whether any checked file, or any other file of their projects
        (found from `pyproject.toml`, `setup.py` or `.git` upwards), mentions
        CUDA: a file checked alone by an editor or a hook still knows that
        `train.py` next to it puts the model on the GPU. Reading text is cheap;
        nothing else of the unchecked files is used. A file with no project
        around it (stdin, a loose snippet) is not taken for CPU code."""
        if any(f.mentions_cuda for f in self.modules):
            return True
        if not self.look_around:
            return False
        roots = {project_root(f.path) for f in self.modules}
        if None in roots:
            return True  # a snippet with no project around it: nothing says it runs on the CPU
        return any(_tree_mentions_cuda(root) for root in roots)

    def settle(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings that stand once the project is known, sorted."""
        return sorted(replace(f, unless=None) for f in findings
                      if f.unless is None or not f.unless.drops(self))

    def calls_of(self, module: str, function: str) -> list[CallFact]:
        """Calls from other files that name `module.function` through an
        import (`from utils import evaluate`, `import pkg.utils as u`,
        `from .utils import evaluate`); matched on the module path's tail, as
        the root a file was imported from is not known."""
        found = []
        parts = module.split(".")
        for facts in self.modules:
            if facts.module == module:
                continue  # the file's own calls were judged by its module index
            for call in facts.calls:
                owner, _, name = call.callee.rpartition(".")
                if name == function and owner and _same_module(owner.lstrip(".").split("."), parts):
                    found.append(call)
        return found


def _same_module(named: list[str], defined: list[str]) -> bool:
    """`utils` names `src.utils`, `src.utils` names `utils` (checked from
    another root): one dotted path is a tail of the other."""
    shorter = min(len(named), len(defined))
    return shorter > 0 and named[-shorter:] == defined[-shorter:]
