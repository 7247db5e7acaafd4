"""CI formats: a GitHub annotation and a SARIF result point where the text output points.

The CLI runs three times on the same fixtures; every finding must carry the
same path, line, column and code in all three, and in the engine's report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from urllib.parse import unquote, urlparse

import pytest

from memlint.engine.settings import Settings
from memlint import check_paths
from tests.expectations import FIXTURES, fixture_files

PY_FIXTURES = [os.path.relpath(p) for p in fixture_files(".py")]
NOTEBOOK = os.path.relpath(FIXTURES / "notebooks" / "resume_with_magics.ipynb")

_TEXT = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<column>\d+): (?P<code>MEM\d{3}) ")
_ANNOTATION = re.compile(r"^::(?P<level>error|warning|notice) (?P<properties>[^:]*)::(?P<message>.*)$")


def memlint_check(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "memlint", "check", *args],
                            capture_output=True, text=True, check=False)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result


def from_text(output: str) -> list[tuple[str, int, int, str]]:
    found = []
    for line in output.splitlines():
        match = _TEXT.match(line)
        if match:
            found.append((os.path.normpath(match["path"]), int(match["line"]),
                          int(match["column"]), match["code"]))
    return found


def unescape_property(value: str) -> str:
    """GitHub's workflow-command escaping of property values."""
    return (value.replace("%2C", ",").replace("%3A", ":").replace("%0A", "\n")
            .replace("%0D", "\r").replace("%25", "%"))


def annotations(output: str) -> list[dict[str, str]]:
    found = []
    for line in output.splitlines():
        match = _ANNOTATION.match(line)
        assert match, f"not a workflow command: {line!r}"
        properties = dict(item.split("=", 1) for item in match["properties"].split(","))
        found.append({**{k: unescape_property(v) for k, v in properties.items()},
                      "level": match["level"], "message": match["message"]})
    return found


def sarif_path(location: dict) -> str:
    uri = location["physicalLocation"]["artifactLocation"]["uri"]
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme == "file" else unquote(uri)
    return os.path.normpath(os.path.relpath(path) if os.path.isabs(path) else path)


@pytest.fixture(scope="module")
def engine_findings() -> list[tuple[str, int, int, str]]:
    # preview on, as MEMLINT_PREVIEW (conftest) turns it on for the command line
    report = check_paths(PY_FIXTURES, Settings(preview=True), jobs=1)
    found = [(os.path.normpath(f.path), f.line, f.column, f.code) for f in report.findings]
    assert len(found) >= 5, "the fixtures must hold findings for this test to mean anything"
    return found


def test_text_output_points_where_the_engine_does(engine_findings):
    result = memlint_check("--format", "text", *PY_FIXTURES)
    assert result.returncode == 1
    assert sorted(from_text(result.stdout)) == sorted(engine_findings)


def test_github_annotations_carry_the_text_positions(engine_findings):
    result = memlint_check("--format", "github", *PY_FIXTURES)
    assert result.returncode == 1
    found = annotations(result.stdout)
    assert sorted((os.path.normpath(a["file"]), int(a["line"]), int(a["col"]),
                   re.search(r"MEM\d{3}", a.get("title", "") + a["message"]).group())
                  for a in found) == sorted(engine_findings)
    for annotation in found:
        assert int(annotation["endLine"]) >= int(annotation["line"])


def test_sarif_results_carry_the_text_positions(engine_findings):
    result = memlint_check("--format", "sarif", *PY_FIXTURES)
    assert result.returncode == 1
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    rule_ids = {rule["id"] for rule in run["tool"]["driver"]["rules"]}
    found = []
    for sarif_result in run["results"]:
        location = sarif_result["locations"][0]
        region = location["physicalLocation"]["region"]
        found.append((sarif_path(location), region["startLine"], region["startColumn"],
                      sarif_result["ruleId"]))
        assert sarif_result["ruleId"] in rule_ids
        assert sarif_result["message"]["text"]
    assert sorted(found) == sorted(engine_findings)


def test_a_clean_run_is_valid_in_every_format(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\nstate = torch.load(p, map_location='cpu')\n")
    assert memlint_check("--format", "github", str(clean)).stdout.strip() == ""
    sarif = json.loads(memlint_check("--format", "sarif", str(clean)).stdout)
    assert sarif["runs"][0]["results"] == []


def test_notebook_findings_name_the_cell_in_text_and_json():
    notebook = json.loads((FIXTURES / "notebooks" / "resume_with_magics.ipynb")
                          .read_text(encoding="utf-8"))
    assert notebook["cells"][3]["source"][1].startswith("state = T.load(CKPT)")
    records = json.loads(memlint_check("--format", "json", NOTEBOOK).stdout)
    assert {(r["cell"], r["cell_line"], r["column"], r["code"]) for r in records} == {
        (4, 2, 9, "MEM007"), (8, 2, 12, "MEM007")}
    text = memlint_check("--format", "text", NOTEBOOK).stdout
    assert "cell 4:2:9: MEM007" in text


def test_gitlab_code_quality_issues_point_where_the_text_points():
    text = from_text(memlint_check(*PY_FIXTURES).stdout)
    issues = json.loads(memlint_check("--format", "gitlab", *PY_FIXTURES).stdout)
    assert [(os.path.normpath(i["location"]["path"]), i["location"]["lines"]["begin"],
             i["check_name"]) for i in issues] == [(p, line, code) for p, line, _, code in text]
    assert len({i["fingerprint"] for i in issues}) == len(issues)
    assert {i["severity"] for i in issues} <= {"info", "minor", "major", "critical", "blocker"}
    assert all(i["description"].startswith(i["check_name"] + " ") for i in issues)


def test_junit_has_one_failed_case_per_finding_and_one_passing_case_when_clean(tmp_path):
    from xml.etree import ElementTree
    text = from_text(memlint_check(*PY_FIXTURES).stdout)
    root = ElementTree.fromstring(memlint_check("--format", "junit", *PY_FIXTURES).stdout)
    cases = root.findall("./testsuite/testcase")
    assert root.get("failures") == str(len(text)) == str(len(cases))
    assert [(os.path.normpath(c.get("file")), int(c.get("line")), c.get("name").split()[0])
            for c in cases] == [(p, line, code) for p, line, _, code in text]
    assert all(c.find("failure") is not None for c in cases)
    clean = tmp_path / "clean.py"
    clean.write_text("x = 1\n")
    root = ElementTree.fromstring(memlint_check("--format", "junit", str(clean)).stdout)
    assert (root.get("tests"), root.get("failures")) == ("1", "0")
    assert root.find("./testsuite/testcase/failure") is None
