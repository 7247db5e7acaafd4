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


def test_a_peak_the_samples_missed_is_the_allocators_and_the_parts_agree():
    """DCGAN under verify: NVML's 20 ms samples peaked at 1.06 GiB with 415.81 MiB
    allocated, while the allocator's own peak was 2.62 GiB: the account says the
    allocator's peak, and no part exceeds the whole."""
    from memlint.verify.account import account_rows, peak_parts
    main = {"pid": 7, "context_bytes": 518 * MiB, "peak_reserved": 2800 * MiB,
            "peak_allocated": 2683 * MiB,
            "at_peak": {"t": 9.0, "nvml": 1085 * MiB, "reserved": 456 * MiB,
                        "allocated": 416 * MiB}}
    parts = peak_parts(main)
    assert parts["allocated"] == 2683 * MiB <= parts["reserved"] == 2800 * MiB
    assert parts["other"] == (1085 - 518 - 456) * MiB
    assert parts["total"] == parts["context"] + parts["reserved"] + parts["other"]
    text = "\n".join(account_rows(main, None, {}))
    assert "at its peak 3.35 GiB (NVML's largest sample: 1.06 GiB" in text
    assert "PyTorch reserved            2.73 GiB   of which allocated 2.62 GiB" in text


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


def test_a_launched_run_is_drawn_one_line_per_gpu(tmp_path):
    from memlint.verify.plot import draw_gpus
    lines = {"cuda:0": [(0.0, 0), (1.0, 1100 * MiB), (2.0, 1100 * MiB)],
             "cuda:1": [(0.0, 0), (1.0, 0), (2.0, 520 * MiB)]}
    out = tmp_path / "gpus.png"
    draw_gpus(lines, str(out), "two ranks")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_memory_per_gpu_names_each_rank_and_what_it_holds_there():
    from memlint.verify.account import gpu_rows
    contexts = {"devices_by_pid": {"11": {"cuda:0": 600 * MiB},
                                   "12": {"cuda:0": 520 * MiB, "cuda:1": 700 * MiB}},
                "gpu_timeline": {"cuda:0": [(0.0, 0), (1.0, 1100 * MiB)],
                                 "cuda:1": [(0.0, 0), (1.0, 700 * MiB)]}}
    rows = gpu_rows(contexts, {"11": 0, "12": 1})
    assert rows == [
        "  cuda:0: 1.07 GiB at most together -- rank 0 (pid 11) 600.00 MiB, "
        "rank 1 (pid 12) 520.00 MiB",
        "  cuda:1: 700.00 MiB at most together -- rank 1 (pid 12) 700.00 MiB"]


def test_without_a_timeline_the_processes_peaks_are_added_ranks_first():
    from memlint.verify.account import gpu_rows
    contexts = {"devices_by_pid": {"11": {"cuda:0": 600 * MiB}, "7": {"cuda:0": 100 * MiB}}}
    assert gpu_rows(contexts, {"11": 0}) == [
        "  cuda:0: 700.00 MiB at most together -- rank 0 (pid 11) 600.00 MiB, pid 7 100.00 MiB"]


def test_the_watch_keeps_one_line_per_gpu_the_run_touched():
    from memlint.verify.processes import ContextWatcher
    watcher = ContextWatcher()
    watcher.session_pids = {11, 12}
    for sample in ({(11, 0): 500 * MiB, (99, 2): MiB},
                   {(11, 0): 600 * MiB, (12, 0): 520 * MiB, (12, 1): 700 * MiB}):
        watcher._last_sample = sample
        watcher._note_gpus()
    lines = watcher._gpu_lines()
    assert sorted(lines) == ["cuda:0", "cuda:1"]  # GPU 2 held only another program's memory
    assert [b for _, b in lines["cuda:0"]] == [500 * MiB, 1120 * MiB]
    assert [b for _, b in lines["cuda:1"]] == [0, 700 * MiB]


def test_a_launch_without_findings_still_reports_each_rank_and_each_gpu():
    """`memlint verify --nproc-per-node 2 train.py` on a clean script: the
    account is the report."""
    from memlint.verify.report import format_text
    from memlint.verify.runner import ScriptRun
    shared = {"devices_by_pid": {"11": {"cuda:0": 600 * MiB}, "12": {"cuda:1": 610 * MiB}}}
    ranks = [ScriptRun(f"train.py [rank {r}]", [], {"exit": "completed"}, 3.0,
                       raw={"rank": r, "pid": 11 + r, "contexts": shared, "account": {
                           "pid": 11 + r, "device": f"cuda:{r}", "context_bytes": 500 * MiB,
                           "peak_reserved": 90 * MiB, "peak_allocated": 80 * MiB,
                           "at_peak": {"t": 2.0, "nvml": (600 + 10 * r) * MiB,
                                       "reserved": 90 * MiB, "allocated": 80 * MiB}}})
             for r in (0, 1)]
    lines = format_text(ranks, []).splitlines()
    assert lines[0] == "train.py [rank 0]: ran to the end after 3.0 s"
    per_gpu = lines.index("the 2 ranks' memory per GPU (NVML, per process):")
    assert per_gpu > lines.index("train.py [rank 1]: ran to the end after 3.0 s")
    assert lines[per_gpu + 1:per_gpu + 3] == [
        "  cuda:0: 600.00 MiB at most together -- rank 0 (pid 11) 600.00 MiB",
        "  cuda:1: 610.00 MiB at most together -- rank 1 (pid 12) 610.00 MiB"]
    assert lines[-1] == "no findings to measure; the memory account of 2 runs is above"


def test_the_context_is_the_figure_once_made_not_a_sample_caught_half_way():
    """NVML saw 14 MiB while the context was being made, then 610 MiB, before
    the first reserve; a lagging sample later must not lower it either."""
    from memlint.verify.account import AccountSampler
    sampler = AccountSampler.__new__(AccountSampler)
    sampler.device = "cuda:0"
    sampler.samples = [(0.00, 14 * MiB, 0, 0), (0.02, 610 * MiB, 0, 0),
                       (0.04, 620 * MiB, 512 * MiB, 500 * MiB),  # NVML behind the reserve
                       (0.06, 1200 * MiB, 512 * MiB, 500 * MiB)]
    summary = sampler.summary()
    assert summary["context_bytes"] == 610 * MiB
    assert summary["at_peak"]["nvml"] == 1200 * MiB


def test_a_rank_with_nothing_on_its_own_gpu_is_still_named_with_where_it_went():
    from memlint.verify.account import account_rows
    contexts = {"devices_by_pid": {"12": {"cuda:0": 676 * MiB}, "11": {"cuda:0": 676 * MiB}},
                "worker_context_bytes": {"11": 676 * MiB, "12": 676 * MiB}}
    rows = account_rows(None, contexts, {}, ranks=True, pid=12, device="cuda:1")
    assert rows == [
        "  main process (pid 12): nothing on its own GPU, cuda:1",
        "    also on cuda:0, not its own GPU: 676.00 MiB (a CUDA context, at least)",
        "  1 other process of the run (the other ranks, their DataLoader workers): "
        "676.00 MiB each, 676.00 MiB in all"]


def test_a_context_seen_only_half_made_is_said_to_be_a_lower_bound():
    from memlint.verify.account import AccountSampler, account_rows
    sampler = AccountSampler.__new__(AccountSampler)
    sampler.device = "cuda:0"
    sampler.samples = [(0.00, 104 * MiB, 0, 0), (0.02, 676 * MiB, 66 * MiB, 64 * MiB)]
    summary = sampler.summary()
    assert summary["context_bytes"] == 104 * MiB and summary["context_settled"] is False
    text = "\n".join(account_rows(summary, None, {}))
    assert "CUDA context              104.00 MiB   at least" in text


def test_a_gpu_a_rank_selected_and_left_empty_is_listed():
    from memlint.verify.account import gpu_rows
    contexts = {"devices_by_pid": {"11": {"cuda:0": 676 * MiB}, "12": {"cuda:0": 676 * MiB}}}
    rows = gpu_rows(contexts, {"11": 0, "12": 1}, {"11": "cuda:0", "12": "cuda:1"})
    assert rows == [
        "  cuda:0: 1.32 GiB at most together -- rank 0 (pid 11) 676.00 MiB, "
        "rank 1 (pid 12) 676.00 MiB",
        "  cuda:1: nothing from the run, though rank 1 (pid 12) selected it"]
