"""Facts that cross files, and the findings that wait on them.

Real code answers a rule's question in another file: `evaluate()` in
`utils.py` is called under `no_grad` from `train.py`; a project that never
mentions CUDA runs on the CPU. During each file's one walk, `ModuleFacts`
records what other files may need to know of it (small, picklable: no tree
nodes, so it crosses process boundaries). A rule that cannot decide alone
reports with a `Condition`; once every file is walked, `Project` holds all
the facts and drops the findings whose condition says so. The project is
the whole tree a file belongs to (`engine/projects.py` finds it), whichever of
its files were named: a file checked alone (flake8, pre-commit, an editor)
gets the findings `memlint check .` gives it. Text with no tree around it
(stdin, a snippet) is judged on what it shows, and is not taken for CPU code.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple, Protocol

from memlint.analysis.source_lines import LINE_BREAK
from memlint.analysis.files import read_regular
from memlint.analysis.file_names import same_file
from memlint.analysis.torch_api import AUTOGRAD_GRAD
from memlint.analysis.source_lines import parse_quietly
from memlint.finding import Finding, Related

#: Words that show a file may put something on a CUDA device (in its lower-cased
#: text: substring tests cost a fraction of one case-blind regular expression).
_CUDA_WORDS = ("cuda", "nccl", "accelerator", "set_default_device", "local_rank")
_TO_ORDINAL = re.compile(r"\.to\(\s*0\s*[,)]")


class CallFact(NamedTuple):
    """A call of a project function from this file: the callee as this file
    names it through its imports (`utils.evaluate`, `.utils.evaluate`,
    `evaluate`), the grad mode in force at the call, and the function as
    written at the call (`u.evaluate`). Positions are computed only for
    reported nodes, so the call's line is not kept: `Project.position_of`
    finds it again, for the few calls a finding cites. A named tuple: made in
    the worker and unpickled in the parent in half a frozen dataclass's time
    (the 35k calls of the benchmark sample: 65 ms down to 34 ms)."""

    callee: str
    grad_disabled: bool
    written: str
    #: per positional argument, where the code shows it lives: "h" made on the
    #: host here (`torch.rand(...)`, `.cpu()`), "c" on a CUDA device, "?" not
    #: told; "" when none is on the host (what most calls are)
    places: str = ""
    #: with grad on at the call: the top-level function of this file it is
    #: made in, when every call of that function in this file runs with grad
    #: off (FCGF's `extract_features_batch`, called under `no_grad` only)
    within_grad_off: str = ""
    #: the positions of its result that the call unpacks into names this
    #: file never reads (`train_loader, unused_loader = make_loaders(cfg)`)
    dropped: tuple[int, ...] = ()


@dataclass
class ModuleFacts:
    """What one file tells the rest of the project."""

    path: str
    module: str  # dotted name under the checked root: `src.utils`
    mentions_cuda: bool
    #: runs as several processes (ranks): `init_process_group`, `LOCAL_RANK`, DDP, `mp.spawn`
    distributed: bool = False
    #: the modules it imports, as written (`utils`, `.utils`, `pkg.models.net`)
    imports: tuple[str, ...] = ()
    #: its text moves tensors to a device (`.cuda(`, `.to(`)
    copies_to_device: bool = False
    #: per function defined once here, per positional parameter: whether what
    #: it is given reaches a CUDA device as it is ("gpu"), stays on the host
    #: ("stay"), or cannot be told ("unknown") (see `analysis/flows.py`)
    parameter_flows: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the names of those parameters, in the same order (keyword-only ones last)
    parameter_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: classes defined here that copy the batches of a loader they are given
    #: to a CUDA device (`analysis/flows.py`)
    batch_movers: set[str] = field(default_factory=set)
    #: method names this file calls (`self.policy.evaluate_actions(...)`), each
    #: with whether every such call sits in a function that back-propagates or
    #: runs with grad disabled
    method_calls: dict[str, bool] = field(default_factory=dict)
    #: the command-line options that turn CUDA on and are off by default
    #: (`add_argument("--accel", action="store_true")`): the program runs on
    #: the GPU when used as intended; findings say "when run with --accel"
    cuda_options: set[str] = field(default_factory=set)
    #: settings written as CUDA off (`args = Namespace(cuda=False)`): a device
    #: chosen by one is the CPU as the code is written
    cuda_off_settings: set[str] = field(default_factory=set)
    #: hides every GPU from the process before CUDA starts
    #: (`os.environ["CUDA_VISIBLE_DEVICES"] = ""` or `"-1"`): a CPU program
    hides_gpus: bool = False

    @property
    def on_cpu_as_written(self) -> bool:
        """Hides every GPU from itself, or its settings say CUDA is off."""
        return self.hides_gpus or bool(self.cuda_off_settings)

    @property
    def cuda_by_default(self) -> bool:
        """Mentions CUDA, and is not on the CPU as written."""
        return self.mentions_cuda and not self.on_cpu_as_written
    calls: list[CallFact] = field(default_factory=list)
    #: what its top-level functions return, as MEM003's autograd tracer saw
    #: them (files it walks: those with a loop): True a value with autograd
    #: history, False none, None cannot tell
    returns: dict[str, bool | None] = field(default_factory=dict)
    #: files it writes with `torch.save`, by the file name written in the path
    #: (`"training_args.bin"`), each with whether every save of it holds no
    #: GPU tensors (CPU values, command-line arguments), as MEM007 saw them
    saves: dict[str, bool] = field(default_factory=dict)
    #: files it writes with `torch.save` (by name, as `saves`) holding an optimizer's state
    optimizer_saves: set[str] = field(default_factory=set)
    #: a `torch.save` whose path spells no file name (`torch.save(sd, args.out)`)
    saves_unnamed: bool = False
    #: each `torch.save` of model weights (not of an optimizer's, a
    #: scheduler's or the arguments), with whether it holds CPU values only
    model_saves: list[bool] = field(default_factory=list)
    #: classes that decode media into floating-point samples (a method reads
    #: an image, audio or video, or applies a float-making transform) or
    #: derive a library's media data set: data sets worth pinning
    media_classes: set[str] = field(default_factory=set)
    #: classes whose `forward` is decorated `@torch.no_grad()` (or
    #: `inference_mode`): calling one records no graph
    grad_off_forwards: set[str] = field(default_factory=set)
    #: functions and methods (by name) that call `torch.autograd.grad`
    differentiating: set[str] = field(default_factory=set)
    #: classes that define `forward`, each with the names its methods call
    #: (`torch.autograd.grad` among them where one calls it)
    model_calls: dict[str, frozenset[str]] = field(default_factory=dict)
    #: classes whose `forward` returns a tuple: per position, whether what
    #: every `return` puts there holds no autograd history (`loss.item()`, `0`)
    forward_elements: dict[str, tuple[bool, ...]] = field(default_factory=dict)
    #: functions this file's DataLoaders run in their workers that another
    #: module defines (`collate_fn=partial(custom_collate_fn, ...)` of an
    #: imported one), as imported (`pkg.ch07.custom_collate_fn`), each with
    #: whether every such loader here runs in the main process (num_workers 0);
    #: also the imported data set classes its loaders are given (`DataLoader(Faces())`)
    worker_functions: dict[str, bool] = field(default_factory=dict)
    #: functions (by name) that make a GPU the current device for the rest of
    #: the process (`torch.cuda.set_device`, `CUDA_VISIBLE_DEVICES`): a
    #: `utils.init_distributed_mode(args)` another file calls first (MEM008)
    device_setters: set[str] = field(default_factory=set)
    #: per function or method name its loops call, the arguments (position
    #: or keyword) handed a tensor with autograd history, each with the call
    #: as written (MEM003: `tracker.update(loss)` after `loss.backward()`)
    history_passed: dict[str, dict[str, str]] = field(default_factory=dict)
    #: top-level functions that call a parameter they are handed (a callback),
    #: by name, with the positions of those they call only with grad disabled
    #: (`with torch.no_grad(): result = func(**data)`)
    callbacks_run_grad_off: dict[str, frozenset[int]] = field(default_factory=dict)
    #: the functions it defines at top level, by name (read from its text, so
    #: that a file no rule parses still answers "does it define this helper")
    defines: frozenset[str] = frozenset()


def _reexported_from(facts: ModuleFacts, name: str) -> list[str]:
    """The modules, as `facts`' file imports them, that it imports `name`
    from (`.pretrain` for `from .pretrain import BERTTrainer` in a package's
    `__init__.py`): where a name it re-exports is defined."""
    return [source for source, _, imported in (i.rpartition(".") for i in facts.imports)
            if imported == name and source]


def joined_facts(parts: Iterable[ModuleFacts | None]) -> ModuleFacts | None:
    """The facts of one file whose rules were walked in shares, one process
    each (the editor server's workers, `engine/paths.py`): what the shared
    analyses found, alike in every share, once; what one share's rules
    found, added. None when no share could read the file."""
    found = [facts for facts in parts if facts is not None]
    if not found:
        return None
    joined = replace(found[0])
    for other in found[1:]:
        for name in joined.__dataclass_fields__:
            mine, theirs = getattr(joined, name), getattr(other, name)
            if mine == theirs or not theirs:
                continue
            if not mine:
                setattr(joined, name, theirs)
            elif isinstance(mine, (set, frozenset)):
                setattr(joined, name, mine | theirs)
            elif isinstance(mine, dict):
                setattr(joined, name, {**mine, **theirs})
            elif isinstance(mine, list):
                setattr(joined, name, mine + theirs)
            else:  # what the file's text alone says: no share can see it otherwise
                raise ValueError(f"the shares of {joined.path} differ on {name}")
    return joined


def module_name(path: str, root: str | None = None) -> str:
    """`src/utils.py` -> `src.utils`, named by its path under the project
    root `root` (its own folder when None: a lone file); a package's
    `__init__.py` is the package."""
    root = os.path.dirname(os.path.abspath(path)) if root is None else root
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    stem = os.path.splitext(relative)[0].replace(os.sep, "/")
    parts = [p for p in stem.split("/") if p not in ("", ".", "..")]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def mentions_cuda(source: str, lowered: str | None = None) -> bool:
    """Whether the text names CUDA outside comments (`# model.cuda()` is code
    switched off); substring tests first, lines looked at only on a hit.
    `lowered` is `source.lower()` where the caller has it already (lowering a
    file costs as much as these tests)."""
    lowered = source.lower() if lowered is None else lowered
    for word in _CUDA_WORDS:
        start = lowered.find(word)
        while start != -1:
            line_start = max(lowered.rfind("\n", 0, start), lowered.rfind("\r", 0, start)) + 1
            if "#" not in lowered[line_start:start]:
                return True
            start = lowered.find(word, start + 1)
    return ".to(" in source and _TO_ORDINAL.search(source) is not None


#: Words of a program launched as several processes. Not the names of
#: `init_process_group` or `DistributedDataParallel`: imported and never called,
#: they launch nothing (MEM007 looks for the calls themselves).
_DISTRIBUTED_WORDS = ("local_rank", "mp.spawn", "multiprocessing.spawn", "torchrun",
                      "world_size")


_IMPORT_TEXT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\(?([\w \t,.*]+)|"
                          r"import[ \t]+([\w \t,.]+))", re.MULTILINE)


def imported_modules(source: str) -> tuple[str, ...]:
    """The modules a file's import statements name, read from its text (so
    files no rule parses still link the project): `from a import b` names
    `a` and `a.b`, `from . import b` names `.b`."""
    found: list[str] = []
    for match in _IMPORT_TEXT.finditer(source):
        source_module, names, plain = match.groups()
        if plain is not None:
            found.extend(n.split()[0] for n in plain.split(",") if n.strip())
            continue
        if source_module.strip("."):
            found.append(source_module)
        separator = "" if source_module.endswith(".") else "."
        found.extend(source_module + separator + n.split()[0]
                     for n in names.split(",") if n.strip() and n.strip() != "*")
    return tuple(found)


_TOP_LEVEL_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)


def top_level_functions(source: str) -> frozenset[str]:
    """The names of the functions a file defines at column 0."""
    return frozenset(_TOP_LEVEL_DEF.findall(source))


def runs_distributed(source: str, lowered: str | None = None) -> bool:
    lowered = source.lower() if lowered is None else lowered
    return any(word in lowered for word in _DISTRIBUTED_WORDS)


class Condition:
    """Why a finding may not hold, decided once the whole project is known."""

    def drops(self, project: Project) -> bool:
        raise NotImplementedError

    def previews(self, project: Project) -> bool:
        """Whether a finding it keeps is a preview variant of its rule (shown
        only with `--preview`): what the project shows leaves its cost in doubt."""
        return False

    def related(self, project: Project) -> list[Related]:
        """Evidence from other files for a finding this condition kept (asked
        only when it stands): the caller that runs with autograd on."""
        return []


@dataclass(frozen=True)
class Either(Condition):
    """Dropped when any of its conditions drops it."""

    conditions: tuple[Condition, ...]

    def drops(self, project: Project) -> bool:
        return any(condition.drops(project) for condition in self.conditions)

    def previews(self, project: Project) -> bool:
        return any(condition.previews(project) for condition in self.conditions)

    def related(self, project: Project) -> list[Related]:
        return [r for condition in self.conditions for r in condition.related(project)]


@dataclass(frozen=True)
class EveryOne(Condition):
    """Dropped when each of its conditions drops it: every way into the code
    is covered (each function a file's calls come in through)."""

    conditions: tuple[Condition, ...]

    def drops(self, project: Project) -> bool:
        return bool(self.conditions) and all(c.drops(project) for c in self.conditions)

    def related(self, project: Project) -> list[Related]:
        return [r for condition in self.conditions for r in condition.related(project)]


@dataclass(frozen=True)
class UnlessProjectOnCpu(Condition):
    """The finding only matters on a GPU: dropped when no file of the project
    mentions CUDA (nor an accelerator, nor a local rank), or, in a tree checked
    whole, no file of the part of it that `module` belongs to (the modules
    linked to it by imports: a CPU-only chapter of a course repository)."""

    module: str | None = None

    @classmethod
    def here(cls, ctx: _WithFacts) -> UnlessProjectOnCpu:
        return cls(ctx.facts.module if ctx.facts is not None else None)

    def drops(self, project: Project) -> bool:
        return not project.mentions_cuda or not project.cuda_near(self.module)


class _WithFacts(Protocol):
    """What `UnlessProjectOnCpu.here` reads of a walk's `Context` (whose
    module imports this one)."""

    facts: ModuleFacts | None


@dataclass(frozen=True)
class UnlessNoImporterCopiesToCuda(Condition):
    """A loader built in a module that copies nothing to a GPU itself: dropped
    unless a module importing it copies tensors to a device in CUDA code, or
    hands them to a project class that copies its batches there."""

    module: str

    def drops(self, project: Project) -> bool:
        return not any(project.cuda_near(importer.module) and (
            importer.copies_to_device or any(
                project.moves_batches(importer.module, *call.callee.rpartition(".")[::2])
                for call in importer.calls if "." in call.callee))
            for importer in project.importers_of(self.module))


@dataclass(frozen=True)
class UnlessNoCalleeCopiesToCuda(Condition):
    """A loader handed to classes of other modules (`BERTTrainer(bert,
    train_dataloader=loader)`) in a module that copies nothing itself:
    dropped unless one of them is the project's and copies the batches of a
    loader it is given to a CUDA device."""

    module: str
    #: (the module as the import names it: `.trainer`; the class)
    callees: tuple[tuple[str, str], ...]

    def drops(self, project: Project) -> bool:
        return not (project.cuda_near(self.module) and any(
            project.moves_batches(self.module, imported, name)
            for imported, name in self.callees))


@dataclass(frozen=True)
class UnlessSavedWithoutGpuTensors(Condition):
    """A file loaded by a name written in its path (`training_args.bin`, or
    `finetune_*_0.pkl` for a path built at run time): dropped when the
    project saves a file that name can be, and every such save holds no
    GPU tensors."""

    file: str
    module: str | None = None  # the loading module: its program's saves count

    def drops(self, project: Project) -> bool:
        verdicts = project.saves_of(self.file, self.module)
        return bool(verdicts) and all(verdicts)


@dataclass(frozen=True)
class PreviewUnlessProjectWrites(Condition):
    """A checkpoint loaded by a name no `torch.save` of the project writes,
    where every save of the project spells its file name: an external file
    (a published checkpoint, a resume file another tool wrote), whose
    tensors' device the code does not show: a preview variant."""

    file: str
    module: str | None = None  # the loading module: its program's saves count

    def drops(self, project: Project) -> bool:
        return False

    def previews(self, project: Project) -> bool:
        program = project.program_of(self.module)
        if not project.complete or any(f.saves_unnamed for f in program):
            return False
        return not project.saves_of(self.file, self.module)


@dataclass(frozen=True)
class UnlessSavedWithoutOptimizer(Condition):
    """A whole pickled model taken out of a loaded checkpoint (`model =
    ckpt["model"]`): dropped unless the project saves a file of that name
    with an optimizer in it, whose state the load restores onto the GPU
    unused."""

    file: str
    module: str | None = None  # the loading module: its program's saves count

    def drops(self, project: Project) -> bool:
        return not any(same_file(name, self.file) for facts in project.program_of(self.module)
                       for name in facts.optimizer_saves)


@dataclass(frozen=True)
class UnlessProjectSavesModelsOnCpu(Condition):
    """A model checkpoint of unknown origin: dropped when the program the
    loading module belongs to (the modules linked to it by imports) saves
    model weights somewhere and every such save moves them to the CPU first
    (its own checkpoints, the ones it loads, hold no GPU tensors)."""

    module: str

    def drops(self, project: Project) -> bool:
        verdicts = [cpu for facts in project.linked(self.module) for cpu in facts.model_saves]
        return bool(verdicts) and all(verdicts)


@dataclass(frozen=True)
class UnlessForwardDisablesGrad(Condition):
    """A model built from a class of another file: dropped when the project
    defines that class with a `forward` decorated `@torch.no_grad()`."""

    class_name: str

    def drops(self, project: Project) -> bool:
        return any(self.class_name in facts.grad_off_forwards for facts in project.modules)


@dataclass(frozen=True)
class UnlessForwardNeedsGrad(Condition):
    """A model whose forward differentiates (`torch.autograd.grad`: the
    normals of an SDF, forces from an energy) needs autograd in inference
    too: dropped when the program defines the model's class so, or, its
    class not known here, any model class so."""

    module: str
    class_name: str | None

    def drops(self, project: Project) -> bool:
        linked = project.linked(self.module)
        differentiating = {AUTOGRAD_GRAD}.union(*(facts.differentiating for facts in linked))
        return any(not calls.isdisjoint(differentiating)
                   for facts in linked for name, calls in facts.model_calls.items()
                   if self.class_name in (None, name))


@dataclass(frozen=True)
class UnlessForwardsGiveNoHistoryAt(Condition):
    """Position `index` of what a model of unknown class returns
    (`loss, acc = model(x)`): dropped when the program (the modules linked to
    `module`) defines models whose forward returns a tuple that long, and each
    puts a value without history there (`return loss, acc.item()`)."""

    module: str
    index: int
    length: int

    def drops(self, project: Project) -> bool:
        verdicts = [elements[self.index] for facts in project.linked(self.module)
                    for elements in facts.forward_elements.values()
                    if len(elements) == self.length]
        return bool(verdicts) and all(verdicts)


@dataclass(frozen=True)
class UnlessCalleesRunItGradOff(Condition):
    """A forward written in a lambda that its file only hands to functions of
    other modules (`nondist_forward_collect(func, data_loader, n)`): dropped
    when the project defines each so that it calls what it is handed there
    only with grad disabled."""

    #: (the function as imported, the position it is handed the lambda at)
    callees: tuple[tuple[str, int], ...]

    def drops(self, project: Project) -> bool:
        return all(project.runs_callback_grad_off(callee, position)
                   for callee, position in self.callees)


@dataclass(frozen=True)
class UnlessCallersDisableGrad(Condition):
    """An inference function with no caller in its own file: dropped when the
    project calls it, and every such call runs with grad disabled. With
    `called` False, one its own file calls too: dropped when no other file
    calls it with grad on."""

    module: str
    function: str
    called: bool = True

    def drops(self, project: Project) -> bool:
        sites = project.calls_of(self.module, self.function)
        return (bool(sites) or not self.called) and all(
            project.runs_grad_off(facts, call) for facts, call in sites)

    def related(self, project: Project) -> list[Related]:
        """Each call from another file that runs with autograd on."""
        found = []
        for facts, call in project.calls_of(self.module, self.function):
            position = None if project.runs_grad_off(facts, call) \
                else project.position_of(facts, call)
            if position is not None:
                found.append(Related(facts.path, *position,
                                     f"'{self.function}' is called here with autograd on"))
        return found


@dataclass(frozen=True)
class UnlessNoCallerPassesHistory(Condition):
    """A method that keeps what it is handed on its object: dropped unless a
    file of the project calls a function or method of its name handing a
    tensor with autograd history there (by position, `self` not counted, or
    by keyword)."""

    function: str
    position: int
    parameter: str

    def _calls(self, project: Project) -> list[tuple[ModuleFacts, str]]:
        return [(facts, passed[key]) for facts in project.modules
                for passed in [facts.history_passed.get(self.function, {})]
                for key in (str(self.position), self.parameter) if key in passed]

    def drops(self, project: Project) -> bool:
        return not self._calls(project)

    def related(self, project: Project) -> list[Related]:
        """Where a caller hands it a tensor with history (the first such call)."""
        found = []
        for facts, written in self._calls(project):
            if facts.path.endswith(".ipynb"):
                continue
            positions = project.calls_written(facts.path, written)
            if positions:
                found.append(Related(facts.path, *positions[0],
                                     f"'{self.function}' is handed a tensor with autograd "
                                     f"history here"))
        return found


@dataclass(frozen=True)
class UnlessLoadersRunInMainProcess(Condition):
    """Worker code (a `collate_fn`) that no DataLoader of its own file uses:
    dropped when the project's loaders that use it exist and every one runs
    in the main process (`num_workers=0`, where the CUDA context already is)."""

    module: str
    function: str

    def drops(self, project: Project) -> bool:
        uses = project.worker_uses(self.module, self.function)
        return bool(uses) and all(uses)


@dataclass(frozen=True)
class UnlessHelpersKeepBatchesOnHost(Condition):
    """A loader whose batches go only to functions of other modules
    (`test_single_volume(batch["image"], ...)`): dropped when every one of them
    is the project's and keeps what it is given on the host (turns it into
    numpy, builds new tensors)."""

    #: each function as imported (`val_2D.test_single_volume`) and the argument
    #: (position or keyword)
    helpers: tuple[tuple[str, int | str], ...]

    def drops(self, project: Project) -> bool:
        return all(project.parameter_flow(callee, slot) == "stay" for callee, slot in self.helpers)


@dataclass(frozen=True)
class UnlessCalledToTrain(Condition):
    """An inference-named method with no caller in its own file
    (`evaluate_actions` of a PPO policy): dropped when other files call a
    method of that name only from functions that back-propagate (which makes
    it a training step's forward) or with grad disabled."""

    module: str
    method: str

    def drops(self, project: Project) -> bool:
        verdicts = [f.method_calls[self.method] for f in project.modules
                    if f.module != self.module and self.method in f.method_calls]
        return bool(verdicts) and all(verdicts)


@dataclass(frozen=True)
class UnlessImportedFunctionsKeepNoHistory(Condition):
    """A value taken to carry autograd history only because of the name of a
    function imported from another module (`from .losses import compute_loss`):
    dropped when every such function is one of the project's, found through
    the import, and its module's facts do not say it returns history (a helper
    that returns `loss.item()` is not a loss because of its name)."""

    module: str
    #: (the module as the import names it: `.ch05`, `utils`; the function)
    functions: tuple[tuple[str, str], ...]

    def drops(self, project: Project) -> bool:
        for imported, function in self.functions:
            results = project.results_of(self.module, imported, function)
            if not results or any(result is True for result in results):
                return False
        return True


@dataclass(frozen=True)
class UnlessProgramMethodsKeepNoHistory(Condition):
    """A value taken to carry autograd history only because it comes from a
    method of an object the file does not show (`loss.get_loss()`, where the
    project's `Loss` classes return `self.acc_loss.item()`): dropped when the
    program (the modules linked to `module`) defines each such method, and
    every definition returns plain numbers. Read from the defining files'
    text when a finding asks, which is rare."""

    module: str
    methods: tuple[str, ...]

    def drops(self, project: Project) -> bool:
        for method in self.methods:
            verdicts = project.method_verdicts(self.module, method)
            if not verdicts or not all(verdicts):
                return False
        return True


def _method_verdicts(path: str, method: str) -> list[bool]:
    """For each class's `def method` in the file at `path`: whether every
    value it returns is a plain number (`x.item()`, `0`, `math.exp(...)`, a
    name bound to one, arithmetic of those)."""
    read = read_tree(path, f"def {method}(".encode())
    if read is None:
        return []
    return [_returns_numbers(node, method) for cls in ast.walk(read[1])
            if isinstance(cls, ast.ClassDef) for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name == method]


def _returns_numbers(function: ast.FunctionDef, method: str) -> bool:
    bound: dict[str, bool] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            bound[name] = bound.get(name, True) and _a_number(node.value, bound, method)
    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
    return all(r.value is None or _a_number(r.value, bound, method) for r in returns)


def _a_number(node: ast.expr, bound: dict[str, bool], method: str) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) or node.value is None
    if isinstance(node, ast.Name):
        return bound.get(node.id, False)
    if isinstance(node, ast.BinOp):
        return _a_number(node.left, bound, method) and (
            _a_number(node.right, bound, method) or isinstance(node.right, ast.Attribute))
    if isinstance(node, ast.UnaryOp):
        return _a_number(node.operand, bound, method)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in ("item", "tolist"):
                return True
            if isinstance(func.value, ast.Name) and func.value.id == "math":
                return True
            # `super().get_loss()`: the base class's answer, judged where it is defined
            if func.attr == method and isinstance(func.value, ast.Call) \
                    and isinstance(func.value.func, ast.Name) and func.value.func.id == "super":
                return True
        if isinstance(func, ast.Name) and func.id in ("float", "int", "round", "len"):
            return True
    return False


@dataclass(frozen=True)
class UnlessHelpersSetDevice(Condition):
    """A use of the default GPU after calls into other modules
    (`init_distributed_mode(args)` from `util/misc.py`): dropped when one of
    them is a project function that makes a GPU current (`device_setters`),
    or when one whose name is about distributed setup is not the project's
    to read (a library's `init_dist`): what it does cannot be known."""

    module: str
    #: (the module as the import names it: `util.misc`, `.dist`; the function)
    functions: tuple[tuple[str, str], ...]

    def drops(self, project: Project) -> bool:
        for imported, function in self.functions:
            targets = project.defining(self.module, imported, function)
            if any(function in facts.device_setters for facts in targets):
                return True
            if not targets and _SETUP_NAME.search(function.lower()):
                return True
        return False


_SETUP_NAME = re.compile(r"dist|rank|gpu|device|cuda|launch|ddp|process_group|^setup$")


class Project:
    """Every file's facts, with the queries conditions ask."""

    def __init__(self, facts: Iterable[ModuleFacts | None], complete: bool = True) -> None:
        """`facts` of every file of one project (`complete`), or of text
        with nothing known around it (`complete=False`: stdin, a snippet)."""
        self.modules = [f for f in facts if f is not None]
        self.complete = complete
        self._call_positions: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self._method_verdicts: dict[tuple[str, str], list[bool]] = {}
        self._component_cuda: dict[frozenset[str], bool] = {}
        self._resolved: dict[tuple[str, str], list[str]] = {}

    @cached_property
    def mentions_cuda(self) -> bool:
        """Whether any file of the project mentions CUDA (nor an accelerator,
        nor a local rank). Text with no project around it is not taken for
        CPU code: nothing says it runs on the CPU."""
        return not self.complete or any(f.mentions_cuda for f in self.modules)

    def cuda_near(self, module: str | None) -> bool:
        """Whether the modules linked to `module` by imports (either way,
        transitively) may run CUDA code; True when that cannot be told. A
        device behind an option (`--cuda`, `--accel`) is CUDA: the program
        runs on the GPU when used as intended. Text with no project around it
        is judged by its own code: CPU only where it hides every GPU from
        itself or its settings are written as CUDA off (`Namespace(cuda=False)`)."""
        if module is None or module not in self._by_name:
            return True
        if not self.complete:
            return not self._by_name[module].on_cpu_as_written
        component = self._components[module]
        cuda = self._component_cuda.get(component)
        if cuda is None:
            cuda = self._component_cuda[component] = any(
                self._by_name[m].cuda_by_default for m in component)
        return cuda

    def saves_of(self, file: str, reader: str | None = None) -> list[bool]:
        """For each file of the program of `reader` (of the project when it
        is not known) that `torch.save`s a file this name can be
        (`finetune_*_0.pkl` matches a template), whether it holds no GPU
        tensors there."""
        return [cpu for facts in self.program_of(reader) for name, cpu in facts.saves.items()
                if same_file(name, file)]

    def program_of(self, module: str | None) -> list[ModuleFacts]:
        """The modules that may write the files `module` reads: those linked
        to it by imports, and the scripts of its folder and of the folders
        above and below it (`tools/train.py` saves what `tools/test.py`
        loads). Not a sibling folder's scripts: a collection of tasks
        (`Code-Code/Defect-detection/`, `Code-Code/CodeCompletion/`) are
        separate programs, each reading only what it writes. Every module
        when `module` is not known."""
        facts = self._by_name.get(module) if module is not None else None
        if facts is None:
            return list(self.modules)
        folder = os.path.dirname(facts.path)
        linked = self._components.get(facts.module, frozenset())
        return [other for other in self.modules
                if other.module in linked or _nested(os.path.dirname(other.path), folder)]

    def linked(self, module: str | None) -> list[ModuleFacts]:
        """The checked modules linked to `module` by imports, either way and
        transitively, itself included (every module when it is not known):
        the program it belongs to, not the unrelated scripts beside it."""
        component = self._components.get(module) if module is not None else None
        if component is None:
            return list(self.modules)
        return [self._by_name[m] for m in component]

    def parameter_flow(self, callee: str, slot: int | str) -> str:
        """What the project's function `callee` (as imported: `pkg.utils.f`)
        does with its argument at `slot` (a position, or the name a keyword
        argument gives): "gpu", "stay" or "unknown"."""
        owner, _, name = callee.rpartition(".")
        if not owner:
            return "unknown"
        verdicts = set()
        for facts in self.modules:
            flows = facts.parameter_flows.get(name)
            if flows is None or not _same_module(owner.lstrip(".").split("."),
                                                 facts.module.split(".")):
                continue
            names = facts.parameter_names.get(name, ())
            if isinstance(slot, int):
                position = slot
            elif slot in names:
                position = names.index(slot)
            else:  # `**kwargs` may take it: what becomes of it is not told
                verdicts.add("unknown")
                continue
            verdicts.add(flows[position] if position < len(flows) else "unknown")
        return verdicts.pop() if len(verdicts) == 1 else "unknown"

    def runs_callback_grad_off(self, callee: str, position: int) -> bool:
        """Whether the project's function `callee` (as imported: `pkg.utils.f`,
        also re-exported by the package `pkg.utils`) calls what it is handed
        at `position` only with grad disabled."""
        owner, _, name = callee.rpartition(".")
        named = owner.lstrip(".").split(".")
        verdicts = {position in facts.callbacks_run_grad_off[name] for facts in self.modules
                    if name in facts.callbacks_run_grad_off and owner and (
                        _same_module(named, facts.module.split("."))
                        or _same_module(named, facts.module.split(".")[:-1]))}
        return verdicts == {True}

    def importers_of(self, module: str) -> list[ModuleFacts]:
        """The checked modules whose imports name `module`."""
        return [facts for facts in self.modules if facts.module != module
                and any(module in self._resolve_import(facts.module, imported)
                        for imported in facts.imports)]

    @cached_property
    def _components(self) -> dict[str, frozenset[str]]:
        """Each module's set of modules linked to it by imports (either way,
        transitively). Importing `pkg.sub.mod` runs `pkg` and `pkg.sub` first,
        so a module is linked to the packages above what it imports too."""
        links: dict[str, set[str]] = {m.module: set() for m in self.modules}
        for facts in self.modules:
            for imported in facts.imports:
                for target in self._resolve_import(facts.module, imported):
                    parts = target.split(".")
                    for end in range(len(parts), 0, -1):
                        run = ".".join(parts[:end])
                        if run != facts.module and run in links:
                            links[facts.module].add(run)
                            links[run].add(facts.module)
        components: dict[str, frozenset[str]] = {}
        for start in links:
            if start in components:
                continue
            component, pending = {start}, [start]
            while pending:
                for linked in links[pending.pop()]:
                    if linked not in component:
                        component.add(linked)
                        pending.append(linked)
            components.update(dict.fromkeys(component, frozenset(component)))
        return components

    def _resolve_import(self, importer: str, imported: str) -> list[str]:
        """The project's modules an import names: relative to the importer's
        package, else a sibling module (a script's folder is on `sys.path`,
        so scripts import their neighbours by bare name), else the exact
        dotted name under the root, else the one module it is the tail of (a
        source folder put on `sys.path`; none when several are: which one
        runs cannot be told)."""
        key = (importer, imported)
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = self._resolve_uncached(importer, imported)
        return found

    def _resolve_uncached(self, importer: str, imported: str) -> list[str]:
        package = importer.rsplit(".", 1)[0] if "." in importer else ""
        facts = self._by_name.get(importer)
        if facts is not None and os.path.basename(facts.path) == "__init__.py":
            package = importer  # a package's `from .pretrain import X` is inside it
        if imported.startswith("."):
            level = len(imported) - len(imported.lstrip("."))
            base = package.split(".") if package else []
            base = base[:len(base) - (level - 1)] if level > 1 else base
            target = ".".join([*base, imported.lstrip(".")]).strip(".")
            return [target] if target in self._by_name else []
        sibling = f"{package}.{imported}" if package else imported
        for candidate in (sibling, imported):
            if candidate in self._by_name:
                return [candidate]
        candidates = self._by_tail.get(imported, [])
        return candidates if len(candidates) == 1 else []  # `config` in five folders: no link

    @cached_property
    def _by_name(self) -> dict[str, ModuleFacts]:
        return {m.module: m for m in self.modules}

    @cached_property
    def _by_tail(self) -> dict[str, list[str]]:
        tails: dict[str, list[str]] = {}
        for name in self._by_name:
            parts = name.split(".")
            for i in range(1, len(parts)):
                tails.setdefault(".".join(parts[i:]), []).append(name)
        return tails

    def results_of(self, importer: str, imported: str, function: str) -> list[bool | None]:
        """What `function` of the checked module(s) that `importer` names as
        `imported` returns (`ModuleFacts.returns`); empty when none defines it."""
        return [self._by_name[target].returns[function]
                for target in self._resolve_import(importer, imported)
                if function in self._by_name[target].returns]

    def moves_batches(self, importer: str, imported: str, name: str, depth: int = 0) -> bool:
        """Whether `name` of the module `importer` names as `imported` is a
        class of the project that copies the batches it is given to a CUDA
        device (`batch_movers`), also through a package that re-exports it
        (`from .pretrain import BERTTrainer` in `trainer/__init__.py`)."""
        for target in self._resolve_import(importer, imported):
            facts = self._by_name[target]
            if name in facts.batch_movers:
                return True
            if depth < 3 and any(self.moves_batches(target, source, name, depth + 1)
                                 for source in _reexported_from(facts, name)):
                return True
        return False

    def defining(self, importer: str, imported: str, function: str) -> list[ModuleFacts]:
        """The facts of the checked modules that `importer` names as
        `imported` and that define `function` at top level."""
        named = (self._by_name[target] for target in self._resolve_import(importer, imported))
        return [facts for facts in named if function in facts.defines]

    def settle(self, findings: Iterable[Finding],
               shows_preview: Callable[[str], bool] | None = None) -> list[Finding]:
        """The findings that stand once the project is known, sorted; those
        the project leaves in preview only where `shows_preview(code)` (by
        default all of them, marked)."""
        settled = []
        for finding in findings:
            condition = finding.unless
            if condition is None:
                settled.append(finding)
                continue
            if condition.drops(self):
                continue
            preview = finding.preview or condition.previews(self)
            if preview and shows_preview is not None and not shows_preview(finding.code):
                continue
            settled.append(replace(finding, unless=None, preview=preview,
                                   related=finding.related + tuple(condition.related(self))))
        return sorted(settled)

    def worker_uses(self, module: str, function: str) -> list[bool]:
        """For each other file whose DataLoaders run `module.function` in their
        workers: whether all of them there run in the main process."""
        found: list[bool] = []
        for facts in self.modules:
            if facts.module != module:
                found.extend(main_process for callee, main_process in facts.worker_functions.items()
                             if self._names_function(facts.module, callee, module, function))
        return found

    def calls_of(self, module: str, function: str) -> list[tuple[ModuleFacts, CallFact]]:
        """Calls from other files that name `module.function` through an
        import (`from utils import evaluate`, `import pkg.utils as u`,
        `from .utils import evaluate`), resolved from the calling module as
        Python would (`_resolve_import`): `utils` next to another script is
        another module."""
        found: list[tuple[ModuleFacts, CallFact]] = []
        for facts in self.modules:
            if facts.module == module:
                continue  # the file's own calls were judged by its module index
            found.extend((facts, call) for call in facts.calls
                         if self._names_function(facts.module, call.callee, module, function))
        return found

    def dropped_by_every_caller(self, module: str, function: str, position: int) -> bool:
        """Whether other files call `module.function`, and every such call
        unpacks its result and never reads what it gets at `position`."""
        calls = self.calls_of(module, function)
        return bool(calls) and all(position in call.dropped for _, call in calls)

    def runs_grad_off(self, facts: ModuleFacts, call: CallFact) -> bool:
        """Whether `call` (made in `facts`' file) runs with grad off: under
        `no_grad` there, or in a function its file calls only so and no other
        file calls with grad on (one file further out: a chain of helpers
        reaching across more files is taken as running with grad on)."""
        if call.grad_disabled:
            return True
        return bool(call.within_grad_off) and all(
            outer.grad_disabled for _, outer in self.calls_of(facts.module, call.within_grad_off))

    def _names_function(self, importer: str, callee: str, module: str, function: str,
                        depth: int = 0) -> bool:
        """Whether `callee`, as `importer` names it (`pkg.utils.evaluate`,
        `.utils.evaluate`), is `function` of `module`, also through packages
        that re-export it (`from .make_dataloader import make_dataloader` in
        `datasets/__init__.py`, called as `datasets.make_dataloader`)."""
        owner, _, name = callee.rpartition(".")
        if name != function or not owner:
            return False
        for target in self._resolve_import(importer, owner):
            if target == module:
                return True
            facts = self._by_name[target]
            if depth < 3 and function not in facts.defines and any(
                    self._names_function(target, f"{source}.{function}", module, function,
                                         depth + 1)
                    for source in _reexported_from(facts, function)):
                return True
        return False

    def method_verdicts(self, module: str, method: str) -> list[bool]:
        """For each definition of `method` in a class of the modules linked to
        `module`: whether it returns plain numbers only (each file read once)."""
        found = []
        for facts in self.linked(module):
            if facts.path.endswith(".py"):
                key = (facts.path, method)
                if key not in self._method_verdicts:
                    self._method_verdicts[key] = _method_verdicts(facts.path, method)
                found += self._method_verdicts[key]
        return found

    def calls_written(self, path: str, written: str) -> list[tuple[int, int]]:
        """(line, column) of each call written so in the file at `path`."""
        positions = self._call_positions.get(path)
        if positions is None:
            positions = self._call_positions[path] = _calls_by_written_name(path)
        return positions.get(written, [])

    def position_of(self, facts: ModuleFacts, call: CallFact) -> tuple[int, int] | None:
        """(line, column), 1-based, of a call recorded in `facts`: the n-th call
        written so in the file is found again with Python's own parser, which
        costs a fraction of libcst's and runs only for the calls a finding
        cites. None when the file cannot be read again or no longer matches,
        and for a notebook (its lines are not the file's)."""
        if facts.path.endswith(".ipynb"):
            return None
        same = [c for c in facts.calls if c.written == call.written]
        index = next(i for i, c in enumerate(same) if c is call)
        found = self.calls_written(facts.path, call.written)
        return found[index] if len(found) == len(same) else None


def read_tree(path: str, needle: bytes = b"") -> tuple[str, ast.Module] | None:
    """The file's text and Python's own tree of it (a fraction of libcst's
    cost), read again for a finding that asks; None when it cannot be read or
    parsed, or does not contain `needle`."""
    try:
        data = read_regular(path)
        if needle not in data:
            return None
        text = importlib.util.decode_source(data)
        return text, parse_quietly(data)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError, LookupError):
        return None


def _calls_by_written_name(path: str) -> dict[str, list[tuple[int, int]]]:
    """Every call of a dotted name in the file, in source order, by that name."""
    read = read_tree(path)
    if read is None:
        return {}
    text, tree = read
    lines = LINE_BREAK.split(text)
    found: dict[str, list[tuple[int, int]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast_dotted_name(node.func)
            if name is not None:
                found.setdefault(name, []).append((node.lineno, node.col_offset))
    positions = {}
    for name, starts in found.items():
        # ast columns count UTF-8 bytes; memlint's count characters
        positions[name] = [(line, len(lines[line - 1].encode("utf-8")[:offset]
                                      .decode("utf-8", "replace")) + 1)
                           for line, offset in sorted(starts)]
    return positions


def ast_dotted_name(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _same_module(named: list[str], defined: list[str]) -> bool:
    """`utils` names `src.utils`, `src.utils` names `utils` (checked from
    another root): one dotted path is a tail of the other."""
    shorter = min(len(named), len(defined))
    return shorter > 0 and named[-shorter:] == defined[-shorter:]


def _nested(folder: str, other: str) -> bool:
    """One folder is the other or lies inside it."""
    inner, outer = sorted((folder, other), key=len, reverse=True)
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)
