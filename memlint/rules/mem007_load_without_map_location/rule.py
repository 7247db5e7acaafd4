"""`torch.load` without `map_location` puts tensors back on the GPU they were saved from."""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import Context
from memlint.analysis.devices import moves_to_cuda, string_value
from memlint.analysis.flows import root_name
from memlint.analysis.gpu_selection import in_single_process_arm
from memlint.analysis.names import call_arg, defines_method, dotted_name
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.saved_files import (
    DATA_KEYS, LIBRARIES, OPTIMIZER_NAME, calls_in, file_named_in, holds_an_optimizer,
    holds_arguments,
    holds_optimizer_state, is_item, literal_key, moves_to_cpu, path_key, saves_cpu_values,
    strings_in)
from memlint.analysis.project import (Condition, Either, UnlessProjectOnCpu,
                                      UnlessProjectSavesModelsOnCpu, UnlessSavedWithoutGpuTensors,
                                      UnlessSavedWithoutOptimizer)
from memlint.analysis.torch_api import LOADS, RANK_STARTERS, SAVES
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.rewrites import with_keyword



class LoadWithoutMapLocation(Rule):
    """torch.load(...) without map_location restores tensors onto the device they
    were saved from: every rank of a job lands on cuda:0, a checkpoint loaded
    only to copy into a model holds a second copy of the weights on the GPU
    while it is copied, and a GPU checkpoint cannot be loaded on a CPU host.

    Left alone where the file cannot hold GPU tensors: it was saved in the same
    file from CPU values (`.cpu()`, a model never moved to a GPU), it is a data
    or cache file (`cached_features`, a dataset's processed file, `vocab`,
    `scheduler.pt`), it holds pretrained weights loaded while a module is
    being built (`__init__`), or the project never mentions CUDA."""

    code = "MEM007"

    RANKS = ("torch.load() without map_location in a multi-process job: every rank restores "
             "the checkpoint onto the GPU it was saved from (usually cuda:0), one copy per "
             "rank on that GPU; pass map_location=\"cpu\" or the rank's own device")
    COPIED = ("torch.load() without map_location: a second copy of the checkpoint on the "
              "GPU it was saved from while load_state_dict copies it (as large as the weights, "
              "optimizer state included), and a failed load on a host without that GPU; pass "
              "map_location=\"cpu\"")
    RESTORED = ("torch.load() without map_location: every tensor restored onto the GPU it was "
                "saved from (an extra copy on the GPU until the loaded object is freed; the "
                "load fails on a host without that GPU); pass map_location=\"cpu\" or the "
                "target device")
    OPTIMIZER_KEPT = ("torch.load() without map_location: the checkpoint also holds the "
                      "optimizer's state, restored onto the GPU it was saved from and never "
                      "used here; pass map_location=\"cpu\" (and move the model where it runs)")

    VALID = [
        # whole pickled modules, unpacked, and a dict whose entry becomes the model
        "import torch\nencoder, decoder = torch.load('./model/conv_autoencoder.pkl')\n"
        "encoder.cuda()\ndecoder.eval()",
        "import torch\ncheckpoint = torch.load('./checkpoint/wide-resnet.t7')\n"
        "net = checkpoint['net']\nbest_acc = checkpoint['acc']\nnet.cuda()",
        # GraphMAE: `model = model.cpu()` before the save its load reads back
        "import torch\ndef main(model, load_model, device):\n    model.to(device)\n"
        "    model = model.cpu()\n    if load_model:\n"
        "        model.load_state_dict(torch.load('checkpoint.pt'))\n"
        "    torch.save(model.state_dict(), 'checkpoint.pt')",
        # the program's own saves move the model to the CPU first, in a statement of its own
        "import torch\ndef train(model, path):\n    model.cuda()\n    model.eval().cpu()\n"
        "    torch.save(model.state_dict(), path)\ndef stylize(path):\n    net = Net()\n"
        "    net.load_state_dict(torch.load(path))\n    net.cuda()",
        'import torch\nstate = torch.load("ckpt.pt", map_location="cpu")',
        'import torch\nstate = torch.load(path, map_location=device)',
        'import torch\nstate = torch.load(path, map_location=lambda s, loc: s)',
        'import torch\nstate = torch.load(path, "cpu")',
        'import torch\nstate = torch.load(path, **load_kwargs)',
        'import json\nconfig = json.load(f)',
        'import pickle\nobj = pickle.load(f)',
        'import numpy as np\narr = np.load("x.npy")',
        'from safetensors.torch import load_file\nstate = load_file(path)',
        'import torch\ndef load(path):\n    return open(path).read()\nload("x")',
        # shapes from real code that cannot restore GPU tensors:
        # saved in the same file from CPU values
        'import torch\nmodel.cuda()\ntorch.save(model.cpu().state_dict(), "best.pt")\n'
        'model.load_state_dict(torch.load("best.pt"))',
        'import torch\nx = torch.arange(4)\ntorch.save(x, "x-file")\nx2 = torch.load("x-file")',
        # data and cache files
        'import torch\nx.cuda()\nfeatures = torch.load(cached_features_file)',
        'import torch\nx.cuda()\nself.data, self.slices = torch.load(self.processed_paths[0])',
        'import torch\nx.cuda()\nscheduler.load_state_dict(torch.load("scheduler.pt"))',
        # a model built here and saved before it was moved to a GPU
        'import torch\nmodel = NeuralNetwork(10, 2)\ntorch.save(model.state_dict(), "model.pth")\n'
        'model.load_state_dict(torch.load("model.pth"))\nmodel.cuda()',
        # saved through a project's helper that says it moves to the CPU
        'import torch\nmodel.cuda()\ntorch.save(as_cpu(model.state_dict()), "best.pt")\n'
        'model.load_state_dict(torch.load("best.pt"))',
        # a whole pickled model: what is loaded becomes the model, no second copy
        'import torch\nmodel = torch.load(args.checkpoint)\nmodel.eval()\nmodel.cuda()',
        # a schedule's state, named inside the path, and a data set indexed as it is loaded
        'import os\nimport torch\nmodel.cuda()\n'
        'scheduler.load_state_dict(torch.load(os.path.join(out, "scheduler.pt")))',
        'import torch\nmodel.cuda()\nimages = torch.load("insect_train.pt")["images"][:5]',
        # a data set saved as tensors: no model state to copy
        'import torch\nx.cuda()\ntrain = torch.load("insect_train.pt")\n'
        'ds = TensorDataset(train["images"], train["labels"])',
        # optimizer.load_state_dict moves each state onto its parameter's device
        'import torch\nactor.cuda()\nself.actor_optimizer.load_state_dict(torch.load(f + "_opt"))',
        # the CPU branch of an `if` on the GPU
        'import torch\nif torch.cuda.is_available():\n'
        '    state = torch.load(p, map_location="cuda")\n'
        'else:\n    state = torch.load(p)',
        # pretrained weights loaded while a module is built (on the CPU)
        'import torch\nclass FCN(torch.nn.Module):\n    def __init__(self):\n'
        '        super().__init__()\n        self.net = resnet101()\n'
        '        self.net.load_state_dict(torch.load(res101_path))\nmodel = FCN().cuda()',
    ]
    INVALID = [
        # the twin: the dict's weights are copied into a module built here
        "import torch\ncheckpoint = torch.load('./checkpoint/wide-resnet.t7')\n"
        "net = checkpoint['net']\nnet.cuda()\nhead.load_state_dict(checkpoint['head'])",
        # the twin: moved back to the GPU before the save
        "import torch\ndef main(model, load_model, device):\n    model.to(device)\n"
        "    model = model.cpu()\n    model = model.to(device)\n    if load_model:\n"
        "        model.load_state_dict(torch.load('checkpoint.pt'))\n"
        "    torch.save(model.state_dict(), 'checkpoint.pt')",
        'import torch\nmodel.cuda()\nstate = torch.load("ckpt.pt")',
        'import torch as T\nmodel.cuda()\nmodel.load_state_dict(T.load(path))',
        'from torch import load\ndevice = "cuda"\nstate = load(path)',
        'from torch import load as tload\nckpt = tload(args.resume)\nnet.to("cuda")',
        'import torch\nckpt = torch.load(path, weights_only=True)\nnet.cuda()',
        'import torch\nwith open(p, "rb") as f:\n    state = torch.load(f)\nnet.cuda()',
        'import torch.serialization\nstate = torch.serialization.load(path)\nnet.cuda()',
        'import torch\nnet.cuda()\n'
        'net.load_state_dict(torch.load(os.path.join(d, "best.pth"))["model"])',
        # a load returned as it is, in a file that also builds a loader from a call
        'import torch\nnet.cuda()\nloader = DataLoader(Frames(), batch_size=4)\n'
        'def resume():\n    return torch.load("ckpt.pt")',
        # saved from the GPU model in the same file
        'import torch\nmodel.cuda()\ntorch.save(model.state_dict(), "best.pt")\n'
        'model.load_state_dict(torch.load("best.pt"))',
        # every rank
        'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\n'
        'model.load_state_dict(torch.load(args.resume))',
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        #: (the call, its statement, loaded into a module, the name it is bound
        #: to, saved just before from CPU values, in code only one process runs)
        self.loads: list[tuple[cst.Call, cst.CSTNode | None, bool, str | None, bool | None,
                               bool]] = []
        #: the saves met so far in each function (None: module level): path -> CPU values?
        self.last_saves: dict[cst.FunctionDef | None, dict[str, bool]] = {}
        #: the path expressions of `torch.save` calls, by whether what they saved is on the CPU
        self.saved_on_cpu: set[str] = set()
        self.saved_maybe_gpu: set[str] = set()
        self.starts_ranks: cst.Call | None = None  # the evidence of a multi-process job
        #: names a load was assigned to, and how the code then uses them
        self.used_as_model: set[str] = set()
        self.used_as_data: set[str] = set()  # `TensorDataset(d["x"])`, `d["images"]`
        self.copied_into_modules: set[str] = set()  # `net.load_state_dict(d["model"])`
        #: names bound to an entry of a name (`net = checkpoint["net"]`: checkpoint -> net)
        self.entries_taken: dict[str, set[str]] = {}
        #: names of models moved to a GPU so far (a model saved before is on the CPU)
        self.moved_to_gpu: set[str] = set()
        #: where each model name was last moved, in walk order: "cpu" after a
        #: statement `model.eval().cpu()` (nn.Module moves in place), "gpu" after `.cuda()`
        self.last_move: dict[str, str] = {}
        self.loads_seen = False  # a torch.load came before (what is saved may be what it read)
        #: (function, name) of state dicts whose every item was moved to the CPU
        self.items_on_cpu: set[tuple[cst.FunctionDef | None, str]] = set()
        self.files: dict[cst.Call, str | None] = {}  # the file name each load reads
        self.built_by_plain_class: set[cst.Call] = set()  # loads in a plain class's __init__
        self.optimizer_entries: set[str] = set()  # names read by an optimizer key: `ckpt["optim"]`

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in RANK_STARTERS and self.starts_ranks is None:
            self.starts_ranks = node
        self._note_model_use(node)
        self._note_move_to_cpu(node)
        if qualified in SAVES and len(node.args) >= 2:
            saved, path = node.args[0].value, node.args[1].value
            on_cpu = saves_cpu_values(saved, self.ctx, self.moved_to_gpu) \
                or holds_arguments(saved)
            key = path_key(path)
            made_here = self._made_without_cuda(saved)
            moved_to_cpu = self._moved_to_cpu(saved)
            on_cpu = on_cpu or self._items_moved_to_cpu(saved) or made_here is True or moved_to_cpu
            file = file_named_in(path, self.ctx)
            collector = FactCollector.of(self.ctx)
            if file is not None and collector is not None:
                saves = collector.facts.saves
                saves[file] = saves.get(file, True) and on_cpu
                if holds_an_optimizer(saved, self.ctx):
                    collector.facts.optimizer_saves.add(file)
            if key is not None:
                (self.saved_on_cpu if on_cpu else self.saved_maybe_gpu).add(key)
                self.last_saves.setdefault(self.ctx.function, {})[key] = on_cpu
            if collector is not None and (made_here is not None or moved_to_cpu) and not (
                    holds_optimizer_state(saved) or holds_arguments(saved)):
                collector.facts.model_saves.append(on_cpu)
            return
        if qualified not in LOADS:
            return
        self.loads_seen = True
        if call_arg(node, "map_location", position=1) is not None:
            return
        if any(arg.star for arg in node.args):
            return  # map_location may come through *args / **kwargs
        if self.ctx.in_cpu_branch() or self.ctx.in_pytest_test or self._holds_no_gpu_tensors(node):
            return
        into = self._loaded_into()
        single = in_single_process_arm(self.ctx)
        if into is not None and "scheduler" in into.lower():
            return  # a learning-rate schedule's state: numbers, no tensors
        if into is not None and OPTIMIZER_NAME.search(into) and (single or not self._ranks()):
            # optimizer.load_state_dict keeps each state where its parameter is: no
            # copy in one process; with several, every rank's copy lands on cuda:0
            return
        if into is not None and self._is_engine(into):
            return  # a TensorRT engine's state (torch2trt's TRTModule): bytes and names
        model = "<chained>" if self._chained_as_model() else self._assigned_name()
        key = path_key(node.args[0].value) if node.args else None
        # the save of that path just before, in the same function or notebook:
        # what this load reads back when it runs straight after it
        saved_before = self.last_saves.get(self.ctx.function, {}).get(key) \
            if key is not None else None
        self.loads.append((node, self.statement(), into is not None, model, saved_before,
                           single))
        self.files[node] = file_named_in(node.args[0].value, self.ctx) if node.args else None

    def visit_For(self, node: cst.For) -> None:
        """`for k, v in sd.items(): sd[k] = v.cpu()`: every tensor of `sd` is
        moved to the CPU (KAIR's and BasicSR's savers), so saving `sd` after it
        saves CPU values."""
        if not (isinstance(node.iter, cst.Call) and isinstance(node.iter.func, cst.Attribute)
                and node.iter.func.attr.value == "items" and isinstance(node.target, cst.Tuple)
                and len(node.target.elements) == 2):
            return
        container = dotted_name(node.iter.func.value)
        key, value = (dotted_name(e.value) for e in node.target.elements)
        if container is None or key is None or value is None:
            return
        statements = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
        for statement in statements:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and is_item(small.targets[0].target, container, key) \
                        and moves_to_cpu(small.value, value):
                    self.items_on_cpu.add((self.ctx.function, container))

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

    def visit_Subscript(self, node: cst.Subscript) -> None:
        key = literal_key(node)
        if key is not None and OPTIMIZER_NAME.search(key):
            self.optimizer_entries.add(root_name(node.value) or "")
        if key is not None and key.lower() in DATA_KEYS:
            root = root_name(node.value)
            if root is not None:
                self.used_as_data.add(root)

    def _note_model_use(self, node: cst.Call) -> None:
        """`m.cuda()`, `m.eval()`, `m(x)` of a name: it holds a model;
        `net.load_state_dict(d[...])`: `d` holds state dicts; `TensorDataset(d)`: data."""
        func = node.func
        receiver, method = (func.value, func.attr.value) if isinstance(func, cst.Attribute) \
            else (None, None)
        name = dotted_name(receiver) if receiver is not None else dotted_name(func)
        if name is None:
            return
        if method == "load_state_dict" and node.args:
            root = root_name(node.args[0].value)
            if root is not None:
                self.copied_into_modules.add(root)
        if name.endswith(("Dataset", "DataLoader")):
            self.used_as_data.update(filter(None, (root_name(arg.value) for arg in node.args)))
        if receiver is None or method in _MODEL_USES:
            self.used_as_model.add(name)
        if receiver is not None and moves_to_cuda(node, self.ctx):
            self.moved_to_gpu.add(name)
            self.last_move[name] = "gpu"

    def _note_move_to_cpu(self, node: cst.Call) -> None:
        """`transformer.eval().cpu()` as a statement of its own, or `model =
        model.cpu()`: the module is on the CPU from here until it is moved back
        (not `torch.save(model.cpu().state_dict())`, judged where it is saved)."""
        func = node.func
        parent = self.ctx.parent
        if not isinstance(func, cst.Attribute) or not (type(parent) is cst.Expr or (
                type(parent) is cst.Assign and len(parent.targets) == 1
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
        name = dotted_name(receiver)
        if name is not None:  # a module's `.cpu()` moves it in place, whatever it is bound to
            self.last_move[name] = "cpu"

    def _moved_to_cpu(self, saved: cst.BaseExpression) -> bool:
        """`torch.save(model.state_dict(), ...)` after `model.cpu()` moved it."""
        if not (isinstance(saved, cst.Call) and isinstance(saved.func, cst.Attribute)
                and saved.func.attr.value == "state_dict"):
            return False
        name = dotted_name(saved.func.value)
        return name is not None and self.last_move.get(name) == "cpu"

    def _ranks(self) -> bool:
        """The file runs as several processes (ranks), as far as it shows so far
        or its text says (`local_rank`, `world_size`, `mp.spawn`)."""
        return self.starts_ranks is not None or self.facts.distributed

    def finish(self) -> None:
        distributed = self._ranks()
        for node, statement, direct, model, saved_before, single in self.loads:
            path = path_key(node.args[0].value) if node.args else None
            if saved_before is True or (saved_before is None and path in self.saved_on_cpu
                                        and path not in self.saved_maybe_gpu):
                continue  # saved in this file from CPU values
            if node in self.built_by_plain_class and model not in self.optimizer_entries:
                continue  # weights or bookkeeping read while an object is built
            file = self.files[node]
            unless: Condition = UnlessProjectOnCpu.here(self.ctx)
            if not distributed and self._becomes_the_model(model):
                # a whole pickled model: it is the model, no second copy; but an
                # optimizer saved beside it is restored onto the GPU unused
                taken = self.entries_taken.get(model or "", set())
                if file is not None and not any(OPTIMIZER_NAME.search(t) for t in taken):
                    self.report(node, self.OPTIMIZER_KEPT, statement,
                                Either((unless, UnlessSavedWithoutOptimizer(file))))
                continue
            if model is not None and model in self.used_as_data \
                    and model not in self.copied_into_modules:
                continue  # a data set saved as tensors (`d["images"]`, `TensorDataset(...)`)
            copied = direct or (model is not None and model in self.copied_into_modules)
            ranks = distributed and not single  # not `if rank == 0:`, `if args.gpu is None:`
            message = self.RANKS if ranks else self.COPIED if copied else self.RESTORED
            if file is not None and path not in self.saved_maybe_gpu:
                # saved by another file of the project, perhaps from CPU values
                unless = Either((unless, UnlessSavedWithoutGpuTensors(file)))
            if path not in self.saved_maybe_gpu:
                # the project's own checkpoints, if every saver moves weights to the CPU
                unless = Either((unless, UnlessProjectSavesModelsOnCpu(
                    self.facts.module)))
            fix = FixPlan(SAFE if copied else UNSAFE, 'add map_location="cpu"',
                          ((node, with_keyword(node, "map_location", '"cpu"')),))
            self.report(node, message, statement, unless, fix=fix,
                        related=[(self.starts_ranks, "the program runs as several ranks "
                                                     "(processes) here; each one loads")]
                        if ranks and self.starts_ranks is not None else [])

    def _holds_no_gpu_tensors(self, node: cst.Call) -> bool:
        """A data or cache file, or pretrained weights loaded while a module is built."""
        names = [dotted_name(node.args[0].value) or "" if node.args else ""]
        if node.args:  # `os.path.join(out_dir, "scheduler.pt")`: the literals of the path
            names += [string_value(n) or "" for n in strings_in(node.args[0].value)]
        parent = self.ctx.parent
        if isinstance(parent, cst.Assign):
            names += [n for t in parent.targets for n in names_in(t.target)]
        if isinstance(parent, cst.Subscript):  # `torch.load(p)["images"]`
            names.append(literal_key(parent) or "")
        if any(_DATA_FILE.search(name) for name in names if name):
            return True
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is not None and defines_method(class_def, "__getitem__"):
            return True  # a Dataset reading one sample's file, not a checkpoint
        # pretrained weights read while an object is built: on the CPU for a
        # module; a plain class's (a trainer's) is judged by what it takes out
        # of the file (`ckpt["optimizer"]`: a training checkpoint), in `finish`
        if function is None or function.name.value != "__init__" or class_def is None:
            return False
        if not self._builds_a_module(class_def):
            self.built_by_plain_class.add(node)
            return False
        return True

    def _builds_a_module(self, class_def: cst.ClassDef) -> bool:
        """Whether the class may be a module: it defines `forward` or derives
        from something (`nn.Module`, a base of another file); a plain class
        (`class Trainer(object):`) holding a GPU model is not one."""
        return defines_method(class_def, "forward") or any(
            dotted_name(base.value) != "object" for base in class_def.bases)

    def _is_engine(self, name: str) -> bool:
        """`model_trt = TRTModule()` (torch2trt): a serialized TensorRT engine."""
        built = self.ctx.binding(name)
        return type(built) is cst.Call and \
            (self.ctx.qualify(built.func) or "").startswith(("torch2trt.", "tensorrt."))

    def _loaded_into(self) -> str | None:
        """`optimizer` for `optimizer.load_state_dict(torch.load(p)...)`."""
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Call):
                func = ancestor.func
                if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict":
                    return dotted_name(func.value)
                return None
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
        return None

    def _assigned_name(self) -> str | None:
        """`ckpt` of `ckpt = torch.load(p)`; `encoder|decoder` of `encoder,
        decoder = torch.load(p)` (whole pickled modules, unpacked)."""
        parent = self.ctx.parent
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)):
                names = [dotted_name(e.value) for e in target.elements]
                known = [name for name in names if name]
                return "|".join(known) if names and len(known) == len(names) else None
            return dotted_name(target)
        return None

    def visit_Assign(self, node: cst.Assign) -> None:
        """`net = checkpoint["net"]`: what an entry of a loaded dict becomes."""
        value = node.value
        if isinstance(value, cst.Subscript) and len(node.targets) == 1:
            owner, name = dotted_name(value.value), dotted_name(node.targets[0].target)
            if owner is not None and name is not None:
                self.entries_taken.setdefault(owner, set()).add(name)

    def _becomes_the_model(self, model: str | None) -> bool:
        """The loaded object is the model itself, no copy of it: `torch.load(p).cuda()`,
        `net = torch.load(p)` then `net.eval()`, `encoder, decoder = torch.load(p)`,
        or a dict whose entry becomes the model (`net = checkpoint["net"]`) and
        none of whose entries is copied into a module by `load_state_dict`."""
        if model is None:
            return False
        if model == "<chained>" or all(n in self.used_as_model for n in model.split("|")):
            return True
        taken = self.entries_taken.get(model, set())
        return bool(taken & self.used_as_model) and model not in self.copied_into_modules

    def _chained_as_model(self) -> bool:
        """`torch.load(p).cuda()`, `torch.load(p).eval()`."""
        parent = self.ctx.parent
        return isinstance(parent, cst.Attribute) and parent.attr.value in _MODEL_USES



#: What is done to a model and not to a dict of tensors.
_MODEL_USES = {"cuda", "to", "eval", "train", "parameters", "named_parameters", "forward",
               "modules", "children", "half", "float", "zero_grad", "generate", "predict"}
#: Files that hold data, caches or bookkeeping rather than GPU tensors.
_DATA_FILE = re.compile(r"(cache|vocab|corpus|dataset|processed|examples|scheduler|slices|"
                        r"^data$|\.data$|_data$|^data_|^images$|^labels$)", re.IGNORECASE)
