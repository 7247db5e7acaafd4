"""`memlint check` / `rules` / `rule` as a user runs them: exit codes, output, paths, stdin.

Most tests call `main()` in-process (fast); the ones about what a shell sees
(no traceback, nothing on stderr, `python -m memlint`) run a real subprocess.
Everything is checked against MEM007, which is stable, so these tests do not
depend on the other rules.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from memlint import __version__
from memlint.cli import pages
from memlint.cli.main import main
from tests.cli_helpers import check, write
from tests.expectations import page_path
from memlint.rules import NAMES_BY_CODE, RULES_BY_CODE
from memlint.rules import ALL_CODES

CHECKOUT = Path(__file__).resolve().parent.parent
FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"
CLEAN = "import torch.cuda\n\nstate = torch.load('ckpt.pt', map_location='cpu')\n"
SYNTAX_ERROR = "import torch.cuda\nstate = torch.load('ckpt.pt'\n"


def run(*args: str, cwd: Path | None = None, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project folder (with its own pyproject.toml) as the working directory."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- exit codes and the text format ---------------------------------------------------

def test_a_clean_run_exits_0_and_says_all_checks_passed_but_not_with_quiet(project):
    write(project / "train.py", CLEAN)
    result = run("check", "train.py", cwd=project)
    assert (result.returncode, result.stdout, result.stderr) == (0, "All checks passed!\n", "")
    quiet = run("check", "-q", "train.py", cwd=project)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_a_path_without_python_files_is_a_warning_on_stderr(project, capsys):
    write(project / "docs" / "notes.txt", "no code here\n")
    code, out, err = check(capsys, "docs")
    assert code == 0 and out == ""
    assert err == "memlint: warning: no Python files found under the given paths\n"


def test_findings_exit_1_as_path_line_column_code_message(project, capsys):
    write(project / "train.py", FLAGGED)
    code, out, err = check(capsys, "train.py")
    assert code == 1 and err == ""
    assert out.startswith("train.py:3:9: MEM007 torch.load() without map_location")
    assert out.count("\n") == 2  # the finding, then the summary
    assert out.endswith("\nFound 1 finding (1 more with --fix --unsafe-fixes).\n")


def test_exit_zero_turns_findings_into_0_but_not_errors(project, capsys):
    write(project / "train.py", FLAGGED)
    assert check(capsys, "--exit-zero", "train.py")[0] == 0
    assert check(capsys, "--exit-zero", "train.py", "missing.py")[0] == 2


def test_python_dash_m_memlint_works_and_reports_the_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"memlint {__version__}"


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "check" in capsys.readouterr().err


@pytest.mark.parametrize("args, reason", [
    (["--select", "FOO"], "unknown rule code 'FOO'"),
    (["--ignore", "MEM7"], "unknown rule code 'MEM7'"),
    (["--format", "xml"], "invalid choice: 'xml'"),
    (["-j", "many"], "expected a number of processes"),
    (["--config", "nowhere.toml"], "no such file"),
    (["--no-config", "--config", "pyproject.toml"], "not allowed with argument"),
])
def test_a_bad_option_exits_2_with_one_line_and_no_traceback(project, args, reason):
    write(project / "train.py", FLAGGED)
    result = run("check", *args, "train.py", cwd=project)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and reason in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_path_exits_2_and_the_other_files_are_still_checked(project, capsys):
    write(project / "train.py", FLAGGED)
    code, out, err = check(capsys, "nothere.py", "train.py")
    assert code == 2
    assert err == "memlint: nothere.py: no such file or directory\n"
    assert "train.py:3:9: MEM007" in out


# -- selection ------------------------------------------------------------------------

def test_select_ignore_and_extend_select_take_codes_and_prefixes(project, capsys):
    write(project / "train.py", FLAGGED)
    write(project / "broken.py", SYNTAX_ERROR)
    assert check(capsys, "--ignore", "MEM007", "train.py")[0] == 0
    assert check(capsys, "--ignore", "MEM00", "train.py")[0] == 0
    assert check(capsys, "--select", "MEM000", "train.py")[0] == 0
    assert check(capsys, "--select", "MEM000", "--extend-select", "MEM007", "train.py")[0] == 1
    assert check(capsys, "--select", "mem007", "train.py")[0] == 1  # codes are not case-sensitive
    assert check(capsys, "--select", "MEM00", "--ignore", "MEM0", "train.py")[0] == 1  # longest wins
    # MEM000 is reported without being selected: a file a selected rule needs is broken
    code, out, _ = check(capsys, "--select", "MEM007", "broken.py")
    assert code == 1 and "broken.py:2:19: MEM000 cannot parse the file: '(' was never closed" in out


def test_mem000_cannot_be_ignored_by_name(project):
    result = run("check", "--ignore", "MEM000", ".", cwd=project)
    assert result.returncode == 2
    assert "MEM000" in result.stderr and "cannot be ignored" in result.stderr


def test_statistics_count_each_code_after_the_findings(project, capsys):
    write(project / "a.py", FLAGGED + "again = torch.load('x')\n")
    write(project / "b.py", SYNTAX_ERROR)
    code, out, _ = check(capsys, "--statistics", "a.py", "b.py")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 6  # three findings, the summary, two counts
    assert lines[-2:] == ["    2  MEM007  load-without-map-location",
                          "    1  MEM000  syntax-error"]


def test_statistics_of_a_json_run_go_to_stderr_so_stdout_stays_json(project, capsys):
    import json

    write(project / "a.py", FLAGGED)
    code, out, err = check(capsys, "--statistics", "--format", "json", "a.py")
    assert code == 1 and len(json.loads(out)) == 1
    assert err == "    1  MEM007  load-without-map-location\n"


# -- paths ----------------------------------------------------------------------------

def test_a_directory_is_walked_skipping_vcs_virtualenv_build_and_cache_folders(project, capsys):
    for folder in ("src/pkg", ".git", ".venv/lib", "venv", "build", "dist", "__pycache__",
                   "node_modules/x", "proj.egg-info", ".tox/py311", "src/.ipynb_checkpoints"):
        write(project / folder / "train.py", FLAGGED)
    write(project / "src" / "notes.txt", FLAGGED)
    code, out, _ = check(capsys, ".")
    assert code == 1
    assert [line.split(":")[0] for line in out.splitlines()[:-1]] == [
        os.path.join(".", "src", "pkg", "train.py")]


def test_a_project_inside_a_folder_named_like_an_exclude_is_still_checked(tmp_path, monkeypatch,
                                                                          capsys):
    project = tmp_path / "env" / "build" / "project"
    write(project / "pyproject.toml", "[tool.memlint]\n")
    write(project / "src" / "train.py", FLAGGED)
    monkeypatch.chdir(tmp_path)
    code, out, _ = check(capsys, str(project))
    assert code == 1 and "train.py:3:9: MEM007" in out


def test_a_file_named_explicitly_is_checked_even_in_an_excluded_folder(project, capsys):
    write(project / "build" / "train.py", FLAGGED)
    assert check(capsys, "build/train.py")[0] == 1


def test_force_exclude_applies_excludes_to_files_named_explicitly(project, capsys):
    write(project / "build" / "train.py", FLAGGED)
    write(project / "generated" / "model.py", FLAGGED)
    write(project / "src" / "train.py", FLAGGED)
    code, out, _ = check(capsys, "--force-exclude", "--extend-exclude", "generated",
                         "build/train.py", "generated/model.py", "src/train.py")
    assert code == 1 and out.startswith("src/train.py:3:9: MEM007") and out.count("\n") == 2


def test_stdin_is_read_for_a_dash_and_named_by_stdin_filename(project):
    result = run("check", "-", cwd=project, stdin=FLAGGED)
    assert result.returncode == 1 and result.stdout.startswith("-:3:9: MEM007")
    result = run("check", "--stdin-filename", "src/train.py", "-", cwd=project, stdin=FLAGGED)
    assert result.returncode == 1 and result.stdout.startswith("src/train.py:3:9: MEM007")
    assert run("check", "-", cwd=project, stdin=CLEAN).returncode == 0


def test_stdin_filename_finds_the_config_and_its_per_file_ignores(project, tmp_path):
    write(project / "pyproject.toml", '[tool.memlint.per-file-ignores]\n"scripts/*" = ["MEM007"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ignored = run("check", "--stdin-filename", str(project / "scripts" / "resume.py"), "-",
                  cwd=elsewhere, stdin=FLAGGED)
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr
    kept = run("check", "--stdin-filename", str(project / "src" / "resume.py"), "-",
               cwd=elsewhere, stdin=FLAGGED)
    assert kept.returncode == 1


def test_force_exclude_skips_an_excluded_stdin_filename(project, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(FLAGGED.encode())))
    code, out, _ = check(capsys, "--force-exclude", "--stdin-filename", "build/x.py", "-")
    assert (code, out) == (0, "")


def test_check_never_imports_or_runs_the_checked_code(project, capsys):
    marker = project / "imported.marker"
    write(project / "evil.py",
          f"import torch.cuda\nopen({str(marker)!r}, 'w').write('ran')\nx = torch.load('c')\n")
    write(project / "__init__.py", f"open({str(marker)!r}, 'w').write('ran')\n")
    assert check(capsys, ".")[0] == 1
    assert run("check", "evil.py", cwd=project).returncode == 1
    assert not marker.exists()


# -- rules and rule pages -----------------------------------------------------------------

def test_rules_lists_every_code_with_its_name_and_a_one_line_summary(capsys):
    assert main(["rules"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("MEM")]
    assert [line.split()[0] for line in lines] == ALL_CODES
    mem007 = next(line for line in lines if line.startswith("MEM007"))
    assert mem007.split()[1] == "load-without-map-location"
    assert "map_location" in mem007


@pytest.mark.parametrize("spelling", ["MEM007", "mem007", "load-without-map-location"])
def test_rule_prints_the_page_from_its_package(spelling, capsys):
    assert main(["rule", spelling]) == 0
    assert capsys.readouterr().out == page_path("MEM007").read_text(encoding="utf-8")


def test_every_code_has_a_written_page():
    for code in NAMES_BY_CODE:
        assert page_path(code).is_file(), code


def test_a_rule_without_a_page_gets_one_built_from_its_docstring(monkeypatch, capsys):
    monkeypatch.setattr(pages, "_read_page", lambda code: None)
    assert main(["rule", "MEM007"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("# MEM007 load-without-map-location\n")
    assert RULES_BY_CODE["MEM007"].INVALID[0] in shown


def test_an_unknown_rule_exits_2(capsys):
    assert main(["rule", "MEM999"]) == 2
    assert "unknown rule 'MEM999'" in capsys.readouterr().err


@pytest.mark.slow
def test_rule_pages_ship_in_a_built_wheel(tmp_path, monkeypatch):
    """A real wheel, installed into a fresh virtualenv, finds its pages without the checkout."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # a checkout on it would hide the wheel
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", str(wheels), str(CHECKOUT)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("torch_memlint-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    scripts = "Scripts" if os.name == "nt" else "bin"
    python = venv / scripts / ("python.exe" if os.name == "nt" else "python")
    # libcst comes from this interpreter's site-packages, appended by a .pth file
    # (which, unlike --system-site-packages, also works when this one is a venv);
    # path lines in a .pth run no import hooks, so the checkout's editable
    # memlint stays invisible and the wheel's is the one imported.
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, timeout=60, capture_output=True, text=True).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(venv_site) / "outer-site-packages.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, timeout=300, capture_output=True)
    shown = subprocess.run(
        [str(python), "-c", "import memlint, sys; from memlint.cli.main import main; "
                            "print(memlint.__file__, file=sys.stderr); main(['rule', 'MEM007'])"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert str(venv) in shown.stderr, "the wheel's memlint must be the one imported"
    assert shown.stdout == page_path("MEM007").read_text(encoding="utf-8")
    assert sysconfig.get_paths()["purelib"] not in shown.stderr


def test_the_readme_example_is_what_check_prints_today(monkeypatch):
    """The first console block of the README shows a real run; keep it true
    (as a user runs it: the rules in preview stay there)."""
    monkeypatch.delenv("MEMLINT_PREVIEW")
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```console\n", 1)[1].split("```", 1)[0]
    command, rest = block.split("\n", 1)
    shown = rest.split("$ echo $?", 1)[0]
    assert command.startswith("$ memlint check ")
    done = run(*command[len("$ memlint "):].split(), cwd=CHECKOUT)
    assert done.stdout == shown
    assert done.returncode == int(block.split("$ echo $?\n", 1)[1].split()[0])


def test_severities_fail_on_quiet_and_output_file_end_to_end(project):
    """A MEM005 (a note by default) and a MEM007 (a warning): `--fail-on`
    decides which set exit 1; `[tool.memlint] severity` moves a rule;
    `-q` drops the summary; `-o` writes the report to a file."""
    import json
    source = ("import torch\nfrom torch.utils.data import DataLoader\n"
              "loader = DataLoader(Frames(), batch_size=8)\n"
              "for x in loader:\n    x = x.cuda()\n"
              "net = Net()\nnet.load_state_dict(torch.load('best.pt'))\nnet.cuda()\n")
    write(project / "train.py", source)
    assert run("check", "train.py", cwd=project).returncode == 1
    assert run("check", "--fail-on", "warning", "train.py", cwd=project).returncode == 1
    assert run("check", "--fail-on", "error", "train.py", cwd=project).returncode == 0
    quiet = run("check", "-q", "train.py", cwd=project)
    assert quiet.stdout.count("\n") == 2 and "Found" not in quiet.stdout
    written = run("check", "--output-format", "json", "-o", "out.json", "train.py", cwd=project)
    assert written.stdout == "" and written.returncode == 1
    levels = {r["code"]: r["severity"] for r in json.loads((project / "out.json").read_text())}
    assert levels == {"MEM005": "note", "MEM007": "warning"}
    (project / "pyproject.toml").write_text(
        "[tool.memlint]\nfail-on = \"error\"\n[tool.memlint.severity]\n"
        "load-without-map-location = \"error\"\n")
    gated = run("check", "--format", "github", "train.py", cwd=project)
    assert gated.returncode == 1  # the load is now an error, and errors fail
    assert gated.stdout.splitlines()[0].startswith("::notice ") \
        and gated.stdout.splitlines()[1].startswith("::error ")
    (project / "pyproject.toml").write_text("[tool.memlint.severity]\nMEM005 = \"fatal\"\n")
    bad = run("check", "train.py", cwd=project)
    assert bad.returncode == 2 and "expected one of error, warning, note" in bad.stderr


def test_code_frames_and_colour_follow_the_flags_and_the_environment(project, monkeypatch):
    """Piped output stays one line per finding; --show-source adds the code
    and a caret span; colour only on request (--color always, FORCE_COLOR),
    never under NO_COLOR with --color auto."""
    write(project / "train.py", "import torch\nnet = Net()\n"
                                "net.load_state_dict(torch.load('best.pt'))\nnet.cuda()\n")
    plain = run("check", "train.py", cwd=project).stdout
    assert plain.splitlines()[0].startswith("train.py:3:21: MEM007 [*] ") and "|" not in plain
    framed = run("check", "--show-source", "train.py", cwd=project).stdout.splitlines()
    assert framed[1:4] == ["  |", "3 | net.load_state_dict(torch.load('best.pt'))",
                           "  |" + " " * 21 + "^" * 21]
    assert "\033[" not in "\n".join(framed)
    coloured = run("check", "--show-source", "--color", "always", "train.py", cwd=project).stdout
    assert "\033[1;33mMEM007\033[0m" in coloured  # a warning, in the warning's colour
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert "\033[" in run("check", "--show-source", "train.py", cwd=project).stdout
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in run("check", "--show-source", "train.py", cwd=project).stdout
    assert "|" not in run("check", "--no-show-source", "train.py", cwd=project).stdout


def test_force_colour_colours_the_concise_lines_and_no_colour_wins(project, monkeypatch):
    """`FORCE_COLOR=1 memlint check . | less -R`: colour without a terminal."""
    write(project / "train.py", FLAGGED)
    monkeypatch.setenv("FORCE_COLOR", "1")
    forced = run("check", "train.py", cwd=project).stdout
    assert forced.startswith("\033[1mtrain.py:3:9\033[0m: \033[1;36mMEM007\033[0m ")  # a note
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in run("check", "train.py", cwd=project).stdout
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.delenv("NO_COLOR")
    assert "\033[" not in run("check", "train.py", cwd=project).stdout
    assert "\033[" in run("check", "--color", "always", "train.py", cwd=project).stdout


def test_a_rule_page_for_a_terminal_drops_markdown_marks_and_colours_code():
    from memlint.cli.pages import for_terminal
    markdown = "# tensor-history-kept (MEM003)\n\n## Fix safety\n\nUse `loss.item()`.\n" \
               "```python\ntotal += loss.item()\n```\n"
    plain = for_terminal(markdown, color=False)
    assert plain == ("TENSOR-HISTORY-KEPT (MEM003)\n\nFix safety\n\nUse `loss.item()`.\n"
                     "    total += loss.item()\n")
    coloured = for_terminal(markdown, color=True)
    assert "\033[36mloss.item()\033[0m" in coloured and "`" not in coloured
    assert "\033[1mFix safety\033[0m" in coloured


def test_the_server_without_its_extra_says_what_to_install_and_exits_2():
    hide = ("import sys; sys.modules.update({m: None for m in "
            "('pygls', 'pygls.lsp', 'pygls.lsp.server', 'lsprotocol', 'lsprotocol.types')}); "
            "from memlint.cli.main import main; sys.exit(main(['server']))")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == \
        "memlint server: needs pygls (pip install 'pygls>=2,<3' where memlint is installed)"


# -- what a run would do: --show-files, --show-settings, -v -------------------------

def test_show_files_lists_what_would_be_checked_and_checks_nothing(project, capsys):
    write(project / "src" / "train.py", FLAGGED)
    write(project / "src" / "nb.ipynb", "{}")
    write(project / "build" / "copy.py", FLAGGED)
    code, out, err = check(capsys, "--show-files", ".")
    assert (code, out, err) == (0, "./src/nb.ipynb\n./src/train.py\n", "")


def test_show_settings_prints_the_settings_in_force_as_toml_that_loads_back(project, capsys):
    tomllib = pytest.importorskip("tomllib")
    from memlint.engine.config import load_settings, settings_from_table
    (project / "pyproject.toml").write_text(
        "[tool.memlint]\nignore = [\"MEM005\"]\nfail-on = \"warning\"\n"
        "[tool.memlint.per-file-ignores]\n\"tests/*\" = [\"MEM004\"]\n")
    code, out, _ = check(capsys, "--show-settings", "--extend-ignore", "MEM001", ".")
    assert code == 0 and out.startswith(f"# configuration: {project / 'pyproject.toml'}\n")
    shown = settings_from_table(tomllib.loads(out)["tool"]["memlint"], "shown",
                                root=str(project))
    expected = load_settings(project / "pyproject.toml")
    assert shown.ignore == ("MEM005", "MEM001") and shown.fail_on == "warning"
    assert shown.per_file_ignores == expected.per_file_ignores == {"tests/*": ("MEM004",)}
    assert shown.exclude == expected.exclude


def test_verbose_says_which_configuration_and_what_the_check_cost(project, capsys):
    write(project / "train.py", CLEAN)
    code, out, err = check(capsys, "-v", "--no-cache", "train.py")
    assert code == 0 and out == "All checks passed!\n"
    first, second = err.splitlines()
    assert first == "memlint: configuration: none (the defaults)"
    assert second.startswith("memlint: checked 1 file (0 from the cache) in ")
