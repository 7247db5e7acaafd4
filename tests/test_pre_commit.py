"""The pre-commit hook, used as users use it: a throw-away repository whose
`.pre-commit-config.yaml` points at this checkout, `pre-commit install`, `git commit`.

pre-commit builds the hook's own virtualenv from the checkout's HEAD commit
(libcst from PyPI), so this tests the committed hook: commit before running it.
PRE_COMMIT_HOME is a temporary folder; the user's cache is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

#: a finding of a rule in the default set (the hook runs without --preview)
FLAGGED = "import torch\n\ntorch.no_grad()\n"
CLEAN = "import torch\n\nwith torch.no_grad():\n    pass\n"


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, dict]:
    """A fresh repository with the memlint hook installed (its venv built once)."""
    head = git("rev-parse", "HEAD", cwd=CHECKOUT)
    if head.returncode != 0 or shutil.which("git") is None:
        pytest.skip("needs git and a git checkout of memlint")
    committed = git("cat-file", "-e", "HEAD:.pre-commit-hooks.yaml", cwd=CHECKOUT)
    assert committed.returncode == 0, ".pre-commit-hooks.yaml must be committed"
    root = tmp_path_factory.mktemp("precommit")
    work = root / "project"
    work.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(root / "cache"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    env.pop("GIT_DIR", None)
    env.pop("GIT_INDEX_FILE", None)
    assert git("init", "-q", "-b", "main", cwd=work).returncode == 0
    (work / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {CHECKOUT.as_posix()}\n"
        f"    rev: {head.stdout.strip()}\n"
        "    hooks:\n"
        "      - id: memlint\n")
    pre_commit = [sys.executable, "-m", "pre_commit"]
    installed = subprocess.run([*pre_commit, "install", "--install-hooks"], cwd=work, env=env,
                               capture_output=True, text=True, check=False, timeout=900)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return work, env


def commit(repo: tuple[Path, dict], files: dict[str, str]) -> subprocess.CompletedProcess:
    work, env = repo
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    subprocess.run(["git", "add", "--", *files], cwd=work, env=env, check=True)
    return subprocess.run(["git", "commit", "-m", "change"], cwd=work, env=env,
                          capture_output=True, text=True, check=False, timeout=600)


def test_a_staged_finding_refuses_the_commit_and_is_shown(repo):
    result = commit(repo, {"train.py": FLAGGED})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "memlint" in output and "Failed" in output
    assert "train.py:3:1: MEM006" in output
    assert git("rev-parse", "--verify", "HEAD", cwd=repo[0]).returncode != 0  # nothing committed


def test_a_clean_file_passes(repo):
    result = commit(repo, {"train.py": CLEAN})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "memlint" in output and "Passed" in output


def test_a_flagged_notebook_is_checked_too(repo):
    notebook = ('{"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], '
                '"execution_count": null, "source": ["import torch\\n", '
                '"torch.no_grad()\\n"]}], "metadata": {}, "nbformat": 4, '
                '"nbformat_minor": 5}\n')
    result = commit(repo, {"explore.ipynb": notebook})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "explore.ipynb" in output and "MEM006" in output
    git("reset", "-q", "HEAD", "--", "explore.ipynb", cwd=repo[0])
    (repo[0] / "explore.ipynb").unlink()


def test_a_commit_without_python_files_passes_without_error(repo):
    result = commit(repo, {"README.md": "# notes\n", "data/config.json": "{}\n"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "(no files to check)Skipped" in output
    assert "Traceback" not in output
