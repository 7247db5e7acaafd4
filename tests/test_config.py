"""`[tool.memlint]`: found upward, applied, overridden by flags, and every mistake one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlint import check_source
from tests.cli_helpers import check, write
from memlint.engine.config import ConfigError, find_pyproject, load_settings, settings_from_table
from memlint.cli.main import main
from memlint.rules import RULES_BY_CODE

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "src" / "train.py", FLAGGED)
    return tmp_path


def test_the_nearest_pyproject_with_a_memlint_table_is_used(project):
    write(project / "pyproject.toml", "[tool.memlint]\nignore = ['MEM007']\n")
    write(project / "src" / "pyproject.toml", "[project]\nname = 'sub'\n")  # no [tool.memlint]
    assert find_pyproject(project / "src" / "train.py") == project / "pyproject.toml"
    inner = write(project / "src" / "inner" / "pyproject.toml", "[tool.memlint]\n")
    assert find_pyproject(project / "src" / "inner") == inner


def test_config_is_searched_from_the_common_parent_of_the_paths(tmp_path, monkeypatch, capsys):
    write(tmp_path / "proj" / "pyproject.toml", "[tool.memlint]\nignore = ['MEM007']\n")
    write(tmp_path / "proj" / "a" / "train.py", FLAGGED)
    write(tmp_path / "proj" / "b" / "train.py", FLAGGED)
    monkeypatch.chdir(tmp_path)  # no pyproject here: the one above the paths counts
    assert check(capsys, "proj/a/train.py", "proj/b/train.py")[0] == 0


def test_select_and_ignore_from_the_file_and_flags_win(project, capsys):
    write(project / "pyproject.toml", "[tool.memlint]\nignore = ['MEM007']\n")
    assert check(capsys, "src")[0] == 0
    assert check(capsys, "--ignore", "MEM001", "src")[0] == 1  # --ignore replaces the file's
    write(project / "pyproject.toml", "[tool.memlint]\nselect = ['MEM001']\n")
    assert check(capsys, "src")[0] == 0
    assert check(capsys, "--extend-select", "MEM007", "src")[0] == 1
    assert check(capsys, "--select", "MEM007", "src")[0] == 1


def test_extend_select_in_the_file_adds_to_select(project, capsys):
    write(project / "pyproject.toml",
          "[tool.memlint]\nselect = ['MEM001']\nextend-select = ['MEM007']\n")
    assert check(capsys, "src")[0] == 1


def test_per_file_ignores_are_globs_relative_to_the_pyproject(project, capsys):
    write(project / "pyproject.toml",
          '[tool.memlint.per-file-ignores]\n"scripts/*.py" = ["MEM007"]\n')
    write(project / "scripts" / "resume.py", FLAGGED)
    code, out, _ = check(capsys, ".")
    assert code == 1 and "scripts" not in out and "src/train.py:3:9: MEM007" in out


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(project, capsys):
    write(project / "build" / "gen.py", FLAGGED)
    write(project / "pyproject.toml", "[tool.memlint]\nextend-exclude = ['src']\n")
    assert check(capsys, ".")[0] == 0  # build by default, src by extension
    write(project / "pyproject.toml", "[tool.memlint]\nexclude = ['src']\n")
    code, out, _ = check(capsys, ".")
    assert code == 1 and out.startswith("./build/gen.py:3:9: MEM007")


def test_no_config_and_explicit_config(project, tmp_path, capsys):
    write(project / "pyproject.toml", "[tool.memlint]\nignore = ['MEM007']\n")
    assert check(capsys, "--no-config", "src")[0] == 1
    other = write(tmp_path / "ci" / "strict.toml", "[tool.memlint]\nselect = ['MEM007']\n")
    assert check(capsys, "--config", str(other), "src")[0] == 1


def test_rule_options_by_code_or_name_reach_the_rule(monkeypatch, tmp_path):
    rule = RULES_BY_CODE["MEM007"]
    monkeypatch.setattr(rule, "OPTIONS", {"allowed-paths": list[str], "strict": bool},
                        raising=False)
    seen = []
    original = rule.visit_Call
    monkeypatch.setattr(rule, "visit_Call",
                        lambda self, node: (seen.append(self.options), original(self, node)))
    by_code = settings_from_table({"MEM007": {"strict": True}}, "pyproject.toml")
    by_name = settings_from_table({"load-without-map-location": {"allowed-paths": ["a"]}},
                                  "pyproject.toml")
    assert by_code.rule_options == {"MEM007": {"strict": True}}
    assert by_name.rule_options == {"MEM007": {"allowed-paths": ["a"]}}
    check_source(FLAGGED, "x.py", by_name)
    assert seen and seen[0] == {"allowed-paths": ["a"]}


@pytest.mark.parametrize("toml, expected", [
    ("select = 'MEM001'",
     "[tool.memlint] select: expected a list of rule codes or prefixes such as "
     "[\"MEM003\", \"MEM00\"], got 'MEM001'"),
    ("ignore = ['MEM099']", "[tool.memlint] ignore: unknown rule code 'MEM099'"),
    ("extend-select = ['XYZ']", "[tool.memlint] extend-select: unknown rule code 'XYZ'"),
    ("ignore = ['MEM000']", "[tool.memlint] ignore: MEM000"),
    ("selct = ['MEM001']", "[tool.memlint]: unknown key 'selct' (did you mean 'select'?); "
                            "expected one of select"),
    ("exclude = 'build'", "[tool.memlint] exclude: expected a list of glob patterns, got 'build'"),
    ("per-file-ignores = ['x']", "[tool.memlint] per-file-ignores: expected a table"),
    ("[tool.memlint.per-file-ignores]\n'tests/*' = 'MEM007'",
     "[tool.memlint] per-file-ignores 'tests/*': expected a list of rule codes"),
    ("MEM007 = 3", "[tool.memlint].MEM007: expected a table of options for MEM007"),
    ("[tool.memlint.MEM007]\nlevel = 3",
     "[tool.memlint].MEM007: unknown option 'level' for MEM007 (load-without-map-location)"),
])
def test_each_config_mistake_exits_2_with_one_line_naming_the_key(project, toml, expected):
    if not toml.startswith("["):
        toml = "[tool.memlint]\n" + toml
    write(project / "pyproject.toml", toml + "\n")
    result = subprocess.run([sys.executable, "-m", "memlint", "check", "src"], cwd=project,
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"memlint: {project / 'pyproject.toml'}: {expected}"), \
        result.stderr
    assert "Traceback" not in result.stderr


def test_a_wrong_option_type_names_what_was_expected(monkeypatch):
    monkeypatch.setattr(RULES_BY_CODE["MEM007"], "OPTIONS", {"strict": bool, "names": list[str],
                                                             "limit": int}, raising=False)
    with pytest.raises(ConfigError, match=r"strict: expected a boolean, got 'yes'"):
        settings_from_table({"MEM007": {"strict": "yes"}}, "p.toml")
    with pytest.raises(ConfigError, match=r"names: expected a list of strings, got \['a', 1\]"):
        settings_from_table({"MEM007": {"names": ["a", 1]}}, "p.toml")
    with pytest.raises(ConfigError, match=r"limit: expected an integer, got True"):
        settings_from_table({"MEM007": {"limit": True}}, "p.toml")
    with pytest.raises(ConfigError, match="given twice"):
        settings_from_table({"MEM007": {}, "load-without-map-location": {}}, "p.toml")


def test_invalid_toml_exits_2_with_one_line(project):
    write(project / "pyproject.toml", "[tool.memlint\nselect = [\n")
    result = subprocess.run([sys.executable, "-m", "memlint", "check", "src"], cwd=project,
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "invalid TOML" in result.stderr


def test_without_any_pyproject_the_defaults_apply_from_the_working_directory(project):
    settings = load_settings(None)
    assert settings.root == str(project)
    assert "MEM007" in settings.selected_codes("src/train.py")


@pytest.mark.parametrize("table, hint", [
    ({"extend-exlude": ["x"]}, "unknown key 'extend-exlude' (did you mean 'extend-exclude'?)"),
    ({"ignore": ["MEM03"]}, "unknown rule code 'MEM03' (did you mean 'MEM003'?)"),
    ({"severity": {"tensor-history-keep": "error"}},
     "unknown rule 'tensor-history-keep' (did you mean 'tensor-history-kept'?)"),
    ({"tensor-history-keep": {}}, "unknown key 'tensor-history-keep' (did you mean "
                                  "'tensor-history-kept'?)"),
])
def test_a_config_typo_is_answered_with_the_nearest_key_code_or_name(table, hint):
    with pytest.raises(ConfigError, match=re.escape(hint)):
        settings_from_table(table, "pyproject.toml")


def test_a_rule_name_typo_on_the_command_line_gets_a_suggestion(capsys):
    assert main(["rule", "tensor-history-keep"]) == 2
    assert "(did you mean 'tensor-history-kept'?)" in capsys.readouterr().err
