"""A DataLoader feeding a GPU without pinned memory: every batch is copied from pageable memory."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.context import Context
from memlint.analysis.devices import (CudaReturns, creates_on_cuda, gives_no_host_tensors,
                                      is_cuda_device, moves_to_cuda, names_cuda_literally, run_with)
from memlint.analysis.flows import (GPU, HARMLESS_BUILTINS, STAY, UNKNOWN, ValueFlows,
                                    collate_moves_to_device, imported_callee, iterated_name,
                                    local_owner, reads_one_batch, returns_its_argument, root_name)
from memlint.analysis.names import call_arg, dotted_name, has_star_kwargs, literal_bool
from memlint.analysis.project import (Condition, Either, UnlessHelpersKeepBatchesOnHost,
                                      UnlessNoCalleeCopiesToCuda, UnlessNoImporterCopiesToCuda,
                                      UnlessProjectOnCpu)
from memlint.analysis.torch_api import DATA_LOADERS, SET_DEFAULT_DEVICE, TENSOR_DATASETS
from memlint.finding import SAFE, UNSAFE
from memlint.rules.base import FixPlan, Rule, RuleOptions
from memlint.rules.rewrites import with_keyword

#: DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
#: collate_fn, pin_memory, ...)
_PIN_MEMORY_POSITION = 7
_COLLATE_POSITION = 6
#: Calls that only look at a loader (`len(loader)`, `print(loader)`): no batch is loaded.
_LOOKS = {"print", "len", "str", "repr", "type", "display"}
#: Libraries whose data sets give host tensors.
_HOST_DATASETS = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.",
                  "datasets.load_dataset")


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
        #: functions of this module that return their one argument as it is
        #: (`def fn(features): return features`): a collate that builds no batch
        self.identity_functions: set[str] = set()
        #: the first call that copies to (or makes on) a CUDA device: the
        #: evidence, for related locations
        self.first_copy: cst.Call | None = None
        self.copies_non_blocking = False
        #: a copy goes to a device the program picks when it runs (`.to(device)`,
        #: `args.device`), so it may run on a host without CUDA
        self.device_chosen_at_run_time = False

    def visit_Name(self, node: cst.Name) -> None:
        if self._only_looked_at(node):
            return
        self.identifiers[node.value] += 1
        owner = None
        if self.ctx.function is not None:
            binds_here = isinstance(self.ctx.parent, cst.AssignTarget)  # local from here on
            owner = self.ctx.function if binds_here else local_owner(self.ctx, node.value)
        self.uses[(node.value, owner)] += 1

    def _only_looked_at(self, node: cst.Name) -> bool:
        """`len(loader)`, `print(loader)`, a notebook cell ending in `loader`:
        shown, not iterated; and a parameter's name in a `def` or a keyword
        argument, which is not the variable of that name outside."""
        ancestors = self.ctx.ancestors
        parent = ancestors[-2] if len(ancestors) > 1 else None
        if isinstance(parent, (cst.Arg, cst.Param)) and (parent.keyword if isinstance(
                parent, cst.Arg) else parent.name) is node:
            return True  # `train(loader=other)`, `def train(loader)`: a parameter's name
        if isinstance(parent, cst.Element) and len(ancestors) > 3 \
                and isinstance(ancestors[-3], cst.Tuple) and isinstance(ancestors[-4], cst.Expr):
            return True  # a cell ending in `train_loader, test_loader`
        if isinstance(parent, cst.Expr):
            return True
        if isinstance(parent, cst.Arg) and len(ancestors) > 2:
            call = ancestors[-3]
            return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) \
                and call.func.value in _LOOKS and self.ctx.binding(call.func.value) is None
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if returns_its_argument(node.params, node.body.body):
            self.identity_functions.add(node.name.value)

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
        copies = False
        if self.ctx.qualify(node.func) in DATA_LOADERS:
            self._check_loader(node)
        elif moves_to_cuda(node, self.ctx):
            self._note_dataset_on_gpu()
            copies = True
            self.device_chosen_at_run_time |= not names_cuda_literally(node)
            non_blocking = call_arg(node, "non_blocking")
            if non_blocking is not None and literal_bool(non_blocking.value) is True:
                self.copies_non_blocking = True
        elif creates_on_cuda(node, self.ctx):
            self._note_dataset_on_gpu()
            copies = True
        elif self.ctx.qualify(node.func) in SET_DEFAULT_DEVICE and node.args:
            copies = is_cuda_device(node.args[0].value, self.ctx) is True
        if copies and self.first_copy is None:
            self.first_copy = node

    def _note_dataset_on_gpu(self) -> None:
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is not None and function.name.value == "__init__" and class_def is not None:
            self.gpu_dataset_classes.add(class_def.name.value)

    def _check_loader(self, node: cst.Call) -> None:
        if self.ctx.in_pytest_test:
            return  # a unit test's loader: its speed is nobody's concern
        if collate_moves_to_device(node, self.ctx):
            return  # batches arrive on the device: pinning a CUDA tensor raises
        if self._collate_is_identity(node):
            return  # batches are lists of the data set's items: the loop builds the tensors
        dataset = call_arg(node, "dataset", position=0)
        dataset_value = self.ctx.resolve(dataset.value) if dataset is not None else None
        if dataset_value is not None and gives_no_host_tensors(dataset_value, self.ctx):
            return
        pin = call_arg(node, "pin_memory", position=_PIN_MEMORY_POSITION)
        if pin is None:
            if has_star_kwargs(node):
                return  # pin_memory may come with the **kwargs
            written = "DataLoader(...) without pin_memory"
        elif literal_bool(pin.value) is False:
            written = "DataLoader(..., pin_memory=False)"
        else:
            return  # True, or decided at run time (a variable, `device.type == "cuda"`)
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
        source = (self.ctx.qualify(dataset_value.func) or "") \
            if isinstance(dataset_value, cst.Call) else ""
        host_dataset = source in TENSOR_DATASETS or source.startswith(_HOST_DATASETS)
        self.unpinned.append(_Loader(node, self.statement(), written, self._private_target(),
                                     dataset_class, escapes, assigned, owner, host_dataset))

    def _collate_is_identity(self, node: cst.Call) -> bool:
        """`collate_fn=lambda x: x`, `collate_fn=fn` where `fn` returns its
        argument: each batch is the list of the data set's items as they are
        (feature objects, strings), and the loop makes the tensors it copies."""
        collate = call_arg(node, "collate_fn", position=_COLLATE_POSITION)
        if collate is None:
            return False
        value = collate.value
        if isinstance(value, cst.Lambda):
            return returns_its_argument(value.params, [value.body])
        return isinstance(value, cst.Name) and value.value in self.identity_functions \
            and self.ctx.binding(value.value) is None

    def _private_target(self) -> str | None:
        """The name a loader is assigned to where no other file can read it:
        a function's local, an attribute of `self`, any name of a notebook."""
        parent = self.ctx.parent
        if not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
            return None
        name = dotted_name(parent.targets[0].target)
        if name is None:
            return None
        if name.startswith("self.") and name.count(".") == 1:
            return name.split(".", 1)[1]
        local = "." not in name and (self.ctx.function is not None
                                     or self.ctx.path.endswith(".ipynb"))
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
        if (loader, owner) in self.passed_names:
            verdicts.add(UNKNOWN)  # handed to code that may iterate it elsewhere
        if verdicts:
            return (GPU if GPU in verdicts else UNKNOWN if UNKNOWN in verdicts else STAY,
                    handed_out)
        reads = self.single_batch_reads.get((loader, owner), 0)
        # read once at the top level, and named nowhere else but where it is built
        return (STAY if reads and self._uses_of(loader, loader, owner) <= reads + 1
                else UNKNOWN), []

    def _uses_of(self, name: str, assigned: str | None, owner: cst.FunctionDef | None) -> int:
        """How often the loader bound to `assigned` is named: a plain name in
        its own function (or at the top level), else `name` anywhere."""
        if assigned is not None and "." not in assigned:
            return self.uses[(assigned, owner)]
        return self.identifiers[name.rsplit(".", 1)[-1]]

    def finish(self) -> None:
        non_blocking = self.NON_BLOCKING if self.copies_non_blocking else ""
        for loader in self.unpinned:
            node, statement, written, target, dataset_class, escapes, assigned, owner, _ = loader
            if target is not None and self._uses_of(target, assigned, owner) <= 1:
                continue  # built and never used: no batch of it is ever copied
            batches, handed_out = self._where_batches_go(assigned, owner)
            if batches == STAY and not handed_out:
                continue  # its loops copy no batch to the GPU, or it is read once
            if dataset_class in self.gpu_dataset_classes:
                continue  # the Dataset put its data on the GPU: MEM001's finding
            if self.first_copy is None:  # this module copies nothing to a CUDA device
                callees = self.imported_callees.get((assigned, owner)) if assigned else None
                escapes |= assigned in self.returned_names \
                    or self.kept_in.get(assigned or "") in self.returned_names  # `loaders[0]`
                if callees and not escapes:
                    # handed to another module's class (a `Trainer`) that may copy its batches
                    self.report(node, self.HANDED.format(loader=written, callees=", ".join(
                        sorted(f"'{name}'" for _, name in callees))), statement,
                        UnlessNoCalleeCopiesToCuda(self.facts.module, tuple(sorted(callees))),
                        fix=self._pin(loader))
                    continue
                if not escapes:
                    continue  # used where it is built: no importer iterates it
                # built here, iterated where it is imported (a `get_loader()` helper)
                self.report(node, self.ELSEWHERE.format(loader=written), statement,
                            UnlessNoImporterCopiesToCuda(self.facts.module),
                            fix=self._pin(loader))
                continue
            unless: Condition = UnlessProjectOnCpu.here(self.ctx)
            if batches == STAY:  # handed only to functions of other modules
                unless = Either((unless, UnlessHelpersKeepBatchesOnHost(tuple(handed_out))))
            self.report(node, self.MESSAGE.format(loader=written, non_blocking=non_blocking,
                                                  when=run_with(self.facts)),
                        statement, unless, fix=self._pin(loader),
                        related=[(self.first_copy, "copied to a CUDA device here: this "
                                                   "module's batches go to the GPU")])

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
                                                   _PIN_MEMORY_POSITION)),))
