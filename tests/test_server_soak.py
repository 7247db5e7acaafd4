"""The editor server through a long typing session (issue 29), with the
benchmark's own driver (`bench/server_soak.py`): a burst of 100 keystrokes
is an analysis of its last version (two where the machine stalls the typist
past the debounce), never one per keystroke; the diagnostics of that version
arrive, and no process
outlives the server. How fast is the benchmark's to say (`bench/README.md`),
not a test's."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the server's extra is not installed")

ROOT = Path(__file__).resolve().parent.parent


def _driver():
    spec = importlib.util.spec_from_file_location("server_soak", ROOT / "bench" / "server_soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("server_soak", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_burst_is_analysed_at_its_last_version_and_nothing_is_left():
    soak = _driver()
    text = soak.big_source(100 * 1024)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "pyproject.toml").write_text("[tool.memlint]\n")
        (Path(folder) / "train.py").write_text(text, encoding="utf-8")
        result = asyncio.run(soak.soak(Path(folder), text, edits=300, bursts=3))
    assert result["diagnostics_first_open"] > 0
    assert len(result["last_version_latency_s"]) == 3  # each burst's last version shown
    assert result["analyses"] <= 6  # not one per keystroke
    assert result["orphaned_processes"] == []
