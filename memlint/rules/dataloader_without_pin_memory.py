"""A DataLoader feeding a GPU without pinned memory: every batch is copied from pageable memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import libcst as cst

from memlint.analysis.devices import creates_on_cuda, is_cuda_device, moves_to_cuda
from memlint.analysis.autograd_values import names_in
from memlint.analysis.names import call_arg, dotted_name, has_star_kwargs
from memlint.analysis.project import (FactCollector, UnlessNoImporterCopiesToCuda,
                                      UnlessProjectOnCpu)
from memlint.rules.base import Rule

_DATALOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
_SET_DEFAULT_DEVICE = {"torch.set_default_device"}
#: DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
#: collate_fn, pin_memory, ...)
_PIN_MEMORY_POSITION = 7
_COLLATE_POSITION = 6
_PARTIAL = {"functools.partial"}
_INDEX_RANGES = {"range", "numpy.arange", "torch.arange"}
_TENSOR_DATASETS = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}


@dataclass
class _Flow:
    """What a `for` over a loader does with its batches, or a function with its
    parameters: the values followed are the loop's targets (the parameters)
    and the names bound to parts of them."""

    name: str  # the name iterated (`train_loader`), or the function's
    names: set[str]
    moved: bool = False  # one of them, or a part of one, is copied to a CUDA device
    #: functions of this module given one, with the argument it is (position or keyword)
    handed_to: list[tuple[str, int | str]] = field(default_factory=list)
    unknown: bool = False  # one goes to code this module does not show


#: Calls that take a batch without moving it anywhere.
_HARMLESS_BUILTINS = {"print", "len", "str", "repr", "int", "float", "bool", "isinstance", "type",
                      "enumerate", "zip", "range", "list", "tuple", "dict", "set", "sorted",
                      "min", "max", "sum", "any", "all", "next", "iter", "hasattr", "getattr"}
#: Wrappers whose iteration is the loader's (`enumerate(loader)`, `tqdm(loader)`).
_LOOP_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "list", "tqdm.tqdm", "tqdm.auto.tqdm",
                  "tqdm.notebook.tqdm", "trange"}
#: Methods that give (a view of, or the same data as) part of a batch.
_PART_METHODS = {"float", "double", "half", "long", "int", "bool", "view", "reshape", "permute",
                 "squeeze", "unsqueeze", "transpose", "contiguous", "items", "values", "get",
                 "type_as", "flatten", "t"}


def _root_name(node: cst.BaseExpression) -> str | None:
    """`batch` for `batch`, `batch[0]`, `batch.x`, `batch["image"][0]`."""
    while isinstance(node, (cst.Subscript, cst.Attribute)):
        node = node.value
    return dotted_name(node)


def _part_of(value: cst.BaseExpression) -> str | None:
    """The name a value is a part of: `batch` for `batch[0]`, `batch.x.float()`,
    `Variable(batch[0])`."""
    while isinstance(value, cst.Call):
        if isinstance(value.func, cst.Attribute) and value.func.attr.value in _PART_METHODS:
            value = value.func.value
        elif (dotted_name(value.func) or "").endswith("Variable") and value.args:
            value = value.args[0].value
        else:
            break
    if isinstance(value, (cst.Tuple, cst.List)):
        roots = {_part_of(e.value) for e in value.elements}
        return roots.pop() if len(roots) == 1 else None
    return _root_name(value) if isinstance(value, (cst.Name, cst.Subscript, cst.Attribute)) \
        else None


def _local_callee(func: cst.BaseExpression) -> str | None:
    """`helper` for `helper(x)` and `self.helper(x)`: a function this module may define."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.value.value in ("self", "cls"):
        return func.attr.value
    return None


def _iterated_name(node: cst.BaseExpression) -> str | None:
    """The name a loop iterates, through `enumerate`, `tqdm`, `zip`'s first argument."""
    while isinstance(node, cst.Call) and node.args and \
            (dotted_name(node.func) or "") in _LOOP_WRAPPERS:
        node = node.args[0].value
    return dotted_name(node)


def _reads_one_batch(node: cst.Call) -> bool:
    """`next(iter(loader))`, `next(loader_iter)`."""
    return isinstance(node.func, cst.Name) and node.func.value == "next" and bool(node.args)


class _Loader(NamedTuple):
    node: cst.Call
    statement: cst.CSTNode | None
    written: str  # how the call is written, for the message
    target: str | None  # the private name it is assigned to, if any
    dataset_class: str | None  # what builds its dataset (`FaceDataset(...)`)
    in_function: bool  # built in a function another module can call
    assigned: str | None  # the name it is assigned to (`self.train_loader`)


def _on_cuda(value: cst.BaseExpression, ctx) -> bool:
    return isinstance(value, cst.Call) and (moves_to_cuda(value, ctx) or creates_on_cuda(value, ctx))


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
    name = "dataloader-without-pin-memory"
    keywords = ("DataLoader",)

    MESSAGE = ("{loader} while this module copies batches to a CUDA device: every batch is "
               "copied from pageable host memory (~7 GB/s vs ~54 GB/s pinned){non_blocking}; "
               "pass pin_memory=True")
    ELSEWHERE = ("{loader} in a module whose importers copy batches to a CUDA device: every "
                 "batch is copied from pageable host memory (~7 GB/s vs ~54 GB/s pinned); "
                 "pass pin_memory=True")
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
        'loader = DataLoader(ds, batch_size=8)\nimgs, labels = next(iter(loader))\nprint(imgs.shape)',
        # indices into tensors kept on the GPU
        'import torch\nfrom torch.utils.data import DataLoader\nX = X.cuda()\n'
        'for idx in DataLoader(range(len(X)), batch_size=64, shuffle=True):\n    model(X[idx])',
        # the collate function is handed the device: batches arrive on the GPU
        'import torch\nfrom functools import partial\nfrom torch.utils.data import DataLoader\n'
        'device = torch.device("cuda")\n'
        'loader = DataLoader(ds, batch_size=8, collate_fn=partial(collate, device=device))\n'
        'model.to(device)',
    ]
    INVALID = [
        'import torch\nfrom torch.utils.data import DataLoader\n'
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        'loader = DataLoader(ds, batch_size=64, shuffle=True)\n'
        'for x, y in loader:\n    x, y = x.to(device), y.to(device)',
        'from torch.utils.data import DataLoader\n'
        'loader = DataLoader(ds, batch_size=64, pin_memory=False)\n'
        'for x, y in loader:\n    x = x.cuda()',
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
    ]

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.unpinned: list[_Loader] = []
        #: Dataset classes of this module whose `__init__` puts the data on a GPU
        self.gpu_dataset_classes: set[str] = set()
        #: every `for` over a name, and what its body does with the batches
        self.batch_loops: list[_Flow] = []
        #: what each function of the module does with its parameters (by name)
        #: per function name, each definition's parameters in order, each with its flow
        self.function_flows: dict[str, list[list[_Flow]]] = {}
        self._open_flows: dict[cst.CSTNode, list[_Flow]] = {}
        self.single_batch_reads: Counter[str] = Counter()  # `next(iter(loader))` at the top level
        self.passed_names: set[str] = set()  # names handed to a call (`fit(model, loader)`)
        #: how often each identifier is read or written in the module, to tell a
        #: loader that is never used again
        self.identifiers: Counter[str] = Counter()
        self.copies_to_cuda = False
        self.first_copy: cst.Call | None = None  # the evidence, for related locations
        self.copies_non_blocking = False

    def visit_Name(self, node: cst.Name) -> None:
        self.identifiers[node.value] += 1

    def visit_For(self, node: cst.For) -> None:
        iterated = _iterated_name(node.iter)
        parts = {_part_of(arg.value) for arg in node.iter.args} \
            if isinstance(node.iter, cst.Call) else {_part_of(node.iter)}
        for flow in self._open_values():
            if parts & flow.names:  # `for x_slice, y_slice in zip(x, y)`: parts of a batch
                flow.names.update(names_in(node.target))
        if iterated is not None:
            loop = _Flow(iterated, set(names_in(node.target)))
            self.batch_loops.append(loop)
            self._open_flows[node] = [loop]

    def leave_For(self, node: cst.For) -> None:
        self._open_flows.pop(node, None)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = [_Flow(p.name.value, {p.name.value})
                  for p in (*node.params.posonly_params, *node.params.params,
                            *node.params.kwonly_params) if p.name.value not in ("self", "cls")]
        self.function_flows.setdefault(node.name.value, []).append(params)
        self._open_flows[node] = params

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._open_flows.pop(node, None)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        """`[t.to(device) for t in batch]`: the element is a part of the batch."""
        root = _root_name(node.iter)
        for flow in self._open_values():
            if root in flow.names:
                flow.names.update(names_in(node.target))

    def visit_Assign(self, node: cst.Assign) -> None:
        """`x, y = batch`, `x = batch["image"]`, `x = x.float()`: parts of a batch."""
        root = _part_of(node.value)
        for flow in self._open_values():
            if root in flow.names:
                for target in node.targets:
                    flow.names.update(names_in(target.target))

    def visit_Call(self, node: cst.Call) -> None:
        if self._open_flows:
            self._follow_values(node)
        if not (isinstance(node.func, cst.Name) and node.func.value in _HARMLESS_BUILTINS):
            self.passed_names.update(filter(None, (dotted_name(a.value) for a in node.args)))
        if _reads_one_batch(node) and self.ctx.function is None:  # once, at a script's top level
            self.single_batch_reads[_iterated_name(node.args[0].value)] += 1
        if self.ctx.qualify(node.func) in _DATALOADERS:
            self._check_loader(node)
        elif moves_to_cuda(node, self.ctx):
            self._note_dataset_on_gpu()
            self.copies_to_cuda = True
            non_blocking = call_arg(node, "non_blocking")
            if non_blocking is not None and _is_true(non_blocking.value):
                self.copies_non_blocking = True
        elif creates_on_cuda(node, self.ctx):
            self._note_dataset_on_gpu()
            self.copies_to_cuda = True
        elif self.ctx.qualify(node.func) in _SET_DEFAULT_DEVICE and node.args:
            self.copies_to_cuda |= is_cuda_device(node.args[0].value, self.ctx) is True
        if self.copies_to_cuda and self.first_copy is None:
            self.first_copy = node

    def _follow_values(self, node: cst.Call) -> None:
        """In a loop over a loader (or a function, for its parameters): is a
        batch, or a part of one, copied to a CUDA device, handed to a function
        of this module, or to code this module does not show?"""
        func = node.func
        receiver = _part_of(func.value) if isinstance(func, cst.Attribute) else None
        moved = moves_to_cuda(node, self.ctx)
        callee = _local_callee(func)
        harmless = isinstance(func, cst.Name) and func.value in _HARMLESS_BUILTINS
        for flow in self._open_values():
            if receiver in flow.names:
                flow.moved |= moved
                continue
            if harmless:
                continue
            position = 0
            for arg in node.args:
                slot: int | str | None = arg.keyword.value if arg.keyword else position
                if arg.keyword is None and not arg.star:
                    position += 1
                if _part_of(arg.value) not in flow.names:
                    continue
                if callee is None or arg.star:
                    flow.unknown = True
                else:
                    flow.handed_to.append((callee, slot))

    def _note_dataset_on_gpu(self) -> None:
        function, class_def = self.ctx.function, self.ctx.class_def
        if function is not None and function.name.value == "__init__" and class_def is not None:
            self.gpu_dataset_classes.add(class_def.name.value)

    def _check_loader(self, node: cst.Call) -> None:
        if self._collate_moves_to_device(node):
            return  # batches arrive on the device: pinning a CUDA tensor raises
        dataset = call_arg(node, "dataset", position=0)
        dataset_value = self.ctx.resolve(dataset.value) if dataset is not None else None
        if dataset_value is not None and self._no_host_tensors(dataset_value):
            return
        pin = call_arg(node, "pin_memory", position=_PIN_MEMORY_POSITION)
        if pin is None:
            if has_star_kwargs(node):
                return  # pin_memory may come with the **kwargs
            written = "DataLoader(...) without pin_memory"
        elif _is_false(pin.value):
            written = "DataLoader(..., pin_memory=False)"
        else:
            return  # True, or decided at run time (a variable, `device.type == "cuda"`)
        dataset_class = dotted_name(dataset_value.func) \
            if isinstance(dataset_value, cst.Call) else None
        parent = self.ctx.parent
        assigned = dotted_name(parent.targets[0].target) \
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
        self.unpinned.append(_Loader(node, self.statement(), written, self._private_target(),
                                     dataset_class, self.ctx.function is not None, assigned))

    def _no_host_tensors(self, dataset: cst.BaseExpression) -> bool:
        """A dataset whose items are not host tensors to pin: indices
        (`range(n)`, `torch.arange(n)`) into data kept elsewhere, or a
        `TensorDataset` of tensors already on a GPU (pinning them raises)."""
        if not isinstance(dataset, cst.Call):
            return False
        qualified = self.ctx.qualify(dataset.func) or dotted_name(dataset.func) or ""
        if qualified in _INDEX_RANGES:
            return True
        if qualified in _TENSOR_DATASETS:
            return any(_on_cuda(self.ctx.resolve(arg.value), self.ctx) for arg in dataset.args)
        return False

    def _collate_moves_to_device(self, node: cst.Call) -> bool:
        """`collate_fn=partial(collate, device=device)`: the collate function is
        given the training device, so the batches it returns are already there
        (also when either branch of an `if` binds it so)."""
        collate = call_arg(node, "collate_fn", position=_COLLATE_POSITION)
        value = self.ctx.resolve(collate.value) if collate is not None else None
        choices = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        return all(isinstance(c, cst.Call) and self.ctx.qualify(c.func) in _PARTIAL
                   and call_arg(c, "device") is not None for c in choices)

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

    def _where_batches_go(self, loader: str | None) -> str:
        """"gpu" when a loop over the loader copies a batch to a CUDA device,
        "stay" when every loop over it keeps its batches on the host (turned
        into numpy, strings, new tensors) or it is only read once, else
        "unknown" (not iterated here, or its batches go to other code)."""
        if loader is None:
            return "unknown"
        verdicts = {self._flow_verdict(loop) for loop in self.batch_loops if loop.name == loader}
        if loader in self.passed_names:
            verdicts.add("unknown")  # handed to code that may iterate it elsewhere
        if verdicts:
            return "gpu" if "gpu" in verdicts else "unknown" if "unknown" in verdicts else "stay"
        reads = self.single_batch_reads.get(loader, 0)
        # read once at the top level, and named nowhere else but where it is built
        return "stay" if reads and self.identifiers[loader.rsplit(".", 1)[-1]] <= reads + 1 \
            else "unknown"

    def _open_values(self) -> list[_Flow]:
        return [flow for flows in self._open_flows.values() for flow in flows]

    def _flow_verdict(self, flow: _Flow, depth: int = 0) -> str:
        """"gpu", "stay" or "unknown" for what a loop or function does with its
        values, following the functions of this module it hands them to."""
        if flow.moved:
            return "gpu"
        verdicts = {"unknown"} if flow.unknown or depth > 3 else set()
        for callee, slot in flow.handed_to:
            definitions = self.function_flows.get(callee)
            if not definitions:
                verdicts.add("unknown")
            for params in definitions or ():
                param = next((f for f in params if f.name == slot), None) \
                    if isinstance(slot, str) else params[slot] if slot < len(params) else None
                verdicts.add("unknown" if param is None else self._flow_verdict(param, depth + 1))
        return "gpu" if "gpu" in verdicts else "unknown" if "unknown" in verdicts else "stay"

    def finish(self) -> None:
        non_blocking = self.NON_BLOCKING if self.copies_non_blocking else ""
        for node, statement, written, target, dataset_class, in_function, assigned in self.unpinned:
            if target is not None and self.identifiers[target] <= 1:
                continue  # built and never used: no batch of it is ever copied
            batches = self._where_batches_go(assigned)
            if batches == "stay":
                continue  # its loops copy no batch to the GPU, or it is read once
            if dataset_class in self.gpu_dataset_classes:
                continue  # the Dataset put its data on the GPU: MEM001's finding
            if not self.copies_to_cuda:
                if not in_function:
                    continue  # a module-level or `__main__` loader: no importer iterates it
                # built here, iterated where it is imported (a `get_loader()` helper)
                self.report(node, self.ELSEWHERE.format(loader=written), statement,
                            UnlessNoImporterCopiesToCuda(FactCollector.of(self.ctx).facts.module))
                continue
            self.report(node, self.MESSAGE.format(loader=written, non_blocking=non_blocking),
                        statement, UnlessProjectOnCpu.here(self.ctx),
                        related=[(self.first_copy, "copied to a CUDA device here: this "
                                                   "module's batches go to the GPU")])


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"
