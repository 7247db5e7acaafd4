"""The result cache: an unchanged file is not analysed again, a changed one is,
and the project's verdict is settled afresh from every file's facts, so what
depends on a changed file is decided again with them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlint import Settings, check_paths
from memlint.engine import check_sources, discover_sources
from memlint.engine import cache as cache_module
from memlint.engine.cache import CACHE_DIR_NAME, ResultCache

TRAIN = ("import torch\nfrom .losses import compute_loss\n\n"
         "model = torch.nn.Linear(4, 1).cuda()\ntotal = 0.0\n"
         "for x, y in loader:\n    total += compute_loss(model(x), y)\n")
LOADS = ("import torch\n\nmodel = torch.nn.Linear(4, 1)\n"
         "model.load_state_dict(torch.load(path))\nmodel.cuda()\n")


def _losses(returned: str) -> str:
    return ("import torch\ncriterion = torch.nn.MSELoss()\n\n"
            f"def compute_loss(out, y):\n    return {returned}\n\n"
            "def terms(out, ys):\n    return [criterion(out, y).item() for y in ys]\n")


def _project(tmp_path: Path) -> Path:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "losses.py").write_text(_losses("criterion(out, y)"))
    (package / "train.py").write_text(TRAIN)
    (package / "loads.py").write_text(LOADS)
    return package


def _run(root: Path, cache_dir: Path, settings: Settings | None = None):
    settings = settings or Settings()
    report = check_sources(discover_sources([str(root)], settings), settings, jobs=1,
                           cache=ResultCache(cache_dir, settings))
    return report, sorted((Path(f.path).name, f.line, f.code, f.message) for f in report.findings)


def test_a_warm_run_analyses_nothing_and_reports_the_same(tmp_path):
    package = _project(tmp_path)
    cold, cold_findings = _run(package, tmp_path / "cache")
    warm, warm_findings = _run(package, tmp_path / "cache")
    assert (cold.cached, warm.cached) == (0, 4)
    assert warm_findings == cold_findings
    assert {name for name, *_ in cold_findings} == {"train.py", "loads.py"}


def test_a_changed_file_alone_is_analysed_again(tmp_path):
    package = _project(tmp_path)
    _run(package, tmp_path / "cache")
    (package / "loads.py").write_text(
        LOADS + "model.load_state_dict(torch.load(path, map_location='cpu'))\n"
                "state = torch.load(path)\n")
    report, findings = _run(package, tmp_path / "cache")
    assert report.cached == 3
    assert [(name, line) for name, line, code, _ in findings if code == "MEM007"] == [
        ("loads.py", 4), ("loads.py", 7)]


def test_what_depends_on_a_changed_file_is_decided_again_with_its_facts(tmp_path):
    """train.py keeps what `compute_loss` returns: a graph while losses.py returns
    the loss, a float once it returns `.item()`. Only losses.py is re-analysed;
    train.py's finding, cached, is settled again with losses.py's new facts."""
    package = _project(tmp_path)
    _, before = _run(package, tmp_path / "cache")
    assert ("train.py", 7, "MEM003") in {(n, line, c) for n, line, c, _ in before}
    (package / "losses.py").write_text(_losses("criterion(out, y).item()"))
    report, after = _run(package, tmp_path / "cache")
    assert report.cached == 3
    assert "MEM003" not in {code for _, _, code, _ in after}
    (package / "losses.py").write_text(_losses("criterion(out, y)"))
    report, again = _run(package, tmp_path / "cache")  # one entry a file: analysed again
    assert (report.cached, again) == (3, before)


def test_a_corrupt_entry_is_ignored_and_written_again(tmp_path):
    package = _project(tmp_path)
    _, findings = _run(package, tmp_path / "cache")
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.name not in (".gitignore", "CACHEDIR.TAG")]
    assert len(entries) == 4
    for entry in entries:
        entry.write_bytes(b"not a pickle")
    report, again = _run(package, tmp_path / "cache")
    assert (report.cached, again) == (0, findings)
    report, _ = _run(package, tmp_path / "cache")
    assert report.cached == 4


def test_other_settings_are_another_cache(tmp_path):
    package = _project(tmp_path)
    _run(package, tmp_path / "cache")
    only_loads = Settings(select=("MEM007",))
    report, findings = _run(package, tmp_path / "cache", only_loads)
    assert report.cached == 0
    assert {code for _, _, code, _ in findings} == {"MEM007"}
    severe = Settings(severities={"MEM007": "error"})
    assert _run(package, tmp_path / "cache", severe)[0].cached == 0
    failing = Settings(fail_on="error")  # which findings fail the run changes no finding
    assert _run(package, tmp_path / "cache", failing)[0].cached == 4


def test_an_edited_memlint_is_another_cache(tmp_path, monkeypatch):
    code = tmp_path / "memlint_copy"
    code.mkdir()
    (code / "rule.py").write_text("x = 1\n")
    monkeypatch.setattr(cache_module, "_PACKAGE", code)
    before = cache_module._run_key(Settings())
    (code / "rule.py").write_text("x = 22\n")
    assert cache_module._run_key(Settings()) != before


def test_a_file_that_cannot_be_read_is_not_cached(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    package = _project(tmp_path)
    os.mkfifo(package / "pipe.py")
    for _ in range(2):
        report, findings = _run(package, tmp_path / "cache")
        assert ("pipe.py", 1, "MEM000") in {(n, line, c) for n, line, c, _ in findings}
    assert report.cached == 4


def test_library_calls_do_not_cache_unless_asked(tmp_path, monkeypatch):
    package = _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    check_paths([str(package)], jobs=1)
    assert not (tmp_path / CACHE_DIR_NAME).exists()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


def test_the_cli_caches_in_the_project_root_and_clean_removes_it(tmp_path):
    package = _project(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\nselect = ['MEM']\n")
    first = _cli("check", "pkg", cwd=tmp_path)
    cache_dir = tmp_path / CACHE_DIR_NAME
    assert (cache_dir / ".gitignore").read_text().splitlines()[-1] == "*"
    second = _cli("check", "pkg", cwd=tmp_path)
    assert (first.returncode, first.stdout) == (second.returncode, second.stdout)
    assert first.returncode == 1 and "MEM007" in first.stdout
    _cli("check", ".", cwd=package)  # from below: the same project root
    assert not (package / CACHE_DIR_NAME).exists()
    cleaned = _cli("clean", cwd=tmp_path)
    assert cleaned.returncode == 0 and "Removed" in cleaned.stdout
    assert not cache_dir.exists()
    assert "No memlint cache" in _cli("clean", cwd=tmp_path).stdout


def test_no_cache_reads_and_writes_nothing(tmp_path):
    _project(tmp_path)
    result = _cli("check", "--no-cache", "pkg", cwd=tmp_path)
    assert result.returncode == 1 and "MEM007" in result.stdout
    assert not (tmp_path / CACHE_DIR_NAME).exists()
    elsewhere = tmp_path / "elsewhere"
    _cli("check", "--cache-dir", str(elsewhere), "pkg", cwd=tmp_path)
    assert (elsewhere / ".gitignore").exists() and not (tmp_path / CACHE_DIR_NAME).exists()


def _imports_libcst(tmp_path, *args: str) -> bool:
    """Whether `memlint check ARGS` imported libcst, in its own process or in a
    worker (Python's import profile goes to the stderr they share)."""
    done = subprocess.run([sys.executable, "-m", "memlint", *args], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    return any(line.split("|")[-1].strip() == "libcst" for line in done.stderr.splitlines()
               if line.startswith("import time:"))


def test_libcst_is_imported_only_for_a_file_that_must_be_parsed(tmp_path):
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "setup.py").write_text("")  # a project of its own
    (tmp_path / "tool" / "plain.py").write_text("import os\nprint(os.getcwd())\n")
    (tmp_path / "train.py").write_text("import torch\nstate = torch.load('w.pt')\n"
                                       "model = torch.nn.Linear(2, 2).cuda()\n")
    # no rule's screen passes on any file of its project: each is checked by
    # CPython's parser alone
    assert not _imports_libcst(tmp_path, "check", "--no-cache", "tool/plain.py")
    # a file the rules want is parsed
    assert _imports_libcst(tmp_path, "check", "--no-cache", "train.py")
    # checked into a cache, then again from it (findings and all): no parse the second time
    assert _imports_libcst(tmp_path, "check", "train.py", "--cache-dir", ".c")
    assert not _imports_libcst(tmp_path, "check", "train.py", "--cache-dir", ".c")
