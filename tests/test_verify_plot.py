"""The `--plot` picture: drawn from a timeline here, or later from a saved one."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from memlint.verify.plot import _zoom_window, draw, main  # noqa: E402

MiB = 2**20
GROWING = [(5.0 + i / 10, 0, "exit", (100 + 4 * i) * MiB) for i in range(20)]
TIMELINE = {
    "samples": [(t / 10, (100 + (t >= 50) * 4 * (t - 50)) * MiB) for t in range(70)],
    "events": GROWING + [(0.3, 1, "exit", 0)],
}
LABELS = {0: "line 27 MEM003", 1: "line 15 MEM005"}


def test_draw_writes_a_png(tmp_path):
    out = tmp_path / "run.png"
    draw(TIMELINE, LABELS, str(out), "a training run")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_timeline_saved_on_the_gpu_machine_is_drawn_here(tmp_path):
    saved = tmp_path / "run.timeline.json"
    saved.write_text(json.dumps({"title": "t", "labels": {"0": LABELS[0]},
                                 "timeline": TIMELINE}))
    assert main([str(saved), str(tmp_path / "later.png")]) == 0
    assert (tmp_path / "later.png").stat().st_size > 1000


def test_zoom_only_when_the_flagged_lines_ran_in_a_short_stretch():
    assert _zoom_window([5.0, 5.5, 6.0], end=20.0) == pytest.approx((4.9, 6.1))
    assert _zoom_window([1.0, 15.0], end=20.0) is None
    assert _zoom_window([3.0], end=20.0) is None


def test_the_account_rows_add_up_and_name_the_finding_behind_the_workers():
    from memlint.verify.account import account_rows
    MiB = 2**20
    main = {"pid": 7, "context_bytes": 500 * MiB, "peak_reserved": 300 * MiB,
            "peak_allocated": 250 * MiB,
            "at_peak": {"t": 2.0, "nvml": 1000 * MiB, "reserved": 300 * MiB,
                        "allocated": 200 * MiB}}
    contexts = {"worker_context_bytes": {"8": 522 * MiB, "9": 522 * MiB, "10": 0},
                "foreign_bytes": 3 * 2**30}
    text = "\n".join(account_rows(main, contexts, {"MEM002": "data.py:31"}))
    assert "CUDA context              500.00 MiB" in text
    assert "other (libraries)         200.00 MiB" in text  # 1000 - 500 - 300
    assert "2 other processes of the run (DataLoader workers): 522.00 MiB each, " \
           "1.02 GiB in all -- MEM002 at data.py:31" in text
    assert "processes that are not the run's: 3.00 GiB" in text


def test_a_rank_that_holds_memory_on_a_gpu_not_its_own_is_shown():
    """The "every rank makes a context on GPU 0" problem, as the account says it."""
    from memlint.verify.account import account_rows
    MiB = 2**20
    main = {"pid": 11, "device": "cuda:1", "context_bytes": 518 * MiB, "peak_reserved": 0,
            "peak_allocated": 0,
            "at_peak": {"t": 1.0, "nvml": 518 * MiB, "reserved": 0, "allocated": 0}}
    contexts = {"devices_by_pid": {"11": {"cuda:0": 520 * MiB, "cuda:1": 518 * MiB}}}
    text = "\n".join(account_rows(main, contexts, {}, ranks=True))
    assert "also on cuda:0, not its own GPU: 520.00 MiB (a CUDA context, at least)" in text
    assert "also on cuda:1" not in text
