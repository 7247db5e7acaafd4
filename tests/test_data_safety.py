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
