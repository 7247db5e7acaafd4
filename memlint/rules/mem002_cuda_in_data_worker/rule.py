"""CUDA work in code that DataLoader worker processes run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.datasets import is_dataset_class
from memlint.analysis.devices import creates_on_cuda, moves_to_cuda
from memlint.analysis.loaders import Workers, LoaderArguments, assigned_values
from memlint.analysis.module_index import PARTIALS, ClassInfo, FunctionInfo, ModuleIndex
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.project import UnlessLoadersRunInMainProcess
from memlint.analysis.torch_api import CUDA_INITIALISERS, DATA_LOADERS, DATASET_ITEM_METHODS
from memlint.rules.base import Rule, RuleOptions

#: Dataset methods that run in the worker processes, once per sample or batch.
#: DataLoader arguments that run in the workers, with their positions.
_WORKER_ARGUMENTS = (("collate_fn", 6), ("worker_init_fn", 10))

@dataclass
class _CudaSite:
    unit: FunctionInfo
    node: cst.Call
    statement: cst.CSTNode | None
    action: str
    fix: str


@dataclass
class _Loader:
    """A DataLoader call: what it was given, and how many workers it starts."""

    dataset: cst.BaseExpression | None
    #: (argument, as written, the values it may hold)
    worker_code: list[tuple[str, cst.BaseExpression, list[cst.BaseExpression]]]
    class_name: str | None
    workers: Workers
    #: built in a unit test (`test_*` of a test file): says nothing of how the data set is used
    in_unit_test: bool = False


class CudaInDataWorker(Rule):
    """CUDA work in code that runs inside DataLoader worker processes: a Dataset's
    `__getitem__`/`__iter__`, a `collate_fn` or `worker_init_fn`, and the helpers
    of the same module they call. Each worker process that touches CUDA creates
    its own CUDA context (~600 MiB of GPU memory each), or, under the fork start
    method, dies with "Cannot re-initialize CUDA in forked subprocess".

    Code whose every loader in this module runs in the main process
    (`num_workers=0`, the default) is left alone, however it reaches the
    loader: there the work happens in the process that owns the context
    already. A `num_workers` variable is the value the file shows (an
    assignment, an argparse default, a parameter default and what callers
    here pass); one the file does not show is reported, saying so, since the
    code runs in workers as soon as it is raised. A Dataset or collate
    function whose loader is not in this module is flagged, since workers are
    usually turned on elsewhere."""

    code = "MEM002"

    VALID = [
        # tensors stay on the CPU in the worker; the training loop moves the batch
        "from torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return torch.from_numpy(self.x[i])\n"
        "for x in loader:\n    x = x.to(device)",
        # the whole dataset moved in __init__ is MEM001's business, not this rule's
        "from torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __init__(self, x):\n        self.x = x.cuda()\n"
        "    def __getitem__(self, i):\n        return self.x[i]",
        # an explicit CPU device
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return torch.zeros(3, device='cpu')",
        # is_available / manual_seed do not create a context
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "def seed_worker(worker_id):\n    if torch.cuda.is_available():\n"
        "        torch.cuda.manual_seed(worker_id)\n"
        "loader = DataLoader(ds, num_workers=4, worker_init_fn=seed_worker)",
        # a dtype change is not a move
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].to(torch.float32)",
        # a loader that runs in the main process
        "from torch.utils.data import DataLoader, Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].cuda()\n"
        "loader = DataLoader(D(), batch_size=8, num_workers=0)",
        # a class that is not a Dataset and never reaches a DataLoader
        "class Cache:\n    def __getitem__(self, key):\n        return self.table[key].cuda()",
        # the collate function is not the one moving data; the training step is
        "from torch.utils.data import DataLoader\ndef collate(batch):\n    return stack(batch)\n"
        "def step(batch):\n    return batch.cuda()\n"
        "loader = DataLoader(ds, collate_fn=collate, num_workers=2)",
        # a plain class's collate method that the training loop calls itself
        "class Batcher:\n    def collate(self, xs):\n        return stack(xs).cuda()",
        # a Hugging Face datasets.Dataset is not fed to worker processes this way
        "from datasets import Dataset\nclass Rows(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].cuda()",
        # num_workers given by a variable whose value the file shows: 0
        "import functools\nfrom torch.utils.data import DataLoader\n"
        "def collate(batch, device):\n    return batch.to(device)\nnum_workers = 0\n"
        "loader = DataLoader(ds, num_workers=num_workers,\n"
        "                    collate_fn=functools.partial(collate, device='cuda'))",
        "import argparse\nfrom torch.utils.data import DataLoader\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--workers', type=int, default=0)\nargs = parser.parse_args()\n"
        "loader = DataLoader(ds, num_workers=args.workers, collate_fn=lambda b: stack(b).cuda())",
        "from torch.utils.data import DataLoader, Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].cuda()\n"
        "def make(ds, workers=0):\n    return DataLoader(ds, num_workers=workers)\n"
        "loader = make(D())",
        "from torch.utils.data import DataLoader\nclass Trainer:\n"
        "    def collate(self, batch):\n        return batch.cuda()\n"
        "    def loader(self, ds):\n        n = 0\n"
        "        return DataLoader(ds, num_workers=n, collate_fn=self.collate)",
    ]
    INVALID = [
        "from torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].cuda()",
        "import torch.utils.data as data\nclass D(data.Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].to('cuda:0')",
        "import torch\nfrom torch.utils.data import IterableDataset\n"
        "class Stream(IterableDataset):\n"
        "    def __iter__(self):\n        for row in self.rows:\n"
        "            yield torch.tensor(row, device='cuda')",
        "from torch.utils.data import Dataset\nclass Base(Dataset):\n    pass\n"
        "class Mine(Base):\n    def __getitem__(self, i):\n        return self.x[i].cuda()",
        "from torch.utils.data import DataLoader\ndef collate(batch):\n"
        "    return [b.to(device) for b in batch]\n"
        "loader = DataLoader(ds, collate_fn=collate, num_workers=4)",
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "def init(worker_id):\n    torch.cuda.set_device(0)\n"
        "loader = DataLoader(ds, num_workers=4, worker_init_fn=init)",
        "from functools import partial\nfrom torch.utils.data import DataLoader\n"
        "def collate(batch, dev):\n    return batch.to(dev)\n"
        "loader = DataLoader(ds, num_workers=2, collate_fn=partial(collate, dev='cuda'))",
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, collate_fn=lambda b: stack(b).cuda())",
        # a Dataset-like class that does not subclass Dataset, two calls deep
        "from torch.utils.data import DataLoader\ndef to_gpu(x):\n    return x.cuda()\n"
        "def load(p):\n    return to_gpu(read(p))\n"
        "class Faces:\n    def __getitem__(self, i):\n        return load(self.paths[i])\n"
        "loader = DataLoader(Faces(), num_workers=args.workers)",
        # a collate_fn built here for a DataLoader of another file
        "def get_collate_fn(cfg):\n    def collate_fn(samples):\n"
        "        return {k: v.cuda() for k, v in pad(samples).items()}\n    return collate_fn",
        "from torch.utils.data import DataLoader\nclass Collator:\n"
        "    def __call__(self, batch):\n        return batch.cuda()\n"
        "loader = DataLoader(ds, collate_fn=Collator(), num_workers=2)",
        # num_workers from an argparse default above 0
        "import argparse\nfrom torch.utils.data import DataLoader\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('-j', '--workers', type=int, default=4)\nargs = parser.parse_args()\n"
        "loader = DataLoader(ds, num_workers=args.workers, collate_fn=lambda b: stack(b).cuda())",
        # num_workers the file does not show: reported, and the message says so
        "from torch.utils.data import DataLoader\ndef collate(batch):\n    return batch.cuda()\n"
        "def build(ds, cfg):\n"
        "    return DataLoader(ds, num_workers=cfg['workers'], collate_fn=collate)",
        # a parameter defaulting to 0 that a caller here raises
        "from torch.utils.data import DataLoader\ndef collate(batch):\n    return batch.cuda()\n"
        "def make(ds, workers=0):\n"
        "    return DataLoader(ds, num_workers=workers, collate_fn=collate)\n"
        "loader = make(ds, workers=8)",
    ]

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        super().__init__(ctx, options)
        self.index = ModuleIndex.of(ctx)
        self.sites: list[_CudaSite] = []
        self.loaders: list[_Loader] = []
        self.counts = LoaderArguments.of(ctx)  # how many workers each loader starts
        #: collate functions no loader of this file uses: the project's loaders decide
        self._loaded_elsewhere: set[FunctionInfo] = set()

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in DATA_LOADERS:
            self.loaders.append(self._loader(node))
            return
        unit = self.index.current
        if unit is None:
            return
        if moves_to_cuda(node, self.ctx):
            action, fix = "moves tensors to CUDA", _RETURN_CPU
        elif creates_on_cuda(node, self.ctx):
            action, fix = "creates tensors on CUDA", _RETURN_CPU
        elif qualified in CUDA_INITIALISERS:
            action, fix = f"calls {qualified}(), which initialises CUDA,", _LEAVE_CUDA
        else:
            return
        self.sites.append(_CudaSite(unit, node, self.statement(), action, fix))

    def visit_Assign(self, node: cst.Assign) -> None:
        """`dataloader.collate_fn = self.smart_batching_collate`: a function
        installed into a loader made elsewhere, whose workers this file does not set."""
        target = node.targets[0].target
        if len(node.targets) != 1 or not isinstance(target, cst.Attribute) \
                or target.attr.value not in dict(_WORKER_ARGUMENTS):
            return
        workers = Workers("?", [None])  # the loader was made elsewhere
        code = [(target.attr.value, node.value, assigned_values(node.value, self.ctx))]
        self.loaders.append(_Loader(None, code, self.index.current_class, workers))

    def _loader(self, node: cst.Call) -> _Loader:
        dataset = call_arg(node, "dataset", position=0)
        worker_code = []
        for keyword, position in _WORKER_ARGUMENTS:
            arg = call_arg(node, keyword, position)
            if arg is not None:
                worker_code.append((keyword, arg.value, assigned_values(arg.value, self.ctx)))
        return _Loader(self.ctx.resolve(dataset.value) if dataset else None, worker_code,
                       self.index.current_class, self.counts.workers(node),
                       self.ctx.in_pytest_test)

    # -- after the walk: entry points, what they reach, and the CUDA work there
    def finish(self) -> None:
        self._note_imported_worker_functions()
        if not self.sites:
            return
        entries: dict[FunctionInfo, tuple[str, str]] = {}
        for entry, label, note in (*self._dataset_entries(), *self._loader_entries()):
            entries.setdefault(entry, (label, note))
        reached: dict[FunctionInfo, tuple[FunctionInfo, str, str]] = {}
        for entry, (label, note) in entries.items():
            for unit in self.index.reachable(entry):
                reached.setdefault(unit, (entry, label, note))
        flagged_statements = set()
        for site in self.sites:
            if site.unit in reached and site.statement not in flagged_statements:
                flagged_statements.add(site.statement)  # `return x.cuda(), y.cuda()` once
                entry = reached[site.unit][0]
                unless = UnlessLoadersRunInMainProcess(
                    self.facts.module, entry.class_name or entry.name) \
                    if entry in self._loaded_elsewhere else None
                self.report(site.node, _message(site, *reached[site.unit]), site.statement,
                            unless=unless)

    def _note_imported_worker_functions(self) -> None:
        """Tell the project which imported functions and data set classes this
        file's loaders run in their workers, and whether those loaders all run
        in the main process."""
        collector = FactCollector.of(self.ctx)
        if collector is None:
            return
        for loader in filter(lambda loader: not loader.in_unit_test, self.loaders):
            main_process = self._workers_note([loader]) is None
            # the data set class it is given (`DataLoader(Faces(...))`) runs there too
            dataset = [loader.dataset.func] if isinstance(loader.dataset, cst.Call) else []
            for value in [*dataset, *(v for _, _, values in loader.worker_code for v in values)]:
                if type(value) is cst.Call and self.ctx.qualify(value.func) in PARTIALS \
                        and value.args:
                    value = value.args[0].value  # partial(custom_collate_fn, device=...)
                name = dotted_name(value)
                imported = collector.imported_name(name) if name else None
                if imported is None:
                    continue
                known = collector.facts.worker_functions
                known[imported] = known.get(imported, True) and main_process

    def _workers_note(self, loaders: list[_Loader]) -> str | None:
        """None when every loader runs in the main process; else what the message
        says of `num_workers` ("" for a literal count above 0)."""
        unknown = None
        for loader in loaders:
            values = self.counts.resolved(loader.workers)
            if any(v is not None and v > 0 for v in values):
                written = loader.workers.written
                if written.isdigit():
                    return ""
                known = max(v for v in values if v is not None)
                return f"num_workers={written} is {known} here"
            if None in values and unknown is None:
                unknown = loader
        if unknown is None:
            return None
        return (f"num_workers={unknown.workers.written}, which this file does not set: the "
                "workers run it as soon as it is above 0")

    def _dataset_entries(self) -> Iterator[tuple[FunctionInfo, str, str]]:
        passed: dict[str, list[_Loader]] = {}
        anonymous = []  # loaders given a dataset this file does not name (a parameter)
        for loader in self.loaders:
            info = self._constructed_class(loader.dataset)
            if info is not None:
                passed.setdefault(info.name, []).append(loader)
            elif not _constructs_a_class(loader.dataset):
                anonymous.append(loader)
        constructed = {site.node.func.value for site in self.index.calls
                       if isinstance(site.node.func, cst.Name)}
        for name in self.index.classes:
            if name not in passed and not is_dataset_class(name, self.index, self.ctx):
                continue
            loaders = passed.get(name) or (anonymous if name in constructed else [])
            note = self._workers_note(loaders) if loaders else ""
            if note is None:
                continue  # every loader of it here runs in the main process
            for method in DATASET_ITEM_METHODS:
                for function in self.index.methods_named(name, method)[:1]:
                    if not loaders:  # another file's loaders may run it in the main process
                        self._loaded_elsewhere.add(function)
                    yield function, function.qualname, note

    def _loader_entries(self) -> Iterator[tuple[FunctionInfo, str, str]]:
        users: dict[FunctionInfo, list[_Loader]] = {}
        labels: dict[FunctionInfo, str] = {}
        anonymous: dict[str, list[_Loader]] = {}  # keyword -> loaders whose function is not found
        for loader in self.loaders:
            for keyword, written, values in loader.worker_code:
                functions = [f for value in values
                             for f in self._worker_functions(written, value, loader.class_name)]
                if not functions:
                    anonymous.setdefault(keyword, []).append(loader)
                for function in functions:
                    users.setdefault(function, []).append(loader)
                    labels.setdefault(function, f"the DataLoader's {keyword}")
        for function, label in labels.items():
            note = self._workers_note(users[function])
            if note is not None:
                yield function, label, note
        # named like one and not given to a loader found here: handed to a loader
        # this file does not show (another file's, or one reached through a parameter)
        referenced = {(dotted_name(expr) or "").rsplit(".", 1)[-1]
                      for expr, _ in self.index.escaped}
        for function in self.index.functions.values():
            if function in labels or not _COLLATE_NAME.fullmatch(function.name):
                continue
            owner = function.class_name
            if owner is None or is_dataset_class(owner, self.index, self.ctx):
                keyword = "worker_init_fn" if "init" in function.name else "collate_fn"
                loaders = anonymous.get(keyword, []) if function.name in referenced else []
                note = self._workers_note(loaders) if loaders else ""
                if not loaders and function.class_name is None:
                    self._loaded_elsewhere.add(function)  # another file's loaders may tell
                if note is not None:  # None: this file's loaders, all in the main process
                    yield function, f"a {keyword}", note

    def _worker_functions(self, written: cst.BaseExpression, resolved: cst.BaseExpression,
                          class_name: str | None) -> list[FunctionInfo]:
        """The functions a `collate_fn=` / `worker_init_fn=` value runs."""
        if isinstance(written, cst.Lambda):
            info = self.index.info(written)
            return [info] if info else []
        instance = self._constructed_class(resolved)
        if instance is not None:
            return self.index.methods_named(instance.name, "__call__")
        if isinstance(resolved, cst.Attribute):
            owner = self._constructed_class(self.ctx.resolve(resolved.value))
            if owner is not None:
                return self.index.methods_named(owner.name, resolved.attr.value)
        if isinstance(resolved, cst.Call) and isinstance(resolved.func, cst.Name) \
                and resolved.func.value in self.index.functions_by_name:
            # collate_fn=make_collate(cfg): the functions the factory defines
            return [child for factory in self.index.resolve_reference(resolved.func, class_name)
                    for child in factory.children if isinstance(child.node, cst.FunctionDef)]
        return self.index.resolve_reference(resolved, class_name,
                                            loose=isinstance(resolved, cst.Attribute))

    def _constructed_class(self, expr: cst.BaseExpression | None) -> ClassInfo | None:
        """The local class `expr` constructs (`Faces(...)`), if any."""
        if isinstance(expr, cst.Call):
            return self.index.local_class(expr.func)
        return None


#: Functions named as what they are for, whose DataLoader is built in another file.
_COLLATE_NAME = re.compile(r"(.*_)?collate(_fn|_batch)?|collate_.*|worker_init(_fn)?")
_RETURN_CPU = "return CPU tensors and move the batch to the device in the training loop"
_LEAVE_CUDA = "leave CUDA calls to the main process"


def _constructs_a_class(expr: cst.BaseExpression | None) -> bool:
    """`TensorDataset(x, y)`, `datasets.MNIST(...)`: a class this file does not define."""
    if not isinstance(expr, cst.Call):
        return False
    name = dotted_name(expr.func) or ""
    return name.rsplit(".", 1)[-1][:1].isupper()


def _message(site: _CudaSite, entry: FunctionInfo, label: str, note: str = "") -> str:
    unit = "lambda" if isinstance(site.unit.node, cst.Lambda) else site.unit.qualname
    if label == entry.qualname or isinstance(entry.node, cst.Lambda):
        source = label
    else:
        source = f"{entry.qualname}, {label}"
    if site.unit is entry:
        details = [] if source == unit else [label]
    else:
        details = [f"reached from {source}"]
    details += [note] if note else []
    where = f" ({'; '.join(details)})" if details else ""
    return (f"'{unit}' {site.action} inside DataLoader worker code{where}: every worker "
            "process creates its own CUDA context (~600 MiB each) or fails with 'Cannot "
            f"re-initialize CUDA in forked subprocess'; {site.fix}")
