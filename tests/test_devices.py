"""The device a `.to(...)` names, as `analysis/devices.py` (its one owner) answers:
True a CUDA device, False known not to be one, None cannot tell."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis.context import Context
from memlint.analysis.devices import is_cuda_device
from memlint.analysis.names import ImportTable
from memlint.analysis.walker import handlers_for, walk


class _Probe:
    """Asks about the argument of every `.to(...)`, where the call is."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.answers: list[bool | None] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to" and node.args:
            self.answers.append(is_cuda_device(node.args[0].value, self.ctx))


def device_of_to(source: str) -> bool | None:
    from memlint.analysis.fact_collector import FactCollector
    from memlint.analysis.project import ModuleFacts
    ctx = Context(ImportTable(), "example.py")
    facts = ModuleFacts("example.py", "example", True)
    collector = ctx.analyses[FactCollector] = FactCollector(ctx, facts)
    probe = _Probe(ctx)
    walk(cst.parse_module(textwrap.dedent(source)), ctx,
         handlers_for([collector, probe], "visit_"), handlers_for([collector, probe], "leave_"))
    assert len(probe.answers) == 1
    return probe.answers[0]


@pytest.mark.parametrize("source, expected", [
    ('import torch\nx.to("cuda:1")', True),
    ('import torch\nx.to(torch.device("cpu"))', False),
    # an if/else statement with a CUDA branch
    ('import torch\nif torch.cuda.is_available():\n    d = torch.device("cuda")\n'
     'else:\n    d = torch.device("cpu")\nx.to(d)', True),
    ('import torch\nd = torch.accelerator.current_accelerator()\nx.to(d)', True),
    ('import torch\nd = torch.device("cuda:{}".format(args.gpu))\nx.to(d)', True),
    ('import torch\nx.to("cpu:{}".format(i))', False),
    ('import torch\nx.to(f"cuda:{rank}")', True),
    ('import torch\nx.to(torch.device(f"cuda:{args.local_rank}"))', True),
    # set on args in another function, returned by a helper of another module
    ('import torch\ndef train(args):\n    x.to(args.device)', True),
    ('import torch\nfrom utils import get_device\nd = get_device()\nx.to(d)', True),
    ('import torch\nx.to(torch.float16)', False),
    # a device option whose default is the CPU: CUDA when run as meant (`--device cuda`)
    ('import torch\ndef train(args):\n    x.to(args.device)\n'
     'parser.add_argument("--device", type=str, default="cpu", help="cpu or cuda")', True),
    # a device chosen by an opt-in flag is CUDA when run with it
    ('import torch\np.add_argument("--cuda", action="store_true")\n'
     'd = torch.device("cuda" if args.cuda else "cpu")\nx.to(d)', True),
    # ... and the CPU where a setting is written as off
    ('import torch\nfrom argparse import Namespace\nargs = Namespace(cuda=False)\n'
     'd = torch.device("cuda" if args.cuda else "cpu")\nx.to(d)', False),
    ('import torch\ndef train(args):\n    x.to(args.device)\n'
     'parser.add_argument("--device", type=str, default="cuda")', True),
    # the conventional name as a constant, handed in by the caller (ASTGCN's `DEVICE`)
    ('import torch\ndef load(path, DEVICE):\n    x.to(DEVICE)', True),
    ('import torch\ndef load(path, Dev):\n    x.to(Dev)', True),
    ('import torch\ndef load(path, DEVICE_ID):\n    x.to(DEVICE_ID)', None),
    ('import torch\nx.to(other.device)', None),
    ('import torch\nimport torch_xla.core.xla_model as xm\nx.to(xm.xla_device())', False),
])
def test_the_device_a_move_names(source, expected):
    assert device_of_to(source) is expected
