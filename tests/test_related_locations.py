"""Evidence as related locations: where a rule saw why it reports, in JSON
(`related`) and SARIF (`relatedLocations`), in notebooks and across files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlint import __version__, check_paths, check_source
from memlint.cli.reporters import json_format, sarif
from memlint.engine import Report
from memlint.engine.notebook import check_notebook_source
from tests.test_notebooks import notebook_text
from tests.test_reporters import _sarif_schema

PROGRAM = ("import torch\n"                                      # 1
           "import torch.distributed as dist\n"                  # 2
           "from torch.utils.data import DataLoader\n"           # 3
           "dist.init_process_group('nccl')\n"                   # 4
           "net.load_state_dict(torch.load(args.resume))\n"      # 5
           "loader = DataLoader(ds, batch_size=8)\n"             # 6
           "def evaluate(model, loader):\n"                      # 7
           "    model.eval()\n"                                  # 8
           "    for x, y in loader:\n"                           # 9
           "        y = y.to('cuda')\n"                          # 10
           "        out = model(x.cuda())\n")                    # 11


def related(findings) -> dict[str, list[tuple[int, int, str]]]:
    return {f.code: [(r.line, r.column, r.message) for r in f.related] for f in findings}


def test_each_rule_points_at_its_evidence():
    found = related(check_source(PROGRAM, "train.py"))
    assert found["MEM007"] == [(4, 1, "the program runs as several ranks (processes) "
                                      "here; each one loads")]
    assert found["MEM005"] == [(10, 13, "copied to a CUDA device here: this module's "
                                        "batches go to the GPU")]
    assert found["MEM004"] == [(8, 5, "'model' is put in eval mode here")]


def test_a_finding_without_evidence_has_none():
    (finding,) = check_source("import torch\nnet.cuda()\nstate = torch.load(p)\n")
    assert finding.related == ()


def test_json_lists_related_locations_one_based_and_always():
    records = json.loads(json_format(Report(findings=check_source(PROGRAM, "train.py")),
                                     __version__))
    by_code = {r["code"]: r for r in records}
    assert by_code["MEM005"]["related"] == [{
        "path": "train.py", "line": 10, "column": 13,
        "message": "copied to a CUDA device here: this module's batches go to the GPU"}]
    plain = check_source("import torch\nnet.cuda()\nstate = torch.load(p)\n")
    (record,) = json.loads(json_format(Report(findings=plain), __version__))
    assert record["related"] == []


def test_sarif_related_locations_are_valid_and_numbered():
    import jsonschema

    log = json.loads(sarif(Report(findings=check_source(PROGRAM, "train.py")), __version__))
    schema = _sarif_schema()
    validator = jsonschema.validators.validator_for(schema)
    validator(schema, format_checker=validator.FORMAT_CHECKER).validate(log)
    results = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    (location,) = results["MEM004"]["relatedLocations"]
    assert location["id"] == 1
    assert location["message"]["text"] == "'model' is put in eval mode here"
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "train.py"
    assert location["physicalLocation"]["region"] == {"startLine": 8, "startColumn": 5}


def test_notebook_related_locations_name_their_cell():
    text = notebook_text("import torch\nfrom torch.utils.data import DataLoader",
                         "loader = DataLoader(ds, batch_size=8)",
                         "for x, y in loader:\n    x = x.cuda()")
    (finding,) = check_notebook_source(text, "nb.ipynb")
    assert (finding.code, finding.cell, finding.cell_line) == ("MEM005", 2, 1)
    (evidence,) = finding.related
    assert (evidence.line, evidence.cell, evidence.cell_line, evidence.column) == (5, 3, 2, 9)
    (record,) = json.loads(json_format(Report(findings=[finding]), __version__))
    assert record["related"][0]["cell"] == 3 and record["related"][0]["cell_line"] == 2
    log = json.loads(sarif(Report(findings=[finding]), __version__))
    (location,) = log["runs"][0]["results"][0]["relatedLocations"]
    assert location["message"]["text"].startswith("cell 3, line 2: ")


EVALUATE = ("import torch\n"
            "def evaluate(model, loader):\n"
            "    model.eval()\n"
            "    return [model(x.cuda()) for x, _ in loader]\n")


@pytest.mark.parametrize("jobs", [1, 2])
def test_callers_with_grad_on_in_other_files_are_related_locations(tmp_path, jobs):
    (tmp_path / "utils.py").write_text(EVALUATE)
    (tmp_path / "train.py").write_text(
        "import torch\nfrom utils import evaluate\n"                          # 1, 2
        "with torch.no_grad():\n    evaluate(model, loader)\n"                # 3, 4
        "for epoch in range(3):\n    print('é', evaluate(model, loader))\n")  # 5, 6
    (finding,) = check_paths([str(tmp_path)], jobs=jobs).findings
    assert (Path(finding.path).name, finding.line, finding.code) == ("utils.py", 4, "MEM004")
    eval_mode, caller = finding.related
    assert (Path(eval_mode.path).name, eval_mode.line) == ("utils.py", 3)
    assert (Path(caller.path).name, caller.line, caller.column) == ("train.py", 6, 16)
    assert caller.message == "'evaluate' is called here with autograd on"


def test_a_caller_file_changed_since_it_was_checked_gives_no_location(tmp_path):
    from memlint.analysis.project import CallFact, ModuleFacts, Project

    train = tmp_path / "train.py"
    train.write_text("from utils import evaluate\nevaluate(m)\n")
    call = CallFact("utils.evaluate", False, "evaluate")
    facts = ModuleFacts(str(train), "train", True, calls=[call, CallFact("utils.evaluate",
                                                                         False, "evaluate")])
    assert Project([facts]).position_of(facts, call) is None  # two calls recorded, one found
    assert Project([facts]).position_of(
        ModuleFacts(str(train), "train", True, calls=[call]), call) == (2, 1)
