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
