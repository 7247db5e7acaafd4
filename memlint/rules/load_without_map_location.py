"""`torch.load` without `map_location` puts tensors back on the GPU they were saved from."""

from __future__ import annotations

import libcst as cst

from memlint.analysis.names import call_arg
from memlint.rules.base import Rule

_LOADERS = {"torch.load", "torch.serialization.load"}


class LoadWithoutMapLocation(Rule):
    """torch.load(...) without map_location restores tensors onto the device they
    were saved from: every rank of a job lands on cuda:0, and a checkpoint
    loaded only to copy into a model holds a second copy of the weights on
    the GPU until it is freed."""

    code = "MEM007"
    name = "load-without-map-location"
    keywords = ("load",)

    MESSAGE = ("torch.load() without map_location restores tensors to the GPU they were "
               "saved from (every rank on cuda:0, an extra copy of the weights on the GPU); "
               "pass map_location=\"cpu\" or the target device")

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
    ]
    INVALID = [
        'import torch\nstate = torch.load("ckpt.pt")',
        'import torch as T\nmodel.load_state_dict(T.load(path))',
        'from torch import load\nstate = load(path)',
        'from torch import load as tload\nckpt = tload(args.resume)',
        'import torch\nckpt = torch.load(path, weights_only=True)',
        'import torch\nwith open(p, "rb") as f:\n    state = torch.load(f)',
        'import torch.serialization\nstate = torch.serialization.load(path)',
        'import torch\nnet.load_state_dict(torch.load(os.path.join(d, "best.pth"))["model"])',
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualify(node.func) not in _LOADERS:
            return
        if call_arg(node, "map_location", position=1) is not None:
            return
        if any(arg.star for arg in node.args):
            return  # map_location may come through *args / **kwargs
        self.report(node, self.MESSAGE)
