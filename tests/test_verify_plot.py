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
