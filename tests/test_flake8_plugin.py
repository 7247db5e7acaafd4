"""The flake8 plugin: real flake8 in a subprocess must print what `memlint check` prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from memlint import check_paths, check_source
from memlint.cli.flake8_plugin import MemlintChecker
from tests.expectations import FIXTURES, fixture_files

FORMAT = "%(path)s:%(row)d:%(col)d: %(code)s %(text)s"

LOADS = textwrap.dedent("""\
    import torch

    state = torch.load(path)
    quiet = torch.load(path)  # noqa: MEM007
    model.load_state_dict(  # noqa: MEM007
        torch.load(path)["model"]
    )
    other = torch.load(path)  # noqa: E501
    model.cuda()
""")


def flake8(*args: str, stdin: str | None = None, cwd: str | None = None) -> list[str]:
    """flake8's output lines, run as an editor or CI would, without user config."""
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", f"--format={FORMAT}", *args],
        input=stdin, capture_output=True, text=True, cwd=cwd, check=False)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


def positions(lines: list[str], code_prefix: str = "MEM") -> list[tuple[str, int, int, str]]:
    """(path, line, column, code) of each output line with a memlint code."""
    found = []
    for line in lines:
        path, row, column, rest = line.split(":", 3)
        code = rest.split()[0]
        if code.startswith(code_prefix):
            found.append((os.path.normpath(path), int(row), int(column), code))
    return found


def test_flake8_prints_every_fixture_finding_at_memlint_line_and_column():
    py_fixtures = [str(p) for p in fixture_files(".py")]
    expected = [(os.path.normpath(f.path), f.line, f.column, f.code)
                for f in check_paths(py_fixtures, jobs=1).findings]
    assert len(expected) >= 3
    assert sorted(positions(flake8("--select=MEM", *py_fixtures))) == sorted(expected)


def test_messages_are_memlint_messages():
    lines = flake8("--select=MEM", str(FIXTURES / "load_without_map_location"))
    finding = check_source((FIXTURES / "load_without_map_location" / "resume_training.py")
                           .read_text(encoding="utf-8"))[0]
    assert any(line.endswith(f"{finding.code} {finding.message}") for line in lines)


def test_stdin_as_editors_send_it_uses_the_lines_and_the_display_name():
    lines = flake8("--select=MEM", "--stdin-display-name=src/train.py", "-", stdin=LOADS)
    assert positions(lines) == [("src/train.py", 3, 9, "MEM007"), ("src/train.py", 8, 9, "MEM007")]


def test_flake8_noqa_and_memlint_noqa_agree(tmp_path):
    path = tmp_path / "loads.py"
    path.write_text(LOADS)
    expected = [(str(path), f.line, f.column, f.code)
                for f in check_paths([str(path)], jobs=1).findings]
    assert expected == [(str(path), 3, 9, "MEM007"), (str(path), 8, 9, "MEM007")]
    assert positions(flake8("--select=MEM", str(path))) == expected


def test_disable_noqa_shows_what_noqa_hides(tmp_path):
    path = tmp_path / "loads.py"
    path.write_text(LOADS)
    shown = positions(flake8("--select=MEM", "--disable-noqa", str(path)))
    assert [row for _, row, _, _ in shown] == [3, 4, 5, 8]


@pytest.mark.parametrize("args, reported", [
    ((), True),  # flake8 7 adds plugin codes to its default selection
    (("--select=E9,F",), False),  # an explicit --select must name MEM
    (("--select=E9,F", "--extend-select=MEM"), True),
    (("--select=E9,F,MEM",), True),
    (("--select=MEM007",), True),
    (("--extend-ignore=MEM007",), False),
    (("--extend-ignore=MEM",), False),
    (("--ignore=MEM00",), False),
    (("--per-file-ignores=loads.py:MEM007",), False),
    (("--per-file-ignores=other.py:MEM007",), True),
])
def test_flake8_selection_options_choose_memlint_codes(tmp_path, args, reported):
    (tmp_path / "loads.py").write_text("import torch.cuda\nstate = torch.load(path)\n")
    found = positions(flake8(*args, "loads.py", cwd=str(tmp_path)))
    assert found == ([("loads.py", 2, 9, "MEM007")] if reported else [])


def test_plugin_is_registered_under_its_name_and_version():
    result = subprocess.run([sys.executable, "-m", "flake8", "--version"],
                            capture_output=True, text=True, check=True)
    # flake8 names a plugin by its distribution, `torch-memlint`, and wraps long lines
    assert f"torch-memlint: {MemlintChecker.version}" in " ".join(result.stdout.split())


def test_checker_uses_the_lines_it_is_given_not_the_file():
    checker = MemlintChecker(None, ["import torch.cuda\n", "x = torch.load(p)\n"], "not/on/disk.py")
    results = list(checker.run())
    assert [(row, column, text.split()[0]) for row, column, text, _ in results] == [
        (2, 4, "MEM007")]  # 0-based: flake8 prints column 5, as memlint does


# How each editor runs flake8 and the pattern it parses the output with
# (ALE's handler, nvim-lint's flake8 linter, the VS Code Flake8 extension).
EDITORS = {
    "ale": (["--format=default", "--stdin-display-name", "src/train.py", "-"],
            r"^[a-zA-Z]?:?[^:]+:(\d+):?(\d+)?: ([A-Za-z0-9]+):? (.*)$"),
    "nvim-lint": (["--format=%(path)s:%(row)d:%(col)d:%(code)s:%(text)s", "--no-show-source",
                   "--stdin-display-name", "src/train.py", "-"],
                  r"[^:]+:(\d+):(\d+):(\w+):(.+)"),
    "vscode": (["--format=%(row)d,%(col)d,%(code).1s,%(code)s:%(text)s",
                "--stdin-display-name", "src/train.py", "-"],
               r"(\d+),(-?\d+),\w+,(\w+\d+):([^\r\n]*)"),
}


@pytest.mark.parametrize("editor", sorted(EDITORS))
def test_editors_parse_flake8_output_to_memlint_positions(editor):
    args, pattern = EDITORS[editor]
    result = subprocess.run([sys.executable, "-m", "flake8", "--isolated", *args], input=LOADS,
                            capture_output=True, text=True, check=False)
    parsed = [re.match(pattern, line) for line in result.stdout.splitlines()]
    assert all(parsed), result.stdout
    found = [(int(m.group(1)), int(m.group(2)), m.group(3)) for m in parsed
             if m.group(3).startswith("MEM")]
    assert found == [(f.line, f.column, f.code) for f in check_source(LOADS)]
    assert found


def test_a_memlint_crash_is_one_finding_per_file_and_flake8_goes_on(tmp_path, monkeypatch, capsys):
    """flake8 aborts the whole run when a plugin raises; the editor would show nothing."""
    import memlint.cli.flake8_plugin as plugin
    from flake8.main.cli import main as flake8_main

    from memlint.engine import RuleCrash

    def crash(*args, **kwargs):
        raise RuleCrash("ZeroDivisionError: division by zero")

    monkeypatch.setattr(plugin, "check_in_project", crash)
    (tmp_path / "train.py").write_text("import torch.cuda\nx=1\n")
    flake8_main(["--isolated", "-j", "1", "--select=MEM,E", f"--format={FORMAT}",
                 str(tmp_path / "train.py")])
    lines = capsys.readouterr().out.splitlines()
    assert positions(lines) == [(str(tmp_path / "train.py"), 1, 1, "MEM000")]
    assert "internal error" in lines[0] and "ZeroDivisionError: division by zero" in lines[0]
    assert positions(lines, "E") == [(str(tmp_path / "train.py"), 2, 2, "E225")]


def test_tool_memlint_code_choices_apply_in_flake8_as_in_check(tmp_path):
    """The editor (flake8) and CI (`memlint check`) must agree on what a project ignores."""
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.memlint]
        ignore = ["MEM005"]
        per-file-ignores = {"scripts/*" = ["MEM007"]}
    """))
    source = "import torch.cuda\nfrom torch.utils.data import DataLoader\n\n" \
             "loader = DataLoader(data, batch_size=8)\nstate = torch.load(path)\n"
    for name in ("train.py", "scripts/convert.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(source)
    checked = subprocess.run([sys.executable, "-m", "memlint", "check", "--format", "json",
                              "train.py", "scripts/convert.py"],
                             cwd=tmp_path, capture_output=True, text=True, check=False)
    expected = sorted((os.path.normpath(f["path"]), f["line"], f["column"], f["code"])
                      for f in json.loads(checked.stdout))
    assert expected == [("train.py", 5, 9, "MEM007")]
    shown = flake8("--select=MEM", "train.py", "scripts/convert.py", cwd=str(tmp_path))
    assert sorted(positions(shown)) == expected
    # flake8's own selection still filters on top
    assert positions(flake8("--select=MEM005", "train.py", cwd=str(tmp_path))) == []


def test_a_bad_tool_memlint_is_one_finding_naming_the_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nignroe = ["MEM005"]\n')
    (tmp_path / "train.py").write_text("import torch.cuda\nstate = torch.load(path)\n")
    shown = flake8("--select=MEM", "train.py", cwd=str(tmp_path))
    assert positions(shown) == [("train.py", 1, 1, "MEM000")]
    assert "configuration error" in shown[0] and "'ignroe'" in shown[0]


def test_an_edited_tool_memlint_applies_on_the_next_flake8_run_in_the_same_process(
        tmp_path, monkeypatch, capsys):
    """Editors' flake8 servers run flake8 many times in one process."""
    from flake8.main.cli import main as flake8_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import torch.cuda\nstate = torch.load(path)\n")
    pyproject = tmp_path / "pyproject.toml"
    shown = []
    for ignore in ([], ["MEM007"]):
        pyproject.write_text(f"[tool.memlint]\nignore = {ignore!r}\n")
        flake8_main(["--isolated", "-j", "1", "--select=MEM", f"--format={FORMAT}", "train.py"])
        shown.append(positions(capsys.readouterr().out.splitlines()))
    assert shown == [[("train.py", 2, 9, "MEM007")], []]


def test_a_stale_second_registration_does_not_print_findings_twice(tmp_path):
    """CI's machine kept an install of this project under its old name
    (`memlint`), whose entry point names the same checker: flake8 then runs it
    twice per file. Each finding must still be printed once."""
    stale = tmp_path / "site" / "memlint-0.1.dist-info"
    stale.mkdir(parents=True)
    (stale / "METADATA").write_text("Metadata-Version: 2.1\nName: memlint\nVersion: 0.1\n")
    (stale / "entry_points.txt").write_text(
        "[flake8.extension]\nMEM = memlint.cli.flake8_plugin:MemlintChecker\n")
    source = tmp_path / "train.py"
    source.write_text("import torch.cuda\n\nstate = torch.load(path)\n")
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"),
                                                               os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", f"--format={FORMAT}", str(source)],
        capture_output=True, text=True, cwd=tmp_path, env=environment, check=False)
    assert "Traceback" not in result.stderr, result.stderr
    registered = subprocess.run([sys.executable, "-m", "flake8", "--version"], capture_output=True,
                                text=True, env=environment, check=True).stdout
    assert registered.count("memlint") == 2, registered   # the stale registration is seen
    assert positions(result.stdout.splitlines()) == [(str(source), 3, 9, "MEM007")]


def test_the_size_budget_applies_in_flake8_as_in_check(tmp_path):
    """A file `memlint check` refuses at once must not be analysed inside flake8."""
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nmax-file-size = 0.01\n")
    (tmp_path / "big.py").write_text("import torch.cuda\n" + "x = 1\n" * 3000)
    lines = flake8("--select=MEM", "big.py", cwd=str(tmp_path))
    assert positions(lines) == [("big.py", 1, 1, "MEM000")]
    assert "larger than 0.01 MB (max-file-size)" in lines[0]


def test_the_time_budget_stops_a_file_in_flake8(tmp_path, monkeypatch, capsys):
    """(One job: flake8's parallel jobs are daemonic processes, which may not
    start a worker; there the size budget alone applies.)"""
    import time

    import memlint.engine.paths as engine
    from flake8.main.cli import main as flake8_main

    def hangs(*args, **kwargs):
        time.sleep(30)
        return []

    monkeypatch.setattr(engine, "analyse_file", hangs)  # in the forked worker too
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nfile-timeout = 0.5\n")
    (tmp_path / "train.py").write_text("import torch.cuda\n")
    monkeypatch.chdir(tmp_path)
    flake8_main(["--isolated", "-j", "1", "--select=MEM", f"--format={FORMAT}", "train.py"])
    [line] = capsys.readouterr().out.splitlines()
    assert positions([line]) == [("train.py", 1, 1, "MEM000")] and "file-timeout" in line
