"""What MEM007 reads from a file's saves (is this file written from CPU
values?) and from the code after a load (does the loaded object stay alive?).
What a saved value holds is asked of `analysis/saved_files.py`; this module
keeps the walk-order state the rule needs for it."""

from __future__ import annotations

import re
from typing import NamedTuple

import libcst as cst

from memlint.analysis.walker import children
from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import Context
from memlint.analysis.devices import moves_to_cuda, string_value
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.names import call_arg, defines_method, dotted_name
from memlint.analysis.torch_api import LIBRARY_FILES, LIBRARY_SAVES
from memlint.analysis.saved_files import (
    LIBRARIES, calls_in, download_destination, file_named_in, holds_an_optimizer,
    holds_arguments, holds_optimizer_state, holds_other_than_weights, is_item, literal_key,
    moved_expression, path_key, returned_by_download, saves_cpu_values, strings_in)


class Load(NamedTuple):
    """A load without map_location, as the walk met it; judged in `finish`."""

    node: cst.Call
    statement: cst.CSTNode | None
    into: str | None  # `net` of `net.load_state_dict(torch.load(p))`
    model: str | None  # the name it is bound to, "<chained>" for `torch.load(p).cuda()`
    saved_before: bool | None  # saved just before in the same function: from CPU values?
    single: bool  # in code only one process runs
    file: str | None  # the file name its path spells
    gpu_before: set[str]  # the names already moved to a GPU when it runs
    kept: cst.CSTNode | None  # the loop that runs while its name is still bound
    class_name: str | None  # the class whose method loads it
    function: cst.FunctionDef | None  # the function that loads it (None: the top level)
    fetched: bool  # a file the code downloads (`urlretrieve(url, path)`): a published one


class SavesSeen:
    """The saves of one file in walk order: which paths hold CPU values, the
    facts other files read (`ModuleFacts.saves`, `optimizer_saves`,
    `model_saves`), and where each model was last moved."""

    ctx: Context

    def __init__(self) -> None:
        #: the saves met so far in each function (None: module level): path -> CPU values?
        self.last_saves: dict[cst.FunctionDef | None, dict[str, bool]] = {}
        #: the path expressions of `torch.save` calls, by whether what they saved is on the CPU
        self.saved_on_cpu: set[str] = set()
        self.saved_maybe_gpu: set[str] = set()
        self.flat_saves: set[str] = set()  # paths saved a module's `state_dict()` itself
        #: names of models moved to a GPU so far (a model saved before is on the CPU)
        self.moved_to_gpu: set[str] = set()
        #: where each model name was last moved, in walk order: "cpu" after a
        #: statement `model.eval().cpu()` (nn.Module moves in place), "gpu" after `.cuda()`
        self.last_move: dict[str, str] = {}
        self.loads_seen = False  # a torch.load came before (what is saved may be what it read)
        #: (function, name) of state dicts whose every item was moved to the CPU
        self.items_on_cpu: set[tuple[cst.FunctionDef | None, str]] = set()
        #: (function, name) of dicts given an entry not shown on the CPU
        self.entries_off_cpu: set[tuple[cst.FunctionDef | None, str]] = set()
        self.built_by_plain_class: set[cst.Call] = set()  # loads in a plain class's __init__
        #: (function, path) of files downloaded so far (`urlretrieve(url, path)`)
        self.downloaded: set[tuple[cst.FunctionDef | None, str]] = set()

    def note_other_writes(self, node: cst.Call, qualified: str | None) -> None:
        """`urlretrieve(url, path)`: `path` holds a published file;
        `trainer.save_model(out)`: a library writes the files it names
        (`adapter_model.bin`, `optimizer.pt`) from where the model is."""
        collector, key = FactCollector.of(self.ctx), download_destination(node, qualified)
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in LIBRARY_SAVES \
                and collector is not None:
            for file, on_cpu in LIBRARY_FILES.items():
                collector.facts.saves[file] = collector.facts.saves.get(file, True) and on_cpu
        self.downloaded.update([(self.ctx.function, key)] if key is not None else [])

    def fetched(self, path: cst.BaseExpression) -> bool:
        """Whether a load's path names a file downloaded before it in the
        same function, or one a hub download returns."""
        return (self.ctx.function, path_key(path)) in self.downloaded \
            or returned_by_download(path, self.ctx)

    def holds_no_gpu_tensors(self, node: cst.Call) -> bool:
        """A data or cache file, or pretrained weights loaded while a module is built."""
        names = [dotted_name(node.args[0].value) or "" if node.args else ""]
        if node.args:  # `os.path.join(out_dir, "scheduler.pt")`: the literals of the path
            names += [string_value(n) or "" for n in strings_in(node.args[0].value)]
        parent = self.ctx.parent
        if isinstance(parent, cst.Assign):
            names += [n for t in parent.targets for n in names_in(t.target)]
        if isinstance(parent, cst.Subscript):  # `torch.load(p)["images"]`
            names.append(literal_key(parent) or "")
        if any(DATA_FILE.search(name) for name in names if name):
            return True
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is not None and defines_method(class_def, "__getitem__"):
            return True  # a Dataset reading one sample's file, not a checkpoint
        # pretrained weights read while an object is built: on the CPU for a
        # module; a plain class's (a trainer's) is judged by what it takes out
        # of the file (`ckpt["optimizer"]`: a training checkpoint), in `finish`
        if function is None or function.name.value != "__init__" or class_def is None:
            return False
        if not builds_a_module(class_def):
            self.built_by_plain_class.add(node)
            return False
        return True

    def note_save(self, node: cst.Call) -> None:
        """`torch.save(value, path)`: whether `value` is on the CPU, for the
        loads of this file and (through the collector) of the others."""
        saved, path = node.args[0].value, node.args[1].value
        made_here = self._made_without_cuda(saved)
        moved_to_cpu = self._moved_to_cpu(saved)
        on_cpu = saves_cpu_values(saved, self.ctx, self.moved_to_gpu) or holds_arguments(saved) \
            or self._items_moved_to_cpu(saved) or made_here is True or moved_to_cpu
        file = file_named_in(path, self.ctx)
        collector = FactCollector.of(self.ctx)
        if file is None and collector is not None:
            collector.facts.saves_unnamed = True
        if file is not None and collector is not None:
            saves = collector.facts.saves
            saves[file] = saves.get(file, True) and on_cpu
            if holds_an_optimizer(saved, self.ctx):
                collector.facts.optimizer_saves.add(file)
        key = path_key(path)
        if key is not None:
            (self.saved_on_cpu if on_cpu else self.saved_maybe_gpu).add(key)
            if _state_dict_of(self.ctx.binding(dotted_name(saved) or "") or saved):
                self.flat_saves.add(key)  # no `["state_dict"]` entry to take out
            self.last_saves.setdefault(self.ctx.function, {})[key] = on_cpu
        shown_moved = moved_to_cpu or self._items_moved_to_cpu(saved)
        if collector is not None and (made_here is not None or shown_moved) and not (
                holds_optimizer_state(saved) or holds_arguments(saved)
                or holds_other_than_weights(saved, self.ctx)):
            collector.facts.model_saves.append(on_cpu)

    def saved_before(self, key: str | None) -> bool | None:
        """The save of that path just before, in the same function or notebook:
        what a load reads back when it runs straight after it."""
        return self.last_saves.get(self.ctx.function, {}).get(key) if key is not None else None

    def visit_For(self, node: cst.For) -> None:
        """`for k, v in sd.items(): sd[k] = v.cpu()`, `for k in sd.keys():
        sd[k] = sd[k].cpu()`: every tensor of `sd` is moved to the CPU (KAIR's,
        BasicSR's and CODA-Prompt's savers), so saving `sd` after it saves CPU
        values."""
        loop = node.iter.func if isinstance(node.iter, cst.Call) else None
        method = loop.attr.value if isinstance(loop, cst.Attribute) else None
        if method == "items" and isinstance(node.target, cst.Tuple) \
                and len(node.target.elements) == 2:
            key, value = (dotted_name(e.value) for e in node.target.elements)
        elif method == "keys" or (loop is None and dotted_name(node.iter) is not None):
            key, value = dotted_name(node.target), None  # `sd[k] = sd[k].cpu()`
        else:
            return
        container = dotted_name(loop.value if isinstance(loop, cst.Attribute) else node.iter)
        if container is None or key is None:
            return
        statements = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        for statement in statements:
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                moved = moved_expression(small.value) if isinstance(small, cst.Assign) \
                    and len(small.targets) == 1 \
                    and is_item(small.targets[0].target, container, key) else None
                if moved is not None and (dotted_name(moved) == value if value is not None
                                          else is_item(moved, container, key)):
                    self.items_on_cpu.add((self.ctx.function, container))

    def note_entry(self, node: cst.Assign) -> None:
        """`save_dict[key] = state_dict`: a dict filled with state dicts whose
        every tensor was moved to the CPU holds CPU values too (BasicSR's
        `save_network`); one entry of anything not shown on the CPU, and it may not."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
            return
        container = dotted_name(node.targets[0].target.value)
        if container is None:
            return
        value, held = node.value, (self.ctx.function, container)
        if self._items_moved_to_cpu(value):
            if held not in self.entries_off_cpu:
                self.items_on_cpu.add(held)
        elif moved_expression(value) is None:  # `sd[k] = sd[k].cpu()` is on the CPU
            self.entries_off_cpu.add(held)
            self.items_on_cpu.discard(held)

    def _made_without_cuda(self, saved: cst.BaseExpression) -> bool | None:
        """Saved by a module that never mentions CUDA, from values it made
        itself with its own code or a library's (a conversion script's
        `vgg19().state_dict()`), not from what a caller handed its function or
        an imported class of the project built (either may live on a GPU).
        None: the module also loads checkpoints, so what it saves may be what
        it loaded (a converter passes a file's devices on; it says nothing of
        them)."""
        collector = FactCollector.of(self.ctx)
        if collector is None or collector.facts.mentions_cuda:
            return False
        if self.loads_seen:
            return None
        function = self.ctx.function
        parameters: set[str] = set()
        if function is not None:
            parameters = {p.name.value for p in (*function.params.params,
                                                 *function.params.kwonly_params)}
            for extra in (function.params.star_arg, function.params.star_kwarg):
                if isinstance(extra, cst.Param):
                    parameters.add(extra.name.value)
        read: set[str] = set()
        pending = [saved]
        for _ in range(8):  # the names it reads, through their bindings
            if not pending:
                break
            for node in pending:
                for call in calls_in(node):
                    qualified = self.ctx.qualify(call.func)
                    if qualified is not None and not qualified.startswith(LIBRARIES):
                        return False  # `Agent(...)` of the project's dqn_agent.py
            names = {n.split(".", 1)[0] for node in pending for n in names_in(node)} - read
            read |= names
            pending = [b for n in names for b in self._origins(n) if b is not None]
        return not read & parameters

    def _origins(self, name: str) -> list[cst.BaseExpression | None]:
        """What `name` was made from: its binding, or the iterable of the loop
        (`for state in states:`) or the value it was unpacked from."""
        site = self.ctx.binding_site(name)
        loop = self.ctx.loop_target(name)
        return [self.ctx.binding(name), site.unpacked_from if site is not None else None,
                loop.iter if isinstance(loop, cst.For) else None]

    def _items_moved_to_cpu(self, saved: cst.BaseExpression) -> bool:
        name = dotted_name(saved)
        return name is not None and (self.ctx.function, name) in self.items_on_cpu

    def note_move(self, node: cst.Call, name: str | None) -> None:
        """`m.cuda()` of a name: on a GPU from here. `transformer.eval().cpu()`
        as a statement of its own, or `model = model.cpu()`: on the CPU from
        here until moved back (not `torch.save(model.cpu().state_dict())`,
        judged where it is saved)."""
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        if name is not None and moves_to_cuda(node, self.ctx):
            self.moved_to_gpu.add(name)
            self.last_move[name] = "gpu"
        parent = self.ctx.parent
        if not (type(parent) is cst.Expr or (type(parent) is cst.Assign
                                             and len(parent.targets) == 1
                                             and parent.value is node)):
            return
        target = call_arg(node, "device", position=0)
        if not (func.attr.value == "cpu" or (func.attr.value == "to" and target is not None
                                             and string_value(target.value) == "cpu")):
            return
        receiver = func.value
        while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) \
                and receiver.func.attr.value in ("eval", "train", "float", "double", "half"):
            receiver = receiver.func.value
        moved = dotted_name(receiver)
        if moved is not None:  # a module's `.cpu()` moves it in place, whatever it is bound to
            self.last_move[moved] = "cpu"

    def _moved_to_cpu(self, saved: cst.BaseExpression) -> bool:
        """`torch.save(model.state_dict(), ...)` after `model.cpu()` moved it,
        or moved the module it is part of (`copy.convnet.state_dict()` after
        `copy.cpu()`); a dict of such state dicts beside bookkeeping
        (`{"tasks": self._cur_task, "convnet": ..., "fc": ...}`: PyCIL)."""
        value = self.ctx.resolve(saved)
        if isinstance(value, cst.Dict):
            entries = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
            states = [e for e in entries if _state_dict_of(e) is not None]
            return bool(states) and len(entries) == len(value.elements) \
                and all(self._moved_to_cpu(e) for e in states) \
                and all(self._bookkeeping(e) for e in entries if e not in states)
        name = _state_dict_of(value)
        parts = name.split(".") if name is not None else []
        for end in range(len(parts), 0, -1):  # the last move of it or of what holds it
            move = self.last_move.get(".".join(parts[:end]))
            if move is not None:
                return move == "cpu"
        return False

    def _bookkeeping(self, value: cst.BaseExpression) -> bool:
        """A literal, or a name or attribute neither moved to a GPU here nor
        bound to a call here (`self._cur_task`, `test_acc`)."""
        name = dotted_name(value)
        if name is None:
            return isinstance(value, (cst.SimpleString, cst.Integer, cst.Float))
        return name not in self.moved_to_gpu and not isinstance(self.ctx.binding(name), cst.Call)


def _state_dict_of(value: cst.BaseExpression) -> str | None:
    """`net.fc` for `net.fc.state_dict()`."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "state_dict":
        return dotted_name(value.func.value)
    return None


def kept_alive(name: str, ancestors: list[cst.CSTNode]) -> cst.CSTNode | None:
    """Whether `name`, bound by the statement at the end of `ancestors`, is
    still bound while a loop runs later in the same function or script (a
    training or evaluation loop): what it holds stays on the GPU all along,
    not only while it is copied. The loop, or None (a `del name` before it)."""
    for i in range(len(ancestors) - 1, 0, -1):
        suite, inner = ancestors[i - 1], ancestors[i]
        if isinstance(suite, (cst.FunctionDef, cst.ClassDef)):
            return None
        body = suite.body if isinstance(suite, (cst.Module, cst.IndentedBlock)) else None
        if not isinstance(body, (list, tuple)) or inner not in body:
            continue
        for statement in body[body.index(inner) + 1:]:
            found = _loop_or_del(statement, name)
            if found is not None:
                return found if isinstance(found, cst.CSTNode) else None
    return None


def _loop_or_del(node: cst.CSTNode, name: str) -> cst.CSTNode | bool | None:
    """The first loop, False at `del name`, None when neither comes. A loop
    over the loaded object itself (`for k, v in checkpoint.items()`, renaming
    its keys) is using it, not running while it is kept: looked past."""
    if isinstance(node, cst.For) and name in names_in(node.iter):
        return None
    if isinstance(node, (cst.For, cst.While)):
        return node
    if isinstance(node, cst.Del) and name in names_in(node.target):
        return False
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        return None
    for child in children(node):
        found = _loop_or_del(child, name)
        if found is not None:
            return found
    return None


def becomes_the_model(model: str | None, used_as_model: set[str],
                      entries_taken: dict[str, set[str]],
                      copied_into_modules: dict[str, str | None]) -> bool:
    """The loaded object is the model itself, no copy of it: `torch.load(p).cuda()`,
    `net = torch.load(p)` then `net.eval()`, `encoder, decoder = torch.load(p)`,
    or a dict whose entry becomes the model (`net = checkpoint["net"]`) and
    none of whose entries is copied into a module by `load_state_dict`."""
    if model is None:
        return False
    if model == "<chained>" or all(n in used_as_model for n in model.split("|")):
        return True
    taken = entries_taken.get(model, set())
    return bool(taken & used_as_model) and model not in copied_into_modules


def builds_a_module(class_def: cst.ClassDef) -> bool:
    """Whether the class may be a module: it defines `forward` or derives
    from something (`nn.Module`, a base of another file); a plain class
    (`class Trainer(object):`) holding a GPU model is not one."""
    return defines_method(class_def, "forward") or any(
        dotted_name(base.value) != "object" for base in class_def.bases)

def loaded_into(ctx: Context) -> str | None:
    """`optimizer` for `optimizer.load_state_dict(torch.load(p)...)`."""
    for ancestor in reversed(ctx.ancestors[:-1]):
        if isinstance(ancestor, cst.Call):
            func = ancestor.func
            if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict":
                return dotted_name(func.value)
            return None
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return None
    return None

def assigned_name(ctx: Context) -> str | None:
    """`ckpt` of `ckpt = torch.load(p)`; `encoder|decoder` of `encoder,
    decoder = torch.load(p)` (whole pickled modules, unpacked)."""
    parent = ctx.parent
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = parent.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [dotted_name(e.value) for e in target.elements]
            known = [name for name in names if name]
            return "|".join(known) if names and len(known) == len(names) else None
        return dotted_name(target)
    return None


#: What is done to a model and not to a dict of tensors.
MODEL_USES = {"cuda", "to", "eval", "train", "parameters", "named_parameters", "forward",
              "modules", "children", "half", "float", "zero_grad", "generate", "predict"}
#: What a schedule or a scaler (`GradScaler`, a feature scaler) restores: a few
#: numbers, whose copy costs nothing wherever it lands.
NUMBERS_STATE = re.compile(r"scheduler|scaler", re.IGNORECASE)
#: Files that hold data, caches or bookkeeping rather than GPU tensors (random
#: number generators' states are host byte tensors, also CUDA's).
DATA_FILE = re.compile(r"(cache|vocab|corpus|dataset|processed|examples|scheduler|scaler|"
                       r"rng_state|slices|"
                       r"^data$|\.data$|_data$|^data_|^images$|^labels$)", re.IGNORECASE)
