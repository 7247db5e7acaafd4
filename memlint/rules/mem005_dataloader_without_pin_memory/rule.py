"""A DataLoader feeding a GPU without pinned memory: every batch is copied from pageable memory."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import gives_media_samples
from memlint.analysis.devices import (CudaReturns, callers_pass_cuda, cpu_default_parameter,
                                      creates_on_cuda, gives_host_tensors,
                                      gives_no_host_tensors, is_cuda_device,
                                      item_moved_to_a_device, moves_to_cuda,
                                      names_cuda_literally, run_with)
from memlint.analysis.flows import (GPU, STAY, UNKNOWN, ValueFlows, collate_moves_to_device,
                                    root_name)
from memlint.analysis.loaders import (PIN_MEMORY_POSITION, LoaderArguments, collate_is_identity,
                                      Workers, float_batches, integer_batches)
from memlint.analysis.media_sources import PreviewUnlessMediaClass
from memlint.analysis.module_index import ModuleIndex
from memlint.analysis.names import call_arg, dotted_name, literal_bool
from memlint.analysis.project import (Condition, Either, UnlessHelpersKeepBatchesOnHost,
                                      UnlessNoCalleeCopiesToCuda, UnlessNoImporterCopiesToCuda,
                                      UnlessProjectOnCpu)
from memlint.analysis.torch_api import DATA_LOADERS, DATASET_ITEM_METHODS, SET_DEFAULT_DEVICE
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.mem005_dataloader_without_pin_memory.facts import (UnlessEveryCallerDropsIt,
                                                                    UnlessOnlyCalledHere)
from memlint.rules.mem005_dataloader_without_pin_memory.uses import NameUses, returned_position
from memlint.rules.rewrites import with_keyword


class _Loader(NamedTuple):
    node: cst.Call
    statement: cst.CSTNode | None
    written: str  # how the call is written, for the message
    target: str | None  # the private name it is assigned to, if any
    dataset_class: str | None  # what builds its dataset (`FaceDataset(...)`)
    escapes: bool  # returned by the function that builds it (`get_loader()`), or kept on `self`
    assigned: str | None  # the name it is assigned to (`self.train_loader`)
    owner: cst.FunctionDef | None  # the function it is a local variable of
    host_dataset: bool  # its dataset is known to give host tensors (torchvision, TensorDataset)
    media: bool  # its samples are floats: decoded images, audio or video, float tensors
    workers: Workers  # its `num_workers`, settled once the file is read


class DataLoaderWithoutPinMemory(Rule):
    """A DataLoader without pin_memory=True, in a module that copies its batches
    to a CUDA device: each host-to-device copy first goes through a pageable
    staging buffer (about 7 GB/s against 54 GB/s from pinned memory on an H100),
    and `non_blocking=True` copies from pageable memory are synchronous, so
    they overlap nothing with compute.

    The decision needs the whole module (the loader is often built in one
    function and its batches moved in another), so findings are reported
    from `finish()`.
    """

    code = "MEM005"

    MESSAGE = ("{loader} while this module copies batches to a CUDA device{when}: every batch is "
               "copied from pageable host memory (~7 GB/s vs ~54 GB/s pinned){non_blocking}; "
               "pass pin_memory=True")
    ELSEWHERE = ("{loader} in a module whose importers copy batches to a CUDA device: every "
                 "batch is copied from pageable host memory (~7 GB/s vs ~54 GB/s pinned); "
                 "pass pin_memory=True")
    HANDED = ("{loader} handed to {callees}, which the project defines to copy the batches it "
              "is given to a CUDA device: every batch is copied from pageable host memory "
              "(~7 GB/s vs ~54 GB/s pinned); pass pin_memory=True")
    NON_BLOCKING = (", and the non_blocking=True copies here are synchronous from pageable "
                    "memory, so they overlap nothing")

    VALID = [
        # a script's loader only counted (`len`): no batch of it is loaded
        'import torch\nfrom torch.utils.data import DataLoader\nif __name__ == "__main__":\n'
        '    counted = DataLoader(ds, batch_size=64, num_workers=4)\n    steps = len(counted)\n'
        '    for x, y in DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True):\n'
        '        x = x.to("cuda")',
        'import torch\nfrom torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64, pin_memory=True)\n'
        'for x, y in loader:\n    x = x.to("cuda")',
        'from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=64)\n'
        'for x, y in loader:\n    loss = model(x, y)',
        'import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device("cpu")\n'
        'loader = DataLoader(ds, batch_size=64)\nfor x, y in loader:\n    x = x.to(device)',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64, pin_memory=device.type == "cuda")\n'
        'x = next(iter(loader))[0].to(device)',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64, pin_memory=args.pin_memory)\nx.cuda()',
        'from torch.utils.data import DataLoader\n'
        'kwargs = {"num_workers": 4, "pin_memory": True}\n'
        'loader = DataLoader(ds, batch_size=64, **kwargs)\nx.cuda()',
        'from mylib.data import DataLoader\nloader = DataLoader("train.csv")\nx.cuda()',
        'class DataLoader:\n    pass\nloader = DataLoader()\nmodel.to("cuda")',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, 64, True, None, None, 4, None, True)\nx.cuda()',
        'from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=64)\n'
        'x = x.to(torch.float16)',
        'import torch.utils.data as tud\n'
        'loader = tud.DataLoader(ds, pin_memory=torch.cuda.is_available())\n'
        'model.cuda()',
        # the data are already on the GPU: pinning a CUDA tensor raises (MEM001's finding)
        'import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n'
        'ds = TensorDataset(x.cuda(), y.cuda())\nloader = DataLoader(ds, batch_size=64)\n'
        'for xb, yb in loader:\n    model(xb.to("cuda"))',
        'import torch\nfrom torch.utils.data import DataLoader, Dataset\n'
        'class OnGpu(Dataset):\n    def __init__(self, x):\n        self.x = x.to("cuda")\n'
        'loader = DataLoader(OnGpu(x), batch_size=64)\nfor xb in loader:\n    model(xb)',
        # batches turned into strings and new tensors, never copied as loaded
        'import torch\nfrom torch.utils.data import DataLoader\nmodel.cuda()\n'
        'loader = DataLoader(names_ds, batch_size=32)\n'
        'def encode(names):\n    return [ord(c) for name in names for c in name]\n'
        'for names, labels in loader:\n    x = torch.LongTensor(encode(names)).cuda()',
        # read once, at a notebook's top level, to look at one batch
        'import torch\nfrom torch.utils.data import DataLoader\nmodel.cuda()\n'
        'loader = DataLoader(ds, batch_size=8)\n'
        'imgs, labels = next(iter(loader))\nprint(imgs.shape)',
        # a dataset module's demo: the loader is used where it is built, no importer iterates it
        'from torch.utils.data import DataLoader\ndef main():\n'
        '    loader = DataLoader(VOC("train"), batch_size=1)\n'
        '    for img, target in loader:\n        print(img.shape)',
        # indices into tensors kept on the GPU
        'import torch\nfrom torch.utils.data import DataLoader\nX = X.cuda()\n'
        'for idx in DataLoader(range(len(X)), batch_size=64, shuffle=True):\n    model(X[idx])',
        # the collate function is handed the device: batches arrive on the GPU
        'import torch\nfrom functools import partial\nfrom torch.utils.data import DataLoader\n'
        'device = torch.device("cuda")\n'
        'loader = DataLoader(ds, batch_size=8, collate_fn=partial(collate, device=device))\n'
        'model.to(device)',
        # the collate function gives each batch back as the list of items (CodeReviewer):
        # the loop builds the tensors it copies, there is no loaded batch to pin
        'import torch\nfrom torch.utils.data import DataLoader\ndef get_loader(ds):\n'
        '    def fn(features):\n        return features\n'
        '    return DataLoader(ds, batch_size=8, collate_fn=fn)\n'
        'def evaluate(loader):\n    for examples in loader:\n'
        '        ids = torch.tensor([ex.source_ids for ex in examples]).to("cuda")',
        'from torch.utils.data import DataLoader\nmodel.cuda()\n'
        'loader = DataLoader(ds, batch_size=8, collate_fn=lambda items: items)',
    ]
    INVALID = [
        # PyTorch Geometric's loader is a DataLoader (GeoMol's, with pin_memory=False)
        'from torch_geometric.loader import DataLoader\n'
        'loader = DataLoader(graphs, batch_size=16, num_workers=4, pin_memory=False)\n'
        'for batch in loader:\n    out = model(batch.to("cuda"))',
        # counted, and iterated too
        'import torch\nfrom torch.utils.data import DataLoader\nif __name__ == "__main__":\n'
        '    loader = DataLoader(ds, batch_size=64, num_workers=4)\n    steps = len(loader)\n'
        '    for x, y in loader:\n        x = x.to("cuda")',
        'import torch\nfrom torch.utils.data import DataLoader\n'
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        'loader = DataLoader(ds, batch_size=64, shuffle=True)\n'
        'for x, y in loader:\n    x, y = x.to(device), y.to(device)',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64, pin_memory=False)\n'
        'for x, y in loader:\n    x = x.cuda()',
        # a batch handed to helpers that hand it to each other, then copy it
        'from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=64)\n'
        'def walk(x, n):\n    return walk(x, n - 1) if n else x.cuda()\n'
        'for x in loader:\n    walk(x, 3)',
        # parts of a batch, through a same-module helper
        'from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=64)\n'
        'def to_gpu(t):\n    return t.cuda(non_blocking=True)\n'
        'for i, (x, y) in enumerate(loader):\n    for xs in zip(x, y):\n        to_gpu(xs)',
        'import torch.utils.data as Data\nloader = Data.DataLoader(ds, batch_size=32)\n'
        'for x, y in loader:\n    x = x.cuda(non_blocking=True)',
        'from torch.utils import data\ntrain = data.DataLoader(ds, batch_size=32)\n'
        'def step(batch):\n    return batch.to("cuda:0")',
        'from torch.utils.data import DataLoader as DL\ndef make(ds):\n'
        '    return DL(ds, batch_size=8)\ndef train(model, x):\n    model.to(device)',
        'import torch\nloaders = {s: torch.utils.data.DataLoader(d, batch_size=8) '
        'for s, d in splits.items()}\nmodel = model.to(torch.device("cuda"))',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, 64, True, None, None, 4, None, False)\nx.cuda()',
        'import torch\nfrom torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64)\n'
        'x = torch.zeros(8, device="cuda")',
        'from torch.utils.data.dataloader import DataLoader\nclass Trainer:\n'
        '    def __init__(self, ds):\n        self.loader = DataLoader(ds, batch_size=8)\n'
        '        self.device = torch.device("cuda")\n'
        '    def step(self):\n        return next(iter(self.loader)).to(self.device)',
        # a collate function that builds the batch: what it returns is pinned
        'import torch\nfrom torch.utils.data import DataLoader\ndef collate(items):\n'
        '    return torch.stack(items)\nmodel.cuda()\n'
        'loader = DataLoader(ds, batch_size=8, collate_fn=collate)',
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.unpinned: list[_Loader] = []
        #: Dataset classes of this module whose `__init__` puts the data on a GPU
        self.gpu_dataset_classes: set[str] = set()
        self.flows = ValueFlows.of(ctx)  # where the batches of each loop go
        ctx.shared(CudaReturns)  # what the module's functions return on the GPU
        self.arguments = LoaderArguments.of(ctx)  # what each loader is given
        self.names = NameUses.of(ctx)  # how each name is used: iterated, handed on, returned
        #: the calls that copy to (or make on) a CUDA device, each with the
        #: function whose parameter defaulting to the CPU names that device, if so
        self.copies: list[tuple[cst.Call, cst.FunctionDef | None, str]] = []
        self.copies_non_blocking = False
        #: a copy goes to a device the program picks when it runs (`.to(device)`,
        #: `args.device`), so it may run on a host without CUDA
        self.device_chosen_at_run_time = False

    def visit_Call(self, node: cst.Call) -> None:
        copies = moves = False
        if self.ctx.qualify(node.func) in DATA_LOADERS:
            self._check_loader(node)
        elif moves_to_cuda(node, self.ctx):
            moves = True
            self._note_dataset_on_gpu()
            copies = True
            self.device_chosen_at_run_time |= not names_cuda_literally(node)
            non_blocking = call_arg(node, "non_blocking")
            if non_blocking is not None and literal_bool(non_blocking.value) is True:
                self.copies_non_blocking = True
        elif creates_on_cuda(node, self.ctx):
            self._note_dataset_on_gpu()
            copies = True
        elif item_moved_to_a_device(node, self.ctx):
            self._note_dataset_on_gpu()
        elif self.ctx.qualify(node.func) in SET_DEFAULT_DEVICE and node.args:
            copies = is_cuda_device(node.args[0].value, self.ctx) is True
        if copies:
            device = call_arg(node, "device", position=0 if moves else None)
            function = cpu_default_parameter(device.value, self.ctx) if device else None
            self.copies.append((node, function, dotted_name(device.value) or "" if device else ""))

    def _note_dataset_on_gpu(self) -> None:
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is not None and class_def is not None \
                and function.name.value in ("__init__", *DATASET_ITEM_METHODS):
            self.gpu_dataset_classes.add(class_def.name.value)

    def _check_loader(self, node: cst.Call) -> None:
        if self.ctx.in_pytest_test:
            return  # a unit test's loader: its speed is nobody's concern
        if collate_moves_to_device(node, self.ctx):
            return  # batches arrive on the device: pinning a CUDA tensor raises
        if collate_is_identity(node, self.ctx):
            return  # batches are lists of the data set's items: the loop builds the tensors
        dataset = call_arg(node, "dataset", position=0)
        dataset_value = self.ctx.resolve(dataset.value) if dataset is not None else None
        if dataset_value is not None and gives_no_host_tensors(dataset_value, self.ctx):
            return
        if integer_batches(dataset_value, self.ctx):
            return  # token ids or indices: a few bytes a sample, pinning buys nothing of note
        pinned, written = self.arguments.pin_memory(node)
        if pinned not in ("missing", "false"):
            return  # True, decided at run time (`device.type == "cuda"`), or in **kwargs
        dataset_class = dotted_name(dataset_value.func) \
            if isinstance(dataset_value, cst.Call) else None
        parent = self.ctx.parent
        target = parent.targets[0].target \
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
        assigned = dotted_name(target) if target is not None else None
        escapes = self.ctx.function is not None and (  # returned, or kept on the object
            any(isinstance(a, cst.Return) for a in self.ctx.ancestors)
            or (target is not None and root_name(target) == "self"))
        owner = self.ctx.function if assigned is not None and "." not in assigned else None
        host_dataset = gives_host_tensors(dataset_value, self.ctx)
        self.unpinned.append(_Loader(node, self.statement(), written, self._private_target(),
                                     dataset_class, escapes, assigned, owner, host_dataset,
                                     gives_media_samples(dataset_value, self.ctx)
                                     or float_batches(dataset_value, self.ctx),
                                     self.arguments.workers(node)))

    def _private_target(self) -> str | None:
        """The name a loader is assigned to where no other file can read it:
        a function's local, an attribute of `self`, any name of a notebook or
        of a script's `if __name__ == "__main__":` block."""
        parent = self.ctx.parent
        if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
            return None
        name = dotted_name(parent.targets[0].target)
        if name is None:
            return None
        if name.startswith("self.") and name.count(".") == 1:
            return name.split(".", 1)[1]
        local = "." not in name and (self.ctx.function is not None
                                     or self.ctx.path.endswith(".ipynb")
                                     or self.ctx.under_main_guard())
        return name if local else None

    def _where_batches_go(self, loader: str | None, owner: cst.FunctionDef | None,
                          ) -> tuple[str, list[tuple[str, int | str]]]:
        """GPU when a loop over the loader copies a batch to a CUDA device, STAY
        when every loop over it keeps its batches on the host (turned into
        numpy, strings, new tensors) or it is only read once, else UNKNOWN (not
        iterated here, or its batches go to code nobody can follow); with the
        functions of other modules the batches are handed to (the project
        tells what they do)."""
        if loader is None:
            return UNKNOWN, []
        verdicts, handed_out = set(), []
        for loop in self.flows.loops:
            if loop.name == loader and loop.owner is owner:
                verdict, out = self.flows.verdict(loop)
                verdicts.add(verdict)
                handed_out += out
        if (loader, owner) in self.names.passed_names:
            verdicts.add(UNKNOWN)  # handed to code that may iterate it elsewhere
        if verdicts:
            return (GPU if GPU in verdicts else UNKNOWN if UNKNOWN in verdicts else STAY,
                    handed_out)
        reads = self.names.single_batch_reads.get((loader, owner), 0)
        # read once at the top level, and named nowhere else but where it is built
        return (STAY if reads and self.names.uses_of(loader, loader, owner) <= reads + 1
                else UNKNOWN), []

    def _first_copy(self) -> tuple[cst.Call | None, tuple[str, ...]]:
        """The first copy to a CUDA device, and the functions of this module
        that other files may call with a GPU device when every copy is to a
        parameter defaulting to the CPU that no caller here sets otherwise."""
        index = ModuleIndex.of(self.ctx)
        maybe: list[tuple[cst.Call, str]] = []
        for node, function, device in self.copies:
            if function is None or callers_pass_cuda(function, device, self.ctx):
                return node, ()
            info = index.info(function)
            if info is not None and info.parent is None and not self.ctx.path.endswith(".ipynb"):
                maybe.append((node, function.name.value))  # importable: its callers may tell
        return (maybe[0][0], tuple(sorted({name for _, name in maybe}))) if maybe else (None, ())

    def _samples(self, media: bool, dataset_class: str | None) -> tuple[Condition, bool]:
        """Where the cost is shown to matter (issue 25): batches of float samples
        (decoded media, float tensors, a project data-set class that decodes
        media); other loaders are a preview variant. (condition, in preview)"""
        name = (dataset_class or "").rsplit(".", 1)[-1]
        if media or name in self.facts.media_classes:
            return Either(()), False
        if name:  # a class of another file: the project decides
            return PreviewUnlessMediaClass(name), False
        return Either(()), True

    def finish(self) -> None:
        non_blocking = self.NON_BLOCKING if self.copies_non_blocking else ""
        first_copy, called_elsewhere = self._first_copy()
        for loader in self.unpinned:
            node, statement, written, target, dataset_class, escapes, assigned, owner = loader[:8]
            samples, preview = self._samples(loader.media, dataset_class)
            # no worker process: the loop's own thread would pin each batch (one more
            # host copy), which buys little over the pageable copy it replaces
            preview |= all(count == 0 for count in self.arguments.resolved(loader.workers))
            if target is not None and self.names.uses_of(target, assigned, owner) <= 1:
                continue  # built and never used: no batch of it is ever copied
            batches, handed_out = self._where_batches_go(assigned, owner)
            if batches == STAY and not handed_out:
                continue  # its loops copy no batch to the GPU, or it is read once
            if dataset_class in self.gpu_dataset_classes:
                continue  # the Dataset put its data on the GPU: MEM001's finding
            if first_copy is None:  # this module copies nothing to a CUDA device
                callees = self.names.imported_callees.get((assigned, owner)) if assigned else None
                returned = self.names.returned_names  # `return loader`, `return loaders[0]`
                escapes |= assigned in returned \
                    or self.names.kept_in.get(assigned or "") in returned
                if callees and not escapes:
                    # handed to another module's class (a `Trainer`) that may copy its batches
                    self.report(node, self.HANDED.format(loader=written, callees=", ".join(
                        sorted(f"'{name}'" for _, name in callees))), statement,
                        Either((UnlessNoCalleeCopiesToCuda(self.facts.module,
                                                           tuple(sorted(callees))), samples)),
                        fix=self._pin(loader), preview=preview)
                    continue
                if not escapes:
                    continue  # used where it is built: no importer iterates it
                importers = UnlessNoImporterCopiesToCuda(self.facts.module)  # `get_loader()`
                unless: Condition = Either((importers, samples))
                position = returned_position(owner, assigned) if owner and assigned else None
                if owner and position is not None and self.names.identifiers[owner.name.value] < 2:
                    unless = Either((unless, UnlessEveryCallerDropsIt(  # its file calls it not
                        self.facts.module, owner.name.value, position)))
                self.report(node, self.ELSEWHERE.format(loader=written), statement, unless,
                            fix=self._pin(loader), preview=preview)
                continue
            unless = Either((UnlessProjectOnCpu.here(self.ctx), samples))
            if called_elsewhere:  # a device parameter that only other files may set to a GPU
                unless = Either((unless, UnlessOnlyCalledHere(self.facts.module, called_elsewhere)))
            if batches == STAY:  # handed only to functions of other modules
                unless = Either((unless, UnlessHelpersKeepBatchesOnHost(tuple(handed_out))))
            self.report(node, self.MESSAGE.format(loader=written, non_blocking=non_blocking,
                                                  when=run_with(self.facts)),
                        statement, unless, fix=self._pin(loader),
                        related=[(first_copy, "copied to a CUDA device here: this "
                                                   "module's batches go to the GPU")],
                        preview=preview)

    def _pin(self, loader: _Loader) -> FixPlan:
        """`pin_memory=True` changes no value, only where the host keeps a batch:
        safe for data sets known to give host tensors (a project's own might
        give CUDA ones, which cannot be pinned). A device picked at run time may
        be the CPU, where pinning warns: `pin_memory=torch.cuda.is_available()`."""
        torch = self.ctx.names.local_name_of("torch")
        value = f"{torch}.cuda.is_available()" if self.device_chosen_at_run_time and torch \
            else "True"
        return FixPlan(SAFE if loader.host_dataset else UNSAFE, f"pass pin_memory={value}",
                       ((loader.node, with_keyword(loader.node, "pin_memory", value,
                                                   PIN_MEMORY_POSITION)),))
