"""`torch.load` without `map_location` puts tensors back on the GPU they were saved from."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import is_dataset_class
from memlint.analysis.devices import gpu_option
from memlint.analysis.flows import root_name
from memlint.analysis.gpu_selection import (in_single_process_arm, mapped_where_saved,
                                            reads_launcher_rank, shows_one_gpu)
from memlint.analysis.model_sizes import parameter_count
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.spawned import SpawnedCode
from memlint.analysis.saved_files import (DATA_KEYS, OPTIMIZER_NAME, file_named_in, literal_key,
                                          path_key)
from memlint.analysis.project import (
    Condition, Either, PreviewUnlessProjectWrites, UnlessProjectOnCpu,
    UnlessProjectSavesModelsOnCpu, UnlessSavedWithoutGpuTensors, UnlessSavedWithoutOptimizer)
from memlint.analysis.torch_api import LARGE_MODEL_PARAMETERS, LOADS, RANK_STARTERS, SAVES
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.mem007_load_without_map_location.facts import (
    MODEL_USES, NUMBERS_STATE, SavesSeen, Load, assigned_name, becomes_the_model, kept_alive,
    loaded_into)
from memlint.rules.rewrites import with_keyword


class LoadWithoutMapLocation(SavesSeen, Rule):
    """torch.load(...) without map_location restores tensors onto the device they
    were saved from: every rank of a job lands on cuda:0, and weights meant for
    a module still on the CPU go to a GPU first (and fail to load on a host
    without CUDA). In one process, a checkpoint back on the GPU it came from
    (copied into a module, kept in a name while a loop runs, restored as it
    is) costs a copy as large as the weights: worth it for a large model
    only, so a note, in preview, unless the code shows the model large
    (`analysis/model_sizes.py`); a file no save of the project writes, or
    one downloaded, is in preview too (its tensors' device is not shown).
    Left alone where the file cannot hold GPU tensors: saved in the same file
    from CPU values (`.cpu()`, a model never moved to a GPU), a data or cache
    file (`cached_features`, a data set's split, `vocab`, `scheduler.pt`),
    pretrained weights loaded while a module is built, or no CUDA anywhere."""

    code = "MEM007"

    RANKS = ("torch.load() without map_location in a multi-process job: every rank restores "
             "the checkpoint onto the GPU it was saved from (usually cuda:0), one copy per "
             "rank on that GPU; pass map_location=\"cpu\" or the rank's own device")
    CPU_TARGET = ("torch.load() without map_location: the checkpoint goes back onto the GPU it "
                  "was saved from although the module it is copied into is still on the CPU "
                  "here (a GPU copy the program does not mean; the load fails on a host "
                  "without CUDA); pass map_location=\"cpu\"")
    KEPT = ("torch.load() without map_location: '{name}' keeps the checkpoint on the GPU it was "
            "saved from while the loop below runs, a second copy of the weights (and optimizer "
            "state) beside the model's; pass map_location=\"cpu\" or del '{name}' once copied")
    OPTION_DEVICE = ("torch.load() without map_location while the device is chosen by {option}: "
                     "this program saves its checkpoints from the GPU, and run without {option} "
                     "it restores one onto that GPU although the module is on the CPU (a CUDA "
                     "context, ~600 MiB, and a copy of the weights in a run meant for the CPU; "
                     "the load fails on a host without CUDA), and with {option} a second copy "
                     "while load_state_dict copies it; pass map_location=\"cpu\"")
    TRANSIENT = ("torch.load() without map_location in one process: a transient second copy of "
                 "the checkpoint on the GPU it was saved from while load_state_dict copies it "
                 "(as large as the weights); pass map_location=\"cpu\"")
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
        # a data set's split file, read by one of its methods (written on the CPU)
        'import torch\nfrom torch_geometric.data import InMemoryDataset\nmodel.cuda()\n'
        'class Graphs(InMemoryDataset):\n    def get_idx_split(self):\n'
        '        return torch.load(self.split_path)',
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
        # weights for a module still on the CPU, moved to the GPU only after the load
        'import torch\nmodel = Net()\nmodel.load_state_dict(torch.load(p))\nmodel.cuda()',
        # a checkpoint still bound while the training loop runs
        'import torch\nmodel.cuda()\nckpt = torch.load(p)\nmodel.load_state_dict(ckpt["model"])\n'
        'for epoch in range(ckpt["epoch"], 90):\n    train(model)',
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        Rule.__init__(self, ctx, options)
        SavesSeen.__init__(self)
        self.index, self.spawned = ModuleIndex.of(ctx), SpawnedCode.of(ctx)
        self.loads: list[Load] = []
        self.starts_ranks: cst.CSTNode | None = None  # a rank starter, a launcher's rank read
        self.rank_option: cst.Call | None = None  # `add_argument("--local_rank")`
        self.rank_read, self.one_gpu = False, False  # `args.local_rank` read; one GPU shown
        #: names a load was assigned to, and how the code then uses them
        self.used_as_model: set[str] = set()
        self.used_as_data: set[str] = set()  # `TensorDataset(d["x"])`, `d["images"]`
        #: `net.load_state_dict(d["model"])`: d -> net
        self.copied_into_modules: dict[str, str | None] = {}
        #: names bound to an entry of a name (`net = checkpoint["net"]`: checkpoint -> net)
        self.entries_taken: dict[str, set[str]] = {}
        #: each name's first move to a GPU after it was moved there, per function
        self.last_gpu_move: dict[tuple[cst.FunctionDef | None, str], cst.Call] = {}
        self.optimizer_entries: set[str] = set()  # names read by an optimizer key: `ckpt["optim"]`
        #: (function, module) -> its parameters (millions) where a load is copied into it
        self.target_sizes: dict[tuple[cst.FunctionDef | None, str], float | None] = {}

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if (qualified in RANK_STARTERS or reads_launcher_rank(node, self.ctx)) \
                and self.starts_ranks is None:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument":
                self.rank_option = self.rank_option or node  # ranks if its value is read
            else:
                self.starts_ranks = node
        self._note_model_use(node)
        self.note_other_writes(node, qualified)
        if qualified in SAVES and len(node.args) >= 2:
            self.note_save(node)
            return
        if qualified not in LOADS:
            return
        self.loads_seen = True
        if (where := call_arg(node, "map_location", position=1)) is not None \
                and not mapped_where_saved(where.value, self.ctx):
            return
        if any(arg.star for arg in node.args):
            return  # map_location may come through *args / **kwargs
        if self.ctx.in_cpu_branch() or self.ctx.in_pytest_test or self.holds_no_gpu_tensors(node):
            return
        into = loaded_into(self.ctx)
        single = in_single_process_arm(self.ctx)
        if into is not None and NUMBERS_STATE.search(into):
            return  # a schedule's or a GradScaler's state: numbers, no tensors
        if into is not None and OPTIMIZER_NAME.search(into) and single:
            return  # optimizer.load_state_dict keeps each state where its parameter is
        if into is not None and is_engine(into, self.ctx):
            return  # a TensorRT engine's state (torch2trt's TRTModule): bytes and names
        model = "<chained>" if chained_as_model(self.ctx, MODEL_USES) \
            else assigned_name(self.ctx)
        key = path_key(node.args[0].value) if node.args else None
        statement = self.statement()
        class_def = self.ctx.class_def
        self.loads.append(Load(
            node, statement, into, model, self.saved_before(key), single,
            file_named_in(node.args[0].value, self.ctx) if node.args else None,
            set(self.moved_to_gpu),
            kept_alive(model, self.ctx.ancestors[:self.ctx.ancestors.index(statement) + 1])
            if model is not None and statement in self.ctx.ancestors else None,
            class_def.name.value if class_def is not None else None, self.ctx.function,
            bool(node.args) and self.fetched(node.args[0].value)))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.starts_ranks is None and reads_launcher_rank(node, self.ctx):
            self.starts_ranks = node
        key = literal_key(node)
        if key is not None and OPTIMIZER_NAME.search(key):
            self.optimizer_entries.add(root_name(node.value) or "")
        if key is not None and key.lower() in DATA_KEYS:
            self.used_as_data.update(filter(None, [root_name(node.value)]))

    def _note_model_use(self, node: cst.Call) -> None:
        """`m.cuda()`, `m.eval()`, `m(x)` of a name: it holds a model;
        `net.load_state_dict(d[...])`: `d` holds state dicts; `TensorDataset(d)`: data."""
        func = node.func
        receiver, method = (func.value, func.attr.value) if isinstance(func, cst.Attribute) \
            else (None, None)
        name = dotted_name(receiver) if receiver is not None else dotted_name(func)
        self.note_move(node, name if receiver is not None else None)
        if name is None:
            return
        if receiver is not None and name in self.moved_to_gpu:
            self.last_gpu_move.setdefault((self.ctx.function, name), node)
        if method == "load_state_dict" and node.args and receiver is not None:
            self.target_sizes.setdefault((self.ctx.function, name), parameter_count(
                receiver, self.ctx, self.index))
            root = root_name(node.args[0].value)
            if root is not None:
                self.copied_into_modules.setdefault(root, name)
        if name.endswith(("Dataset", "DataLoader")):
            self.used_as_data.update(filter(None, (root_name(arg.value) for arg in node.args)))
        if receiver is None or method in MODEL_USES:
            self.used_as_model.add(name)

    def _copied_into(self, model: str | None) -> str | None:
        """The module `load_state_dict` copies the loaded dict, or an entry
        taken out of it (`sd = ckpt["state_dict"]`), into."""
        for name in (model, *sorted(self.entries_taken.get(model or "", ()))):
            if name in self.copied_into_modules:
                return self.copied_into_modules[name] or ""
        return None

    def _ranks(self) -> bool:
        """The file starts ranks (`init_process_group`, `mp.spawn`, DDP) or reads
        a launcher's rank; `world_size` in an offline shard merger is neither."""
        if self.starts_ranks is None and self.rank_option is not None and self.rank_read:
            self.starts_ranks = self.rank_option
        return self.starts_ranks is not None and not self.one_gpu

    def visit_Attribute(self, node: cst.Attribute) -> None:
        """`args.local_rank` read: the launcher's `--local_rank` option is used
        (one that is only accepted, in a script that starts no ranks, is not)."""
        if node.attr.value in ("local_rank", "local-rank") \
                and type(self.ctx.parent) is not cst.AssignTarget:
            self.rank_read = True

    def finish(self) -> None:
        distributed, module = self._ranks(), self.facts.module
        for load in self.loads:
            node, model = load.node, load.model
            if load.into is not None and OPTIMIZER_NAME.search(load.into) and not distributed:
                continue  # no copy in one process; with ranks (seen anywhere) each on cuda:0
            path = path_key(node.args[0].value) if node.args else None
            as_written = path not in self.flat_saves or not self.entries_taken.get(model or "")
            if load.saved_before is True or (load.saved_before is None and as_written and path
                                             in self.saved_on_cpu - self.saved_maybe_gpu):
                continue  # saved in this file from CPU values, and read as it was written
            if node in self.built_by_plain_class and model not in self.optimizer_entries:
                continue  # weights or bookkeeping read while an object is built
            unless: Condition = UnlessProjectOnCpu.here(self.ctx)
            if not distributed and becomes_the_model(model, self.used_as_model,
                                                     self.entries_taken, self.copied_into_modules):
                # a whole pickled model: it is the model, no second copy; but an
                # optimizer saved beside it is restored onto the GPU unused
                taken = self.entries_taken.get(model or "", set())
                if load.file is not None and not any(OPTIMIZER_NAME.search(t) for t in taken):
                    self.report(node, self.OPTIMIZER_KEPT, load.statement,
                                Either((unless, UnlessSavedWithoutOptimizer(load.file, module))))
                continue
            copied = load.into is not None or self._copied_into(model) is not None
            if not copied and (model in self.used_as_data or (
                    load.class_name is not None
                    and is_dataset_class(load.class_name, self.index, self.ctx))):
                continue  # a data set's split or samples, saved as tensors
            if load.file is not None and path not in self.saved_maybe_gpu:
                # saved by another file of the project, perhaps from CPU values
                unless = Either((unless, UnlessSavedWithoutGpuTensors(load.file, module),
                                 PreviewUnlessProjectWrites(load.file, module)))
            if path not in self.saved_maybe_gpu:
                # the project's own checkpoints, if every saver moves weights to the CPU
                unless = Either((unless, UnlessProjectSavesModelsOnCpu(module)))
            ranks = distributed and not load.single and not self.spawned.runs_once(load.function)
            self._report_load(load, unless, copied, ranks)

    def _report_load(self, load: Load, unless: Condition, copied: bool, ranks: bool) -> None:
        """Say which cost applies: every rank on one GPU; a GPU copy of weights
        meant for a module still on the CPU; a copy kept while a loop runs;
        in one process, the checkpoint kept, copied or restored on the GPU it
        came from: a note, in preview; so is a downloaded file's load."""
        node = load.node
        target = load.into or self._copied_into(load.model)
        # moved in the function that loads it: a parameter's device is its callers'
        move = self.last_gpu_move.get((load.function, target or ""))
        related: list[tuple[cst.CSTNode, str]] = []
        severity, preview = None, False
        if ranks:
            message = self.RANKS
            if self.starts_ranks is not None:
                related.append((self.starts_ranks, "the program runs as several ranks "
                                                   "(processes) here; each one loads"))
        elif copied and move is not None and target not in load.gpu_before:
            message = self.CPU_TARGET
            related.append((move,
                            f"'{target}' goes to the GPU only here, after the load"))
        elif copied and self.saved_maybe_gpu and gpu_option(self.ctx.facts) is not None:
            # the device is an option, off unless given: the program saves
            # checkpoints from the GPU when run with it, and loads one into a
            # module on the CPU when run without it (pytorch/examples DCGAN)
            message = self.OPTION_DEVICE.format(option=gpu_option(self.ctx.facts))
        else:
            # one process, the checkpoint back on the GPU it came from: a copy as
            # large as the weights, worth changing where the model is big and
            # shrugged at for one of a few MB (sets 11 and 12: 29 DEBATABLE of 65
            # such findings): a note, in preview, unless the code shows it large
            size = self.target_sizes.get((load.function, target or "")) if copied else None
            large = size is not None and size >= LARGE_MODEL_PARAMETERS
            severity, preview = (None, False) if large else ("note", True)
            if copied and load.kept is not None:
                message = self.KEPT.format(name=load.model)
                related.append((load.kept, f"'{load.model}' is still bound while this loop runs"))
            else:
                message = self.TRANSIENT if copied else self.RESTORED
            if size is not None and large:
                message += f" ('{target}' holds about {size:,.0f}M parameters: " \
                           f"{size * 4e6 / 2 ** 20:,.0f} MiB in float32)"
        fix = FixPlan(SAFE if copied else UNSAFE, 'add map_location="cpu"',
                      ((node, with_keyword(node, "map_location", '"cpu"')),))
        self.report(node, message, load.statement, unless, related, fix, severity,
                    preview or load.fetched)

    def visit_Assign(self, node: cst.Assign) -> None:
        """`net = checkpoint["net"]`: what an entry of a loaded dict becomes;
        `save_dict[key] = state_dict`: what a saved dict holds; a script that
        shows itself one GPU (`CUDA_VISIBLE_DEVICES = "0"`) has no rank's own GPU."""
        self.note_entry(node)
        self.one_gpu |= self.ctx.function is None and shows_one_gpu(node, self.ctx)
        value = node.value
        if isinstance(value, cst.Subscript) and len(node.targets) == 1:
            owner, name = dotted_name(value.value), dotted_name(node.targets[0].target)
            if owner is not None and name is not None:
                self.entries_taken.setdefault(owner, set()).add(name)


def is_engine(name: str, ctx: Context) -> bool:
    """`model_trt = TRTModule()` (torch2trt): a serialized TensorRT engine."""
    built = ctx.binding(name)
    return type(built) is cst.Call and \
        (ctx.qualify(built.func) or "").startswith(("torch2trt.", "tensorrt."))


def chained_as_model(ctx: Context, model_uses: set[str]) -> bool:
    """`torch.load(p).cuda()`, `torch.load(p).eval()`."""
    parent = ctx.parent
    return isinstance(parent, cst.Attribute) and parent.attr.value in model_uses
