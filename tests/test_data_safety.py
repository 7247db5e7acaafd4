"""Issue 29, "never lose a user's data": `clean`, `--fix`, stdin, `-o`, the
cache and the worker pool under hostile conditions. Each test reproduces one
way memlint destroyed, corrupted or silently dropped something, through the
command a user runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.engine.cache import CACHE_DIR_NAME
from tests.processes import gone

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"
FIXED = "import torch.cuda\n\nstate = torch.load('ckpt.pt', map_location=\"cpu\")\n"


def run(*args: str, cwd: Path, stdin: bytes | None = None, env: dict | None = None):
    """`python -m memlint ARGS` as a shell runs it: bytes in, bytes out."""
    return subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, input=stdin,
                          capture_output=True, check=False, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def project(tmp_path) -> Path:
    """A git-like project: version control, a .gitignore, code."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    (tmp_path / "train.py").write_text(FLAGGED)
    return tmp_path


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- 1: the cache folder is never the project ------------------------------------------

@pytest.mark.parametrize("how", ["flag", "environment"])
def test_1_clean_never_removes_a_project_named_as_the_cache(project, how):
    before = _contents(project)
    args, env = (["--cache-dir", "."], None) if how == "flag" else ([], {"MEMLINT_CACHE_DIR": "."})
    result = run("clean", *args, cwd=project, env=env)
    assert _contents(project) == before
    assert b"Removed" not in result.stdout


def test_1_check_refuses_a_cache_folder_that_holds_a_project(project):
    before = _contents(project)
    result = run("check", "--cache-dir", ".", "train.py", cwd=project)
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert result.stderr.count(b"\n") == 1 and b"memlint did not make" in result.stderr
    assert _contents(project) == before


def test_1_clean_removes_a_cache_memlint_made_and_keeps_one_it_shares(project):
    assert run("check", "train.py", cwd=project).returncode == 1
    cache = project / CACHE_DIR_NAME
    assert (cache / "CACHEDIR.TAG").read_text().startswith(
        "Signature: 8a477f597d28d172789f06886806bc55")
    (cache / "notes.txt").write_text("mine")
    refused = run("clean", cwd=project)
    assert refused.returncode == 2 and (cache / "notes.txt").exists()
    (cache / "notes.txt").unlink()
    cleaned = run("clean", cwd=project)
    assert cleaned.returncode == 0 and b"Removed" in cleaned.stdout and not cache.exists()
    assert (project / ".git" / "HEAD").exists() and (project / "train.py").exists()


# -- 10: the cache is bounded ----------------------------------------------------------

def _entries(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() and p.parent.parent != cache.parent
            and p.name not in ("CACHEDIR.TAG", ".gitignore")]


def test_10_a_changed_file_replaces_its_cache_entry(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    for number in range(4):
        (tmp_path / "other.py").write_text(f"x = {number}\n")
        run("check", "--cache-dir", "cache", ".", cwd=tmp_path)
    assert len(_entries(tmp_path / "cache")) == 2
    assert run("check", "--cache-dir", "cache", ".", cwd=tmp_path).returncode == 1


def test_10_only_the_newest_few_memlints_or_settings_are_kept(tmp_path):
    from memlint.engine.cache import KEPT_RUN_FOLDERS
    (tmp_path / "train.py").write_text(FLAGGED)
    codes = ["MEM001", "MEM002", "MEM003", "MEM004", "MEM005", "MEM006", "MEM007", "MEM009"]
    for code in codes:
        run("check", "--cache-dir", "cache", "--select", code, ".", cwd=tmp_path)
    runs = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(runs) == KEPT_RUN_FOLDERS + 1
    assert len(_entries(tmp_path / "cache")) == KEPT_RUN_FOLDERS + 1


# -- 2: --fix changes only the bytes that were checked --------------------------------

def _during_the_run(monkeypatch, action) -> None:
    """Run `action` once, right after the files were checked (the user saves meanwhile)."""
    from memlint.cli import main as cli
    real, done = cli.check_sources, []

    def check_then_act(*args, **kwargs):
        report = real(*args, **kwargs)
        if not done:
            done.append(action())
        return report
    monkeypatch.setattr(cli, "check_sources", check_then_act)


def _main(capsys, *args: str) -> tuple[int, str, str]:
    from memlint.cli.main import main
    code = main(["check", "-j", "1", "--no-cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_2_fix_never_undoes_an_edit_saved_while_it_ran(tmp_path, monkeypatch, capsys):
    path = tmp_path / "train.py"
    path.write_text(FLAGGED)
    edited = FLAGGED.replace("'ckpt.pt'", "'last.pt'")
    _during_the_run(monkeypatch, lambda: path.write_text(edited))
    code, out, err = _main(capsys, "--fix", "--unsafe-fixes", str(path))
    assert path.read_text() == edited
    assert "train.py: not fixed: it changed on disk after it was checked" in err
    assert code == 1 and "MEM007" in out


# -- 3: --fix on stdin: the whole input, nothing else ---------------------------------

def test_3a_stdin_over_the_size_limit_comes_back_whole(tmp_path):
    data = (FLAGGED + "# padding\n" * 300).encode()
    result = run("check", "--fix", "--max-file-size", "0.001", "-", cwd=tmp_path, stdin=data)
    assert len(data) > 0.001 * 2**20 and result.stdout == data
    assert b"MEM000" in result.stderr


def test_3b_an_excluded_stdin_filename_comes_back_unchanged(tmp_path):
    result = run("check", "--fix", "--force-exclude", "--extend-exclude", "build",
                 "--stdin-filename", "build/train.py", "-", cwd=tmp_path, stdin=FLAGGED.encode())
    assert (result.returncode, result.stdout) == (0, FLAGGED.encode())


def test_3c_statistics_go_to_stderr_when_stdout_is_the_source(tmp_path):
    result = run("check", "--fix", "--statistics", "-", cwd=tmp_path, stdin=FLAGGED.encode())
    assert (result.returncode, result.stdout) == (1, FLAGGED.encode())  # an unsafe fix: kept
    assert b"MEM007" in result.stderr


# -- 6: -o is replaced at the end, never truncated first ----------------------------

def test_6_an_interrupted_run_keeps_the_previous_report(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text(FLAGGED)
    report = tmp_path / "report.txt"
    report.write_text("the previous report\n")

    def interrupted():
        raise KeyboardInterrupt
    _during_the_run(monkeypatch, interrupted)
    assert _main(capsys, "-o", str(report), str(tmp_path / "train.py"))[0] == 130
    assert report.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt", "train.py"]


def test_6_diff_goes_to_the_output_file(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    result = run("check", "--diff", "--unsafe-fixes", "-o", "report.diff", "train.py",
                 cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == b""
    assert "+state = torch.load('ckpt.pt', map_location=" in (tmp_path / "report.diff").read_text()


# -- 5: --fix keeps the file what it was --------------------------------------------

def test_5_a_symbolic_link_is_fixed_through_to_its_target(tmp_path):
    target = tmp_path / "real.py"
    target.write_text(FLAGGED)
    (tmp_path / "link.py").symlink_to("real.py")
    run("check", "--fix", "--unsafe-fixes", "link.py", cwd=tmp_path)
    assert (tmp_path / "link.py").is_symlink() and target.read_text() == FIXED


def test_5_hard_links_stay_one_file(tmp_path):
    first = tmp_path / "train.py"
    first.write_text(FLAGGED)
    os.link(first, tmp_path / "twin.py")
    result = run("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert os.path.samefile(first, tmp_path / "twin.py")
    assert (tmp_path / "twin.py").read_text() == FIXED


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="only root can give a file to another owner")
def test_5_the_owner_and_mode_are_kept(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(FLAGGED)
    os.chown(path, 65534, 65534)
    path.chmod(0o640)
    run("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    status = path.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o777) == (65534, 65534, 0o640)
    assert path.read_text() == FIXED


# -- 7: only the fixed span's bytes change -----------------------------------------

@pytest.mark.parametrize("encoding, far_away", [
    ("cp932", b"# \xfa\x40 \xfa\x54\n"),        # IBM extensions: re-encoded as NEC ones
    ("utf-7", b"# +ACE- +AH4-\n"),                # optional escapes: re-encoded directly
    ("iso2022_jp", b"# \x1b(Jabc\x1b(B \x1b$BF|K\\\x1b(B\n"),  # JIS-Roman: re-encoded ASCII
])
@pytest.mark.parametrize("how", ["file", "stdin"])
def test_7_fix_changes_only_the_fixed_span_in_any_encoding(tmp_path, encoding, far_away, how):
    body = FLAGGED.encode(encoding).replace(b"\n\n", b"\n" + far_away, 1)
    original = f"# -*- coding: {encoding} -*-\n".encode() + body + far_away
    assert original.decode(encoding).encode(encoding) != original  # the trap is set
    path = tmp_path / "train.py"
    path.write_bytes(original)
    if how == "file":
        run("check", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
        fixed = path.read_bytes()
    else:
        fixed = run("check", "--fix", "--unsafe-fixes", "-", cwd=tmp_path, stdin=original).stdout
    assert fixed.replace(b', map_location="cpu"', b"") == original
    assert fixed != original


def test_7_a_coding_cookie_counts_with_cr_line_ends_as_in_python(tmp_path):
    original = "# -*- coding: cp1252 -*-\rimport torch.cuda\rstate = torch.load('€.pt')\r"
    (tmp_path / "train.py").write_bytes(original.encode("cp1252"))
    result = run("check", "--no-cache", "--fix", "--unsafe-fixes", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert (tmp_path / "train.py").read_bytes() == original.replace(
        "'€.pt')", "'€.pt', map_location=\"cpu\")").encode("cp1252")


# -- 12: one line and exit 2, never a traceback --------------------------------------

def _one_line_exit_2(result) -> None:
    assert result.returncode == 2, result.stderr
    assert b"Traceback" not in result.stderr and result.stderr.count(b"\n") == 1, result.stderr
    assert b"memlint bug" not in result.stderr


def _notebook(source: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": source.splitlines(keepends=True),
                       "metadata": {}, "outputs": [], "execution_count": None}],
            "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.parametrize("mode", ["--fix", "--diff"])
def test_12_a_utf16_notebook_cannot_be_fixed_and_says_so(tmp_path, mode):
    import json
    (tmp_path / "nb.ipynb").write_bytes(json.dumps(_notebook(FLAGGED)).encode("utf-16"))
    result = run("check", mode, "--unsafe-fixes", "--no-cache", "nb.ipynb", cwd=tmp_path)
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert b"nb.ipynb: not fixed: cannot decode it" in result.stderr \
        or b"nb.ipynb: no diff: cannot decode it" in result.stderr


def test_12_a_file_deleted_during_a_fix_run_is_one_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "train.py"
    path.write_text(FLAGGED)
    _during_the_run(monkeypatch, path.unlink)
    code, _, err = _main(capsys, "--fix", "--unsafe-fixes", str(path))
    assert code == 2 and "train.py: not fixed: cannot read it: No such file" in err


def test_12_a_huge_file_timeout_is_no_overflow(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    result = run("check", "--no-cache", "--file-timeout", "1e10", "--max-file-memory", "0",
                 "train.py", cwd=tmp_path)
    assert result.returncode == 1 and b"MEM007" in result.stdout and result.stderr == b""


def test_12_an_infinite_size_limit_is_a_usage_error(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    _one_line_exit_2(run("check", "--no-cache", "--max-file-size", "inf", "train.py",
                         cwd=tmp_path))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_12_a_full_disk_is_one_line(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    _one_line_exit_2(run("check", "--no-cache", "-o", "/dev/full", "train.py", cwd=tmp_path))
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache",
                                 "train.py"], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE,
                                check=False, timeout=120)
    _one_line_exit_2(result)


def test_12_a_tree_1200_folders_deep_is_checked(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    cwd = os.getcwd()
    os.chdir(folder)  # paths this long are made one step at a time
    try:
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        Path("train.py").write_text(FLAGGED)
    finally:
        os.chdir(cwd)
    try:
        result = run("check", "--no-cache", "deep", cwd=tmp_path)
    finally:  # pytest's own clean-up (shutil.rmtree) recurses per level
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    assert result.returncode == 1 and b"MEM007" in result.stdout, result.stderr[-300:]


def test_12_a_pyproject_nested_5000_deep_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nx = " + "[" * 5000 + "]" * 5000)
    (tmp_path / "train.py").write_text(FLAGGED)
    _one_line_exit_2(run("check", "--no-cache", "train.py", cwd=tmp_path))


def test_12_a_notebook_with_a_4300_digit_number_is_mem000(tmp_path):
    import json
    text = json.dumps(_notebook(FLAGGED))
    (tmp_path / "nb.ipynb").write_text(text[:-1] + ', "big": ' + "9" * 4400 + "}")
    result = run("check", "--no-cache", "nb.ipynb", cwd=tmp_path)
    assert result.returncode == 1 and b"MEM000" in result.stdout and result.stderr == b""


# -- 13: no silent pass --------------------------------------------------------------

@pytest.mark.parametrize("named", [True, False])
def test_13_an_unreadable_folder_is_said_and_exits_2(tmp_path, monkeypatch, capsys, named):
    """(Simulated: the tests may run as root, who reads every folder.)"""
    (tmp_path / "train.py").write_text(FLAGGED.replace("'ckpt.pt')", "'c', map_location='cpu')"))
    locked = tmp_path / "locked"
    locked.mkdir()
    real_scandir = os.scandir

    def scandir(path="."):
        if os.path.abspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)
    monkeypatch.setattr(os, "scandir", scandir)
    code, _, err = _main(capsys, str(locked if named else tmp_path))
    assert code == 2 and "locked: cannot read the folder: Permission denied" in err


def test_13_a_named_folder_with_nothing_to_check_is_not_a_silent_pass(tmp_path):
    """(A warning, as main's issue 27 settled for a path without Python files.)"""
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "train.py").write_text(FLAGGED)
    result = run("check", "--no-cache", "--extend-exclude", "build", "build", cwd=tmp_path)
    assert b"no Python files found under the given paths" in result.stderr


def test_13_diff_of_a_missing_path_exits_2(tmp_path):
    assert run("check", "--diff", "missing.py", cwd=tmp_path).returncode == 2


def test_13_a_closed_pipe_does_not_turn_findings_into_success(tmp_path):
    """`memlint check . | head -1`: more findings than a pipe holds."""
    (tmp_path / "train.py").write_text("import torch.cuda\n" + "torch.load('c.pt')\n" * 3000)
    process = subprocess.Popen([sys.executable, "-m", "memlint", "check", "--no-cache", "."],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and b"Traceback" not in err


@pytest.mark.parametrize("name, shown", [("a\nb.py", "a\\nb.py"),
                                         ("\x1b[31mred.py", "\\x1b[31mred.py")])
def test_13_control_characters_in_file_names_are_escaped(tmp_path, name, shown):
    (tmp_path / name).write_text(FLAGGED)
    result = run("check", "--no-cache", ".", cwd=tmp_path)
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith(f"./{shown}:3:9: MEM007") and "\x1b" not in result.stdout.decode()


# -- 8: workers never outlive their parent -------------------------------------------

_ORPHAN_SCRIPT = """
import os, sys, time
from functools import partial
from memlint.engine.isolation import Budget, run_supervised

def check(folder, task):
    with open(os.path.join(folder, task + ".pid"), "w") as out:
        out.write(str(os.getpid()))
    if task == "hang":
        time.sleep(3600)
    return task

run_supervised(partial(check, sys.argv[1]), ["quick", "hang"], 2, Budget())
"""


def _wait_until(condition, seconds: float = 60) -> bool:
    import time
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked where they can be")
@pytest.mark.slow
def test_8_workers_die_with_a_killed_parent(tmp_path):
    """One worker busy on a file that hangs, one idle waiting for the next task."""
    import signal
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT, str(tmp_path)])
    pid_files = [tmp_path / "quick.pid", tmp_path / "hang.pid"]
    try:
        assert _wait_until(lambda: all(p.exists() and p.read_text() for p in pid_files))
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    workers = [int(p.read_text()) for p in pid_files]
    try:
        assert _wait_until(lambda: all(gone(pid) for pid in workers), seconds=30), workers
    finally:
        for pid in workers:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


# -- 9: a FIFO anywhere in the project is never opened ------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_9_a_fifo_next_to_the_checked_file_never_blocks(tmp_path):
    """Checking one file reads the project's other text files (does it use
    CUDA?): `logs/progress.json` fed by a running job must not be one of them."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "logs").mkdir()
    os.mkfifo(tmp_path / "logs" / "progress.json")
    os.mkfifo(tmp_path / "logs" / "step.py")
    (tmp_path / "train.py").write_text("import torch\n\nstate = torch.load('ckpt.pt')\n")
    result = run("check", "--no-cache", "train.py", cwd=tmp_path)
    assert result.returncode in (0, 1) and result.stderr == b""
