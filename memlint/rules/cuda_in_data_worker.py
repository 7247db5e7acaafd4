"""CUDA work in code that DataLoader worker processes run."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from memlint.analysis.devices import creates_on_cuda, moves_to_cuda
from memlint.analysis.module_index import FunctionInfo, ModuleIndex
from memlint.analysis.names import call_arg, dotted_name, has_star_args, has_star_kwargs
from memlint.rules.base import Rule

_LOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
#: Dataset methods that run in the worker processes, once per sample or batch.
_WORKER_METHODS = ("__getitem__", "__getitems__", "__iter__", "__next__")
#: DataLoader arguments that run in the workers, with their positions.
_WORKER_ARGUMENTS = (("collate_fn", 6), ("worker_init_fn", 10))
#: Libraries whose `Dataset` classes are not fed to a torch DataLoader.
_FOREIGN_DATASET_ROOTS = {"datasets", "tensorflow", "tf", "keras", "tensorflow_datasets",
                          "paddle", "mindspore", "jax", "flax", "ray"}
#: torch.cuda functions that create the CUDA context (is_available, device_count,
#: manual_seed and empty_cache do not: they query the driver or are deferred).
_CUDA_INITIALISERS = {f"torch.cuda.{name}" for name in (
    "init", "current_device", "set_device", "synchronize", "get_device_name",
    "get_device_capability", "get_device_properties", "mem_get_info", "current_stream",
    "default_stream", "Stream", "Event", "stream", "device", "ipc_collect",
    "can_device_access_peer", "get_rng_state", "set_per_process_memory_fraction")}


@dataclass
class _CudaSite:
    unit: FunctionInfo
    node: cst.Call
    statement: cst.CSTNode | None
    action: str
    fix: str


@dataclass
class _Loader:
    """A DataLoader call: what it was given, and whether it starts workers."""

    dataset: cst.BaseExpression | None
    worker_code: list[tuple[str, cst.BaseExpression, cst.BaseExpression]]  # (argument, as written, resolved)
    class_name: str | None
    starts_workers: bool


class CudaInDataWorker(Rule):
    """CUDA work in code that runs inside DataLoader worker processes: a Dataset's
    `__getitem__`/`__iter__`, a `collate_fn` or `worker_init_fn`, and the helpers
    of the same module they call. Each worker process that touches CUDA creates
    its own CUDA context (~600 MiB of GPU memory each), or, under the fork start
    method, dies with "Cannot re-initialize CUDA in forked subprocess".

    Loaders of this module that run in the main process (`num_workers=0`, the
    default) are left alone: there the work happens in the process that owns
    the context already. A Dataset whose loader is not in this module is
    flagged, since workers are usually turned on elsewhere."""

    code = "MEM002"
    name = "cuda-in-data-worker"
    keywords = ("Dataset", "DataLoader", "collate_fn", "worker_init_fn")

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
    ]
    INVALID = [
        "from torch.utils.data import Dataset\nclass D(Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].cuda()",
        "import torch.utils.data as data\nclass D(data.Dataset):\n"
        "    def __getitem__(self, i):\n        return self.x[i].to('cuda:0')",
        "import torch\nfrom torch.utils.data import IterableDataset\nclass Stream(IterableDataset):\n"
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
    ]

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.index = ModuleIndex.of(ctx)
        self.sites: list[_CudaSite] = []
        self.loaders: list[_Loader] = []

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in _LOADERS:
            self.loaders.append(self._loader(node))
            return
        unit = self.index.current
        if unit is None:
            return
        if moves_to_cuda(node, self.ctx):
            action, fix = "moves tensors to CUDA", _RETURN_CPU
        elif creates_on_cuda(node, self.ctx):
            action, fix = "creates tensors on CUDA", _RETURN_CPU
        elif qualified in _CUDA_INITIALISERS:
            action, fix = f"calls {qualified}(), which initialises CUDA,", _LEAVE_CUDA
        else:
            return
        self.sites.append(_CudaSite(unit, node, self.statement(), action, fix))

    def _loader(self, node: cst.Call) -> _Loader:
        dataset = call_arg(node, "dataset", position=0)
        worker_code = []
        for keyword, position in _WORKER_ARGUMENTS:
            arg = call_arg(node, keyword, position)
            if arg is not None:
                worker_code.append((keyword, arg.value, self.ctx.resolve(arg.value)))
        workers = call_arg(node, "num_workers", position=5)
        if workers is None:
            starts = has_star_kwargs(node) or has_star_args(node)
        else:
            starts = not (isinstance(workers.value, cst.Integer) and workers.value.evaluated_value == 0)
        return _Loader(self.ctx.resolve(dataset.value) if dataset else None, worker_code,
                       self.index.current_class, starts)

    # -- after the walk: entry points, what they reach, and the CUDA work there
    def finish(self) -> None:
        if not self.sites:
            return
        entries: dict[FunctionInfo, str] = {}
        for entry, label in self._dataset_entries():
            entries.setdefault(entry, label)
        for entry, label in self._loader_entries():
            entries.setdefault(entry, label)
        reached: dict[FunctionInfo, tuple[FunctionInfo, str]] = {}
        for entry, label in entries.items():
            for unit in self.index.reachable(entry):
                reached.setdefault(unit, (entry, label))
        flagged_statements = set()
        for site in self.sites:
            if site.unit in reached and site.statement not in flagged_statements:
                flagged_statements.add(site.statement)  # `return x.cuda(), y.cuda()` once
                entry, label = reached[site.unit]
                self.report(site.node, _message(site, entry, label), site.statement)

    def _dataset_entries(self):
        passed = {}
        for loader in self.loaders:
            info = self._constructed_class(loader.dataset)
            if info is not None:
                passed.setdefault(info.name, []).append(loader.starts_workers)
        for name in self.index.classes:
            if name not in passed and not self._is_dataset(name):
                continue
            if name in passed and not any(passed[name]):
                continue  # every loader of it runs in the main process
            for method in _WORKER_METHODS:
                for function in self.index.methods_named(name, method)[:1]:
                    yield function, function.qualname

    def _loader_entries(self):
        starts: dict[FunctionInfo, bool] = {}
        labels: dict[FunctionInfo, str] = {}
        for loader in self.loaders:
            for keyword, written, resolved in loader.worker_code:
                for function in self._worker_functions(written, resolved, loader.class_name):
                    starts[function] = starts.get(function, False) or loader.starts_workers
                    labels.setdefault(function, f"the DataLoader's {keyword}")
        for function, label in labels.items():
            if starts[function]:
                yield function, label
        for function in self.index.functions.values():
            if function in labels or not _COLLATE_NAME.fullmatch(function.name):
                continue
            if function.class_name is None or self._is_dataset(function.class_name):
                # defined here, handed to a DataLoader in another file
                yield function, f"a {'worker_init_fn' if 'init' in function.name else 'collate_fn'}"

    def _worker_functions(self, written, resolved, class_name) -> list[FunctionInfo]:
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
        return self.index.resolve_reference(resolved, class_name, loose=isinstance(resolved, cst.Attribute))

    def _constructed_class(self, expr):
        """The local class `expr` constructs (`Faces(...)`), if any."""
        if isinstance(expr, cst.Call):
            return self.index.local_class(expr.func)
        return None

    def _is_dataset(self, class_name: str) -> bool:
        for info in self.index.lineage(class_name):
            for base in info.bases:
                if isinstance(base, cst.Name) and base.value in self.index.classes:
                    continue  # judged as it comes up in the lineage
                if self._is_dataset_base(base):
                    return True
        return False

    def _is_dataset_base(self, base: cst.BaseExpression) -> bool:
        qualified = self.ctx.names.qualify(base)
        if qualified is not None:
            if qualified.startswith(("torch.utils.data.", "torchvision.datasets.")):
                return True
            if qualified.split(".", 1)[0] in _FOREIGN_DATASET_ROOTS:
                return False
        # a base from elsewhere in the project (`from .base import BaseDataset`)
        name = qualified or dotted_name(base) or ""
        return name.rsplit(".", 1)[-1].endswith("Dataset")


#: Functions named as what they are for, whose DataLoader is built in another file.
_COLLATE_NAME = re.compile(r"(.*_)?collate(_fn|_batch)?|collate_.*|worker_init(_fn)?")
_RETURN_CPU = "return CPU tensors and move the batch to the device in the training loop"
_LEAVE_CUDA = "leave CUDA calls to the main process"


def _message(site: _CudaSite, entry: FunctionInfo, label: str) -> str:
    unit = "lambda" if isinstance(site.unit.node, cst.Lambda) else site.unit.qualname
    if label == entry.qualname or isinstance(entry.node, cst.Lambda):
        source = label
    else:
        source = f"{entry.qualname}, {label}"
    if site.unit is entry:
        where = "" if source == unit else f" ({label})"
    else:
        where = f" (reached from {source})"
    return (f"'{unit}' {site.action} inside DataLoader worker code{where}: every worker "
            "process creates its own CUDA context (~600 MiB each) or fails with 'Cannot "
            f"re-initialize CUDA in forked subprocess'; {site.fix}")
