"""`torch.load` without `map_location` puts tensors back on the GPU they were saved from."""

from __future__ import annotations

import re

import libcst as cst

from memlint.analysis.autograd_values import names_in
from memlint.analysis.devices import string_value
from memlint.analysis.names import call_arg, dotted_name
from memlint.analysis.project import FactCollector, UnlessProjectOnCpu
from memlint.rules.base import Rule

_LOADERS = {"torch.load", "torch.serialization.load"}


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
    name = "load-without-map-location"
    keywords = ("load",)

    RANKS = ("torch.load() without map_location in a multi-process job: every rank restores "
             "the checkpoint onto the GPU it was saved from (usually cuda:0), one copy per "
             "rank on that GPU; pass map_location=\"cpu\" or the rank's own device")
    COPIED = ("torch.load() without map_location puts a second copy of the checkpoint on the "
              "GPU it was saved from while load_state_dict copies it (as large as the weights, "
              "optimizer state included), and fails on a host without that GPU; pass "
              "map_location=\"cpu\"")
    RESTORED = ("torch.load() without map_location restores every tensor onto the GPU it was "
                "saved from (an extra copy on the GPU until the loaded object is freed; the "
                "load fails on a host without that GPU); pass map_location=\"cpu\" or the "
                "target device")

    VALID = [
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
        # pretrained weights loaded while a module is built (on the CPU)
        'import torch\nclass FCN(torch.nn.Module):\n    def __init__(self):\n'
        '        super().__init__()\n        self.net = resnet101()\n'
        '        self.net.load_state_dict(torch.load(res101_path))\nmodel = FCN().cuda()',
    ]
    INVALID = [
        'import torch\nmodel.cuda()\nstate = torch.load("ckpt.pt")',
        'import torch as T\nmodel.cuda()\nmodel.load_state_dict(T.load(path))',
        'from torch import load\ndevice = "cuda"\nstate = load(path)',
        'from torch import load as tload\nckpt = tload(args.resume)\nnet.to("cuda")',
        'import torch\nckpt = torch.load(path, weights_only=True)\nnet.cuda()',
        'import torch\nwith open(p, "rb") as f:\n    state = torch.load(f)\nnet.cuda()',
        'import torch.serialization\nstate = torch.serialization.load(path)\nnet.cuda()',
        'import torch\nnet.cuda()\n'
        'net.load_state_dict(torch.load(os.path.join(d, "best.pth"))["model"])',
        # saved from the GPU model in the same file
        'import torch\nmodel.cuda()\ntorch.save(model.state_dict(), "best.pt")\n'
        'model.load_state_dict(torch.load("best.pt"))',
        # every rank
        'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\n'
        'model.load_state_dict(torch.load(args.resume))',
    ]

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.loads: list[tuple[cst.Call, cst.CSTNode | None, bool]] = []
        #: the path expressions of `torch.save` calls, by whether what they saved is on the CPU
        self.saved_on_cpu: set[str] = set()
        self.saved_maybe_gpu: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualify(node.func)
        if qualified in _SAVERS and len(node.args) >= 2:
            key = _path_key(node.args[1].value)
            if key is not None:
                on_cpu = _saves_cpu_values(node.args[0].value, self.ctx)
                (self.saved_on_cpu if on_cpu else self.saved_maybe_gpu).add(key)
            return
        if qualified not in _LOADERS:
            return
        if call_arg(node, "map_location", position=1) is not None:
            return
        if any(arg.star for arg in node.args):
            return  # map_location may come through *args / **kwargs
        if self._holds_no_gpu_tensors(node):
            return
        self.loads.append((node, self.statement(), self._into_load_state_dict(node)))

    def finish(self) -> None:
        distributed = FactCollector.of(self.ctx).facts.distributed
        for node, statement, copied in self.loads:
            path = _path_key(node.args[0].value) if node.args else None
            if path in self.saved_on_cpu and path not in self.saved_maybe_gpu:
                continue  # saved in this file from CPU values
            message = self.RANKS if distributed else self.COPIED if copied else self.RESTORED
            self.report(node, message, statement, UnlessProjectOnCpu())

    def _holds_no_gpu_tensors(self, node: cst.Call) -> bool:
        """A data or cache file, or pretrained weights loaded while a module is built."""
        names = [dotted_name(node.args[0].value) or "" if node.args else "",
                 string_value(node.args[0].value) or "" if node.args else ""]
        parent = self.ctx.parent
        if isinstance(parent, cst.Assign):
            names += [n for t in parent.targets for n in names_in(t.target)]
        if any(_DATA_FILE.search(name) for name in names if name):
            return True
        function = self.ctx.function
        return (function is not None and function.name.value == "__init__"
                and self.ctx.class_def is not None)

    def _into_load_state_dict(self, node: cst.Call) -> bool:
        """`x.load_state_dict(torch.load(p))`, also through `[...]` or a name
        assigned from the load."""
        for ancestor in reversed(self.ctx.ancestors[:-1]):
            if isinstance(ancestor, cst.Call):
                func = ancestor.func
                return isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                break
        return isinstance(self.ctx.parent, cst.Assign) or \
            isinstance(self.ctx.parent, cst.Subscript)


_SAVERS = {"torch.save", "torch.serialization.save"}
#: Files that hold data, caches or bookkeeping rather than GPU tensors.
_DATA_FILE = re.compile(r"(cache|vocab|corpus|dataset|processed|examples|scheduler|slices|"
                        r"^data$|\.data$|_data$|^data_)", re.IGNORECASE)


def _path_key(node: cst.BaseExpression) -> str | None:
    """A path expression as text, to pair a load with the save of the same file."""
    text = string_value(node)
    if text:
        return text
    return dotted_name(node)


def _saves_cpu_values(node: cst.BaseExpression, ctx) -> bool:
    """`model.cpu().state_dict()`, `x.cpu()`, `{k: v.cpu() ...}`, or a name
    bound to such a value or to a CPU tensor factory without a device."""
    node = ctx.resolve(node)
    if isinstance(node, cst.DictComp):
        return _saves_cpu_values(node.value, ctx)
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        if method == "cpu":
            return True
        if method in ("state_dict", "detach", "clone", "float", "half", "contiguous"):
            node = node.func.value
            continue
        break
    if isinstance(node, cst.Call):
        qualified = ctx.qualify(node.func) or ""
        if qualified.startswith("torch.") and call_arg(node, "device") is None \
                and not qualified.startswith(("torch.load", "torch.cuda")):
            return True  # `torch.arange(4)`, `torch.randn(3)`: made on the CPU
    if isinstance(node, (cst.Dict, cst.List, cst.Tuple)):
        values = [e.value for e in node.elements if isinstance(e, (cst.DictElement, cst.Element))]
        return bool(values) and all(_saves_cpu_values(v, ctx) for v in values)
    return False
