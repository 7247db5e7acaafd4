"""MEM008 across files: a helper in another module that makes the rank's GPU
current (`utils.init_distributed_mode(args)`) counts as `set_device`."""

from __future__ import annotations

from memlint import check_paths

TRAIN = '''import os
import torch
from utils import {helper}

def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    {helper}(local_rank)
    model = torch.nn.Linear(4, 4).cuda()
'''


def _findings(tmp_path, helper_body: str, helper: str = "init_distributed_mode"):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text(
        f"import torch\nimport torch.distributed as dist\n\ndef {helper}(rank):\n{helper_body}")
    (tmp_path / "train.py").write_text(TRAIN.format(helper=helper))
    return [f for f in check_paths([str(tmp_path)], jobs=1).findings if f.code == "MEM008"]


def test_a_helper_in_another_file_that_sets_the_device_is_followed(tmp_path):
    body = "    dist.init_process_group('nccl')\n    torch.cuda.set_device(rank)\n"
    assert _findings(tmp_path, body) == []


def test_a_helper_in_another_file_that_does_not_set_it_is_not_trusted(tmp_path):
    body = "    dist.init_process_group('nccl')\n"
    found = _findings(tmp_path, body)
    assert [(f.path.endswith("train.py"), f.line) for f in found] == [(True, 8)]


def test_visible_devices_set_in_a_helper_counts(tmp_path):
    body = "    import os\n    os.environ['CUDA_VISIBLE_DEVICES'] = str(rank)\n"
    assert _findings(tmp_path, body, helper="configure") == []


def test_a_helper_memlint_cannot_read_is_said_less_of(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(TRAIN.format(helper="init_dist").replace(
        "from utils import", "from mmcv.runner import"))
    assert [f for f in check_paths([str(tmp_path)], jobs=1).findings if f.code == "MEM008"] == []
    # a library helper named for something else does not hide the finding
    (tmp_path / "train.py").write_text(TRAIN.format(helper="seed_everything").replace(
        "from utils import", "from lightning import"))
    assert [f.line for f in check_paths([str(tmp_path)], jobs=1).findings
            if f.code == "MEM008"] == [8]


def test_the_screen_passes_every_flagged_example_and_spares_files_without_a_default_use():
    from memlint.rules.mem008_implicit_default_gpu.rule import ImplicitDefaultGpu as Rule

    def wants(text: str) -> bool:
        return Rule.entry.wants(text, text.lower())

    assert all(wants(example) for example in Rule.INVALID)
    # picks a GPU, but every use names it: nothing to walk for
    assert not wants("import os, torch\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
                     "model = Net().cuda(local_rank)\n")
    # uses the default device, but never picks one
    assert not wants("import torch\nmodel = Net().cuda()\n")
    assert wants("import os\nrank = int(os.environ['RANK'])\nx = torch.ones(2, device='CUDA')\n")
