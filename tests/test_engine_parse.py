"""The engine parses without libcst's per-node validation, and only while parsing.

`engine.source._nodes_unvalidated` skips `CSTNode._validate` for the nodes the
parser builds from source (a guard for hand-built trees, ~13% of the parse);
nodes built anywhere else, the fixes' included, must still be validated.
"""

from __future__ import annotations

import libcst as cst
import pytest

from memlint import check_source

LOADS = "import torch\nstate = torch.load(path)\nx = (1 + 2)\n"


def test_the_parse_builds_nodes_without_validating_them(monkeypatch):
    validated = []
    original = cst.Name._validate
    monkeypatch.setattr(cst.Name, "_validate",
                        lambda node: validated.append(node.value) or original(node))
    findings = check_source(LOADS, "train.py")
    assert [f.code for f in findings] == ["MEM007"]
    parsed_names = {"torch", "state", "load", "path", "x"}
    assert not parsed_names & set(validated), validated


def test_nodes_built_after_a_check_are_validated_again():
    check_source(LOADS, "train.py")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_validation_comes_back_when_a_file_does_not_parse():
    findings = check_source("import torch\nfor x in loader\n    x.cuda()\n", "broken.py")
    assert [f.code for f in findings] == ["MEM000"]
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


#: A tab, then four spaces: CPython reads the tab as 8 columns and compiles it;
#: libcst's tokenizer finds no outer block for the dedent (a reinforcement-
#: learning course's `utils.py`, copied into every chapter).
TAB_THEN_SPACES = ("import torch\ndef f(model, xs):\n    model.eval()\n"
                   "    for t in range(3):\n\t    y = model(xs[t].cuda())\n    return y\n")


def test_indentation_python_accepts_but_libcst_rejects_is_checked_not_mem000(tmp_path):
    with pytest.raises(cst.ParserSyntaxError):
        cst.parse_module(TAB_THEN_SPACES)
    found = check_source(TAB_THEN_SPACES)
    assert [(f.code, f.line, f.column) for f in found] == [("MEM004", 5, 10)]
    assert found[0].fix is None  # an edit placed in the expanded text would corrupt the file


def test_indentation_python_rejects_too_stays_mem000():
    broken = TAB_THEN_SPACES.replace("    return y\n", "  return y\n")
    assert [f.code for f in check_source(broken)] == ["MEM000"]


#: PyTorch before 0.4 called `non_blocking` `async`, a keyword since Python
#: 3.7: `targets.cuda(async=True)` in an evaluation loop without no_grad.
ASYNC_KEYWORD = ("import torch\nimport os\n\n\ndef test(loader, model):\n    model.eval()\n"
                 "    for inputs, targets in loader:\n"
                 "        inputs, targets = inputs.cuda(), targets.cuda(async=True)\n"
                 "        outputs = model(inputs)\n\n\n"
                 "state = torch.load(os.path.join('ckpt', 'model.pth'))\n")


def test_the_async_keyword_argument_of_old_pytorch_is_checked_not_mem000():
    with pytest.raises(cst.ParserSyntaxError):
        cst.parse_module(ASYNC_KEYWORD)
    found = check_source(ASYNC_KEYWORD, "train.py")
    assert [(f.code, f.line, f.column) for f in found] == [("MEM004", 9, 19),
                                                           ("MEM007", 12, 9)]
    assert all(f.fix is None for f in found)  # an edit on the renamed text would corrupt it


def test_async_used_as_a_name_elsewhere_stays_mem000():
    broken = "import torch\nasync = 1\nx = torch.zeros(async).cuda()\n"
    assert [f.code for f in check_source(broken)] == ["MEM000"]


def test_messages_quote_the_async_keyword_as_written():
    source = ("import torch\npreds = []\nwith torch.no_grad():\n    for x, y in loader:\n"
              "        preds.append(model(x.cuda(async=True)))\n")
    found = check_source(source, "eval.py")
    assert [f.code for f in found] == ["MEM010"]
    assert "x.cuda(async=True)" in found[0].message and "asyn_" not in found[0].message
