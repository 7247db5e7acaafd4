"""`-j N` changes the speed, never the output: same findings, same order, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"
CLEAN = "import torch.cuda\n\nstate = torch.load('ckpt.pt', map_location='cpu')\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """60 files in nested folders, names chosen so creation order is not sort order."""
    root = tmp_path_factory.mktemp("tree")
    for i in range(60):
        folder = root / f"pkg{(i * 7) % 5}" / f"sub{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        body = FLAGGED * (1 + i % 3) if i % 4 else CLEAN
        if i % 11 == 0:
            body = "import torch.cuda\nstate = torch.load(\n"  # MEM000 as well
        (folder / f"m{(i * 37) % 60:02d}.py").write_text(body)
    return root


def check(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", "check", *args, "."], cwd=tree,
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize("output_format", ["text", "json"])
def test_one_and_two_jobs_give_identical_output(tree, output_format):
    one = check(tree, "-j", "1", "--format", output_format)
    two = check(tree, "-j", "2", "--format", output_format)
    assert one.returncode == two.returncode == 1
    assert one.stderr == two.stderr == ""
    assert one.stdout == two.stdout
    assert one.stdout.count("MEM007") > 60 and "MEM000" in one.stdout


def test_output_is_sorted_by_path_line_column_code(tree):
    lines = [line for line in check(tree, "-j", "2").stdout.splitlines()
             if not line.startswith("Found ")]  # the summary
    keys = []
    for line in lines:
        path, row, column, rest = line.split(":", 3)
        keys.append((path, int(row), int(column), rest.split()[0]))
    assert keys == sorted(keys) and len(keys) == len(lines) > 60
