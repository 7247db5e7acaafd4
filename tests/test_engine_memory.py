"""The engine frees each file's tree as soon as the file is checked.

The check runs with the cyclic garbage collector paused (see
`engine._collector_paused`); a reference cycle that reaches a node would keep
the tree alive until the collector returns, and then cost a collection walking
it. Reference counting alone must free everything.
"""

from __future__ import annotations

import gc
import textwrap

import libcst as cst

from memlint import check_source

TRAINER = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Frames(Dataset):
        def __getitem__(self, i):
            return load(i).cuda()

    def load(i):
        return helper(i)

    def helper(i):
        return torch.zeros(3, device="cuda")

    def evaluate(model, loader):
        model.eval()
        outputs = []
        for x in loader:
            outputs.append(model(x))
        return outputs

    def train(model, loader, opt):
        losses = []
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            losses.append(loss)
            evaluate(model, loader)
        loader = DataLoader(Frames(), batch_size=4, num_workers=4, collate_fn=lambda b: b)
        torch.no_grad()
        return torch.load("ckpt.pt")
""")


def test_no_node_of_a_checked_file_is_left_in_a_reference_cycle():
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        findings = check_source(TRAINER, "train.py")
        gc.collect()
        cyclic = [obj for obj in gc.garbage if isinstance(obj, cst.CSTNode)
                  or type(obj).__module__.startswith("memlint")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert {f.code for f in findings} >= {"MEM002", "MEM003", "MEM004", "MEM006", "MEM007"}
    assert cyclic == [], f"{len(cyclic)} objects freed only by the cyclic collector, " \
                         f"e.g. {sorted({type(o).__qualname__ for o in cyclic})[:8]}"
