"""Every front end gives a file the same findings: `memlint check` of its
folder, `memlint check FILE`, flake8 (`--select=MEM`) and the editor server,
whatever else is named. Each reads the file's whole project (`engine/projects.py`),
so cross-file facts do not depend on how the file was named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.cli.main import main as memlint_main
from tests.expectations import CHECKOUT, FIXTURES

Key = tuple[str, int, int, str]  # path, line, column (1-based), code
TWO_SCRIPTS = CHECKOUT / "tests" / "data" / "two_scripts"
REVIEW = CHECKOUT / ".review"
#: how many repositories of the review corpus the sample takes
REVIEW_SAMPLE = 10


def _files(tree: Path) -> list[str]:
    return sorted(str(p) for p in tree.rglob("*.py") if "__pycache__" not in p.parts)


def _cli(capsys, *paths: str) -> set[Key]:
    status = memlint_main(["check", "--format", "json", "--exit-zero", *paths])
    out = capsys.readouterr().out
    assert status == 0, out
    return {(os.path.abspath(f["path"]), f["line"], f["column"], f["code"])
            for f in json.loads(out)}


def _flake8(files: list[str], cwd: Path) -> set[Key]:
    result = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select=MEM,E999",
         "--format=%(path)s:%(row)d:%(col)d: %(code)s", *files],
        capture_output=True, text=True, cwd=cwd, check=False)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
    found = set()
    for line in result.stdout.splitlines():
        path, row, column, code = line.rsplit(":", 3)
        found.add((os.path.abspath(path), int(row), int(column), code.strip()))
    return found


def _server(files: list[str]) -> set[Key]:
    pytest.importorskip("pygls")
    from memlint.cli.server import findings_for, settings_for

    found = set()
    for path in files:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
        found |= {(os.path.abspath(f.path), f.line, f.column, f.code)
                  for f in findings_for(path, text, settings_for(path)[0])}
    return found


def _by_file(found: set[Key]) -> dict[str, set[Key]]:
    grouped: dict[str, set[Key]] = {}
    for key in found:
        grouped.setdefault(key[0], set()).add(key)
    return grouped


def _assert_front_ends_agree(tree: Path, capsys, monkeypatch, tmp_path) -> set[Key]:
    """Each front end on every Python file under `tree`; the findings of the
    folder check, which every other front end gave too."""
    monkeypatch.setenv("MEMLINT_CACHE_DIR", str(tmp_path / "cache"))
    files = _files(tree)
    whole = _by_file(_cli(capsys, str(tree)))
    alone = _by_file(set().union(*(_cli(capsys, path) for path in files)))
    flake8 = _by_file(_flake8(files, tmp_path))
    server = _by_file(_server(files))
    for path in files:
        expected = whole.get(path, set())
        assert alone.get(path, set()) == expected, f"check FILE differs from check DIR on {path}"
        in_flake8 = flake8.get(path, set())
        if any(code == "E999" for *_, code in in_flake8):
            # flake8 reports a file Python cannot parse itself (E999) and runs no plugin
            # on it, also where memlint reads it (`.cuda(async=True)`, Python 3.6 code)
            in_flake8 = {key for key in in_flake8 if key[3] != "E999"}
            expected_there = set()
        else:
            expected_there = expected
        assert in_flake8 == expected_there, f"flake8 differs from check DIR on {path}"
        assert server.get(path, set()) == expected, f"the server differs from check DIR on {path}"
    return set().union(*whole.values()) if whole else set()


def test_two_scripts_named_main_stay_two_modules(capsys, monkeypatch, tmp_path):
    """`gan/utils.py` is called under no_grad by `gan/main.py` only; the
    `vae` pair, with the same file names, calls with autograd on."""
    found = _assert_front_ends_agree(TWO_SCRIPTS, capsys, monkeypatch, tmp_path)
    assert {(os.path.relpath(path, TWO_SCRIPTS), line, code) for path, line, _, code in found} \
        == {("vae/utils.py", 9, "MEM004")}


def test_naming_some_files_of_a_project_changes_none_of_their_findings(capsys, monkeypatch,
                                                                        tmp_path):
    monkeypatch.setenv("MEMLINT_CACHE_DIR", str(tmp_path / "cache"))
    files = _files(TWO_SCRIPTS)
    every = _cli(capsys, *files)
    for start in range(len(files)):
        some = files[start:start + 2]
        assert _cli(capsys, *some) == {f for f in every if f[0] in some}


@pytest.mark.slow
def test_every_fixture_gets_the_same_findings_from_every_front_end(capsys, monkeypatch,
                                                                     tmp_path):
    _assert_front_ends_agree(FIXTURES, capsys, monkeypatch, tmp_path)


def _review_sample() -> list[Path]:
    """Every n-th repository of the review corpus (sorted by name) with 3 to
    60 Python files: small enough to check each file alone."""
    if not REVIEW.is_dir():
        return []
    fitting = [tree for tree in sorted(REVIEW.iterdir())
               if tree.is_dir() and 3 <= len(_files(tree)) <= 60]
    step = max(1, len(fitting) // REVIEW_SAMPLE)
    return fitting[::step][:REVIEW_SAMPLE]


@pytest.mark.slow
@pytest.mark.skipif(not REVIEW.is_dir(), reason=".review is absent: the review corpus is "
                    "exported there by bench/review/score.py (not in CI); the committed "
                    "tests/data/two_scripts project stands in for it")
@pytest.mark.parametrize("index", range(REVIEW_SAMPLE))
def test_a_review_repository_gets_the_same_findings_from_every_front_end(
        index, capsys, monkeypatch, tmp_path):
    sample = _review_sample()
    if index >= len(sample):
        pytest.skip("the review corpus has fewer repositories that fit")
    _assert_front_ends_agree(sample[index], capsys, monkeypatch, tmp_path)
