"""Notebooks: code cells checked as one module, positions given as cell and line.

Fixture notebooks carry `# expect: MEMxxx` on the flagged line of a cell, as
`.py` fixtures do; a finding must match (cell, line in the cell, code).
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from memlint import Settings, check_paths
from memlint.engine import RuleCrash, check_file
from memlint.engine.notebook import check_notebook, check_notebook_source, python_lines
from tests.expectations import FIXTURES, fixture_files

NOTEBOOKS = fixture_files(".ipynb")
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>MEM[0-9]{3}(?:\s*,\s*MEM[0-9]{3})*)")


def expected_in_notebook(notebook: dict) -> set[tuple[int, int, str]]:
    """(cell, line in the cell, code) for every `# expect:` comment of a code cell."""
    expected = set()
    for cell_number, cell in enumerate(notebook["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        for line_number, line in enumerate("".join(cell["source"]).splitlines(), start=1):
            match = _EXPECT.search(line)
            if match:
                for code in re.split(r"\s*,\s*", match.group("codes")):
                    expected.add((cell_number, line_number, code))
    return expected


def notebook_text(*cells: str | dict, language: str = "python") -> str:
    """A notebook whose cells are code cells (a str) or given as they are (a dict)."""
    return json.dumps({
        "cells": [c if isinstance(c, dict) else
                  {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                   "source": c.splitlines(keepends=True)} for c in cells],
        "metadata": {"language_info": {"name": language}},
        "nbformat": 4, "nbformat_minor": 5,
    })


def found(findings) -> set[tuple[int | None, int | None, str]]:
    return {(f.cell, f.cell_line, f.code) for f in findings}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_fixture_notebook_yields_exactly_its_annotations(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert found(check_notebook(str(path))) == expected_in_notebook(notebook)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_fixture_notebooks_are_valid_nbformat(path):
    nbformat.validate(nbformat.read(str(path), as_version=4))


def test_fixtures_cover_magics_and_findings():
    """The fixtures are only worth something if they hold what they claim to."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in NOTEBOOKS)
    for syntax in ("%%time", "%%bash", "%%timeit", "%%writefile", "%matplotlib", "!pip",
                   "= !ls", "%time", "model?", "# noqa: MEM007", '"language": "R"'):
        assert syntax in text
    assert sum(len(expected_in_notebook(json.loads(p.read_text(encoding="utf-8"))))
               for p in NOTEBOOKS) >= 2


def test_findings_name_cell_and_line_in_cell_and_sort_in_cell_order():
    source = notebook_text(
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
        "import torch\n",
        "x = 1\nstate = torch.load(p)\n",
        "%pip install torch\n    \nckpt = torch.load(q)\n",
    )
    findings = check_notebook_source(source, "nb.ipynb")
    assert [(f.cell, f.cell_line, f.column, f.code) for f in findings] == [
        (3, 2, 9, "MEM007"), (4, 3, 8, "MEM007")]
    assert [f.line for f in findings] == sorted(f.line for f in findings)
    assert findings[0].to_dict()["cell"] == 3 and findings[0].to_dict()["cell_line"] == 2


def test_imports_in_an_earlier_cell_resolve_later_names():
    source = notebook_text("from torch import load as tload\n", "w = tload(path)\n")
    assert found(check_notebook_source(source, "nb.ipynb")) == {(2, 1, "MEM007")}


def test_source_as_one_string_and_windows_line_breaks():
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
            "source": "import torch\r\n%time x = 1\r\nstate = torch.load(p)\r\n"}
    assert found(check_notebook_source(notebook_text(cell), "nb.ipynb")) == {(1, 3, "MEM007")}


@pytest.mark.parametrize("lines, expected", [
    (["%matplotlib inline", "import torch"], ["pass", "import torch"]),
    (["!pip install -q torch"], ["pass"]),
    (["files = !ls *.pt", "a, b = %sx echo 1 2"], ["pass", "pass"]),
    (["for p in paths:", "    %time torch.load(p)"], ["for p in paths:", "    pass"]),
    (["model?", "torch.load??", "?torch"], ["pass", "pass", "pass"]),
    # IPython's wildcard search (a tutorial's `torch.*Tensor?`)
    (["torch.*Tensor?", "np.*load*?", "?*int*"], ["pass", "pass", "pass"]),
    (["x = a * b", "y = x ** 2"], ["x = a * b", "y = x ** 2"]),
    # a cell indented as a whole: IPython takes the first line's indent off
    (["    import torch", "    x = torch.load(p)"], ["import torch", "x = torch.load(p)"]),
    (["  x = 1", "y = 2"], ["x = 1", "y = 2"]),
    # automagic: `pip install` without its `%`
    (["pip install -r requirements.txt", "pip = 3"], ["pass", "pip = 3"]),
    # automagic: any line magic or shell alias (alpaca_farm's `cd ..`, set 18)
    (["cd ..", "ls -la data", "run train.py --epochs 3", "pwd", "x = torch.load(p)"],
     ["pass", "pass", "pass", "pass", "x = torch.load(p)"]),
    # ... but not a name that is assigned, or one that is only a prefix
    (["cd ..", "ls, n = 1, 2", "cd = 3", "lsx = 2", "time.sleep(1)"],
     ["pass", "ls, n = 1, 2", "cd = 3", "lsx = 2", "time.sleep(1)"]),
    (["%%time", "x = torch.load(p)"], ["", "x = torch.load(p)"]),
    (["%%bash", "python -c 'torch.load(p)'"], ["", ""]),
    (["%%writefile train.py", "x = torch.load(p)"], ["", ""]),
    # a shell escape continued by backslashes (YOLOv7's export cell, mmaction2's wget)
    (["!python export.py --weights w.pt \\", "        --grid --simplify \\", "        --img 640",
      "x = torch.load(p)"], ["pass", "", "", "x = torch.load(p)"]),
    # a Python line continued by a backslash stays Python
    (["!ls", "x = 1 + \\", "    2"], ["pass", "x = 1 + \\", "    2"]),
    (["x = a % b", "y = x != 2", "z = f(a) if b else c"],
     ["x = a % b", "y = x != 2", "z = f(a) if b else c"]),
])
def test_ipython_syntax_is_replaced_line_for_line(lines, expected):
    assert python_lines(lines) == expected


def test_a_valid_python_cell_is_never_rewritten():
    """`% b` continuing an expression looks like a line magic; the cell parses, so it stays."""
    cell = "import torch\ny = (a\n     % b)\nstate = torch.load(p)\n"
    assert found(check_notebook_source(notebook_text(cell), "nb.ipynb")) == {(1, 4, "MEM007")}


def test_a_cell_that_does_not_parse_is_reported_and_the_others_still_checked():
    source = notebook_text("import torch\n", "def broken(:\n    pass\n",
                           "state = torch.load(p)\n")
    findings = check_notebook_source(source, "nb.ipynb")
    assert found(findings) == {(2, 1, "MEM000"), (3, 1, "MEM007")}
    assert "cell" in next(f for f in findings if f.code == "MEM000").message


def test_noqa_and_skip_file_are_honoured_in_cells():
    noqa = notebook_text("import torch\nstate = torch.load(p)  # noqa: MEM007\n")
    other_code = notebook_text("import torch\nstate = torch.load(p)  # noqa: MEM003\n")
    skipped = notebook_text("# memlint: skip-file\n", "import torch\nstate = torch.load(p)\n")
    assert check_notebook_source(noqa, "nb.ipynb") == []
    assert found(check_notebook_source(other_code, "nb.ipynb")) == {(1, 2, "MEM007")}
    assert check_notebook_source(skipped, "nb.ipynb") == []


def test_per_file_ignores_apply_to_notebooks():
    source = notebook_text("import torch\nstate = torch.load(p)\n")
    settings = Settings(per_file_ignores={"*.ipynb": ("MEM007",)})
    assert check_notebook_source(source, "nb.ipynb", settings) == []
    assert check_notebook_source(source, "nb.py.ipynb", Settings()) != []


def test_notebooks_of_other_languages_are_left_alone():
    r_code = 'state <- torch_load(path)\nif (is.null(state)) { stop("none") }\n'
    assert check_notebook_source(notebook_text(r_code, language="R"), "nb.ipynb") == []
    assert [f.code for f in check_notebook_source(notebook_text(r_code), "nb.ipynb")] == [
        "MEM000"]


@pytest.mark.parametrize("data, problem", [
    (b"", "invalid JSON"),
    (b'{"cells": [', "invalid JSON"),
    (b'{"cells": ["\xff"]}', "decode"),
    (b"[]", "not a JSON object"),
    (b'{"metadata": {}}', '"cells"'),
    (b'{"cells": {"0": {}}}', '"cells"'),
    (b'{"cells": [{"source": "x"}]}', "cell 1"),
    (b'{"cells": [{"cell_type": "code", "source": 3}]}', "cell 1"),
    (b'{"cells": [{"cell_type": "code", "source": ["a", 1]}]}', "cell 1"),
    (b'{"cells": ["import torch"]}', "cell 1"),
    (b'{"nbformat": 3, "worksheets": [{"cells": []}]}', "nbformat 3"),
])
def test_a_malformed_notebook_is_one_mem000_finding(data, problem):
    findings = check_notebook_source(data, "bad.ipynb")
    assert [f.code for f in findings] == ["MEM000"]
    assert problem in findings[0].message


def test_directories_include_notebooks_but_not_checkpoint_copies(tmp_path):
    source = notebook_text("import torch.cuda\nstate = torch.load(p)\n")
    (tmp_path / "train.ipynb").write_text(source)
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_text(source)
    (tmp_path / "broken.ipynb").write_text("{not json")
    report = check_paths([str(tmp_path)], jobs=1)
    assert [(f.path, f.code) for f in report.findings] == [
        (str(tmp_path / "broken.ipynb"), "MEM000"), (str(tmp_path / "train.ipynb"), "MEM007")]
    assert report.files == 2 and report.errors == []


def test_fixture_directory_of_notebooks_is_checked_like_the_files():
    report = check_paths([str(FIXTURES / "notebooks")], jobs=1)
    assert {(f.cell, f.cell_line, f.code) for f in report.findings} == {
        (c, n, code) for p in NOTEBOOKS
        for c, n, code in expected_in_notebook(json.loads(p.read_text(encoding="utf-8")))}


def test_a_rule_crash_in_a_notebook_is_an_internal_error_not_a_traceback(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise RuleCrash("boom")

    monkeypatch.setattr("memlint.engine.notebook.analyse_source", crash)
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_text("import torch\n"))
    findings, error = check_file(str(path), Settings())
    assert findings == [] and error is not None and "boom" in error.message


def test_an_unreadable_notebook_is_mem000(tmp_path):
    findings, error = check_file(str(tmp_path / "missing.ipynb"), Settings())
    assert [f.code for f in findings] == ["MEM000"] and error is None


def test_a_notebook_large_with_outputs_is_still_checked(tmp_path):
    """A notebook's file is mostly outputs: 3 MB of inline plot passes the
    2 MB default, which bounds the code of .py files."""
    cell = {"cell_type": "code", "metadata": {}, "execution_count": 1,
            "source": ["import torch.cuda\n", "state = torch.load(p)\n"],
            "outputs": [{"output_type": "display_data", "metadata": {},
                         "data": {"image/png": "A" * 3 * 2**20}}]}
    path = tmp_path / "plots.ipynb"
    path.write_text(notebook_text(cell))
    findings, error = check_file(str(path), Settings(max_file_size_mb=2))
    assert error is None and [f.code for f in findings] == ["MEM007"]
