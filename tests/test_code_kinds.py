"""What kind of code a finding sits in, as the analyses tell it: test code, the
CPU branch of an `if` on the GPU, a part of a tree its imports keep off CUDA."""

from __future__ import annotations

import pytest

from memlint import check_source
from memlint.analysis.context import is_test_path

SMOKE_TEST = ("import torch\n"
              "class TestVAE(unittest.TestCase):\n"
              "    def setUp(self):\n"
              "        self.model = VAE().cuda()\n"
              "    def test_forward(self):\n"
              "        return self.model(torch.randn(16, 3, 64, 64).cuda())\n")


@pytest.mark.parametrize("path, is_test", [
    ("tests/bvae.py", True), ("pkg/tests/text_cvae.py", True), ("test_model.py", True),
    ("model_test.py", True), ("tests.py", True), ("tests_rope.py", True), ("conftest.py", True),
    ("test.py", False), ("eval/test.py", False), ("contest.py", False), ("latest.py", False),
])
def test_test_files_are_told_by_name_and_folder(path, is_test):
    assert is_test_path(path) is is_test


def test_a_unittest_smoke_test_in_a_tests_folder_is_not_inference():
    assert check_source(SMOKE_TEST, "tests/bvae.py") == []
    assert [f.code for f in check_source(SMOKE_TEST, "vae_demo.py")] == ["MEM004"]


@pytest.mark.parametrize("guard, flagged_line", [
    ("if use_gpu:\n        x = x.cuda()\n        out = model(x)\n    else:\n        out = model(x)\n", 6),
    ("if not args.cuda:\n        out = model(x)\n    else:\n        out = model(x.cuda())\n", 7),
    ("if torch.cuda.is_available():\n        out = model(x.cuda())\n    else:\n        out = model(x)\n", 5),
])
def test_only_the_branch_that_runs_on_the_gpu_is_reported(guard, flagged_line):
    source = f"import torch\ndef evaluate(model, x):\n    model.eval()\n    {guard}"
    findings = check_source(source)
    assert [(f.line, f.code) for f in findings] == [(flagged_line, "MEM004")]


def test_volatile_is_one_finding_per_function_at_the_forward():
    source = ("import torch\nfrom torch.autograd import Variable\n"
              "def validate(net, loader):\n    net.eval()\n    for x, y in loader:\n"
              "        x = Variable(x.cuda(), volatile=True)\n"
              "        y = Variable(y.cuda(), volatile=True)\n"
              "        out = net(x)\n")
    findings = check_source(source)
    assert [(f.line, f.code) for f in findings] == [(8, "MEM004")]
    assert "volatile=True" in findings[0].message


def test_volatile_in_a_training_step_is_left_alone_but_not_after_eval():
    train = ("import torch\nfrom torch.autograd import Variable\n"
             "def train(net, x, y, opt):\n    y = Variable(y.cuda(), volatile=True)\n"
             "    loss = crit(net(x.cuda()), y)\n    loss.backward()\n")
    assert check_source(train) == []
    both = train + ("    net.eval()\n    x = Variable(x.cuda(), volatile=True)\n"
                    "    print(crit(net(x), y))\n")
    # the evaluation after net.eval() is reported once, at its forward (its
    # volatile named in the message): the backward before is the training's
    (finding,) = check_source(both)
    assert finding.line == 9 and "volatile=True" in finding.message
