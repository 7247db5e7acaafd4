"""A DataLoader feeding a GPU without pinned memory: every batch is copied from pageable memory."""

from __future__ import annotations

from collections import Counter

import libcst as cst

from memlint.analysis.devices import creates_on_cuda, is_cuda_device, moves_to_cuda
from memlint.analysis.names import call_arg, dotted_name, has_star_kwargs
from memlint.analysis.project import UnlessProjectOnCpu
from memlint.rules.base import Rule

_DATALOADERS = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
_SET_DEFAULT_DEVICE = {"torch.set_default_device"}
#: DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
#: collate_fn, pin_memory, ...)
_PIN_MEMORY_POSITION = 7
_COLLATE_POSITION = 6
_PARTIAL = {"functools.partial"}


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
        self.unpinned: list[tuple[cst.Call, cst.CSTNode | None, str, str | None]] = []
        #: how often each identifier is read or written in the module, to tell a
        #: loader that is never used again
        self.identifiers: Counter[str] = Counter()
        self.copies_to_cuda = False
        self.first_copy: cst.Call | None = None  # the evidence, for related locations
        self.copies_non_blocking = False

    def visit_Name(self, node: cst.Name) -> None:
        self.identifiers[node.value] += 1

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualify(node.func) in _DATALOADERS:
            self._check_loader(node)
        elif moves_to_cuda(node, self.ctx):
            self.copies_to_cuda = True
            non_blocking = call_arg(node, "non_blocking")
            if non_blocking is not None and _is_true(non_blocking.value):
                self.copies_non_blocking = True
        elif creates_on_cuda(node, self.ctx):
            self.copies_to_cuda = True
        elif self.ctx.qualify(node.func) in _SET_DEFAULT_DEVICE and node.args:
            self.copies_to_cuda |= is_cuda_device(node.args[0].value, self.ctx) is True
        if self.copies_to_cuda and self.first_copy is None:
            self.first_copy = node

    def _check_loader(self, node: cst.Call) -> None:
        if self._collate_moves_to_device(node):
            return  # batches arrive on the device: pinning a CUDA tensor raises
        pin = call_arg(node, "pin_memory", position=_PIN_MEMORY_POSITION)
        if pin is None:
            if has_star_kwargs(node):
                return  # pin_memory may come with the **kwargs
            written = "DataLoader(...) without pin_memory"
        elif _is_false(pin.value):
            written = "DataLoader(..., pin_memory=False)"
        else:
            return  # True, or decided at run time (a variable, `device.type == "cuda"`)
        self.unpinned.append((node, self.statement(), written, self._private_target()))

    def _collate_moves_to_device(self, node: cst.Call) -> bool:
        """`collate_fn=partial(collate, device=device)`: the collate function is
        given the training device, so the batches it returns are already there."""
        collate = call_arg(node, "collate_fn", position=_COLLATE_POSITION)
        value = self.ctx.resolve(collate.value) if collate is not None else None
        return (isinstance(value, cst.Call) and self.ctx.qualify(value.func) in _PARTIAL
                and call_arg(value, "device") is not None)

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

    def finish(self) -> None:
        if not self.copies_to_cuda:
            return
        non_blocking = self.NON_BLOCKING if self.copies_non_blocking else ""
        for node, statement, written, target in self.unpinned:
            if target is not None and self.identifiers[target] <= 1:
                continue  # built and never used: no batch of it is ever copied
            self.report(node, self.MESSAGE.format(loader=written, non_blocking=non_blocking),
                        statement, UnlessProjectOnCpu.here(self.ctx),
                        related=[(self.first_copy, "copied to a CUDA device here: this "
                                                   "module's batches go to the GPU")])


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"
