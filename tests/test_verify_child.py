"""The whole probe pipeline on the CPU: the child runs a script as __main__
with its arguments, probes measure the flagged lines, errors keep their
line, and a timeout ends the child's whole process group."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from memlint.verify.judges import CONFIRMED, NOT_CONFIRMED, NOT_REACHED  # noqa: E402
from memlint.verify.processes import wait_until_gone  # noqa: E402
from memlint.verify.runner import Options, verify_script  # noqa: E402
from tests.verify_helpers import DATA, probe_findings  # noqa: E402


def verify_on_cpu(name, args=(), timeout=120.0):
    path = str(DATA / name)
    return verify_script(path, probe_findings(path),
                         Options(args=list(args), device="cpu", timeout=timeout))


@pytest.fixture(scope="module")
def cpu_probes():
    return verify_on_cpu("cpu_probes.py", ["7"])


def by_line(run):
    return {v.finding.line: v for v in run.verified}


def test_the_script_runs_as_main_with_its_arguments(cpu_probes):
    assert cpu_probes.outcome == {"exit": "completed"}
    assert "done 4" in cpu_probes.log_tail
    assert by_line(cpu_probes)[31].judgement.numbers["hits"] == 7  # argv[1] == "7"


def test_each_rule_meter_reports_on_its_line(cpu_probes):
    lines = by_line(cpu_probes)
    assert lines[18].judgement.numbers["activation_bytes_max"] == 2 * 64 * 256 * 4
    assert lines[18].judgement.verdict == NOT_CONFIRMED  # 128 KiB < 1 MiB
    assert "too small to confirm" in lines[18].judgement.measured
    assert lines[23].judgement.numbers["grad_enabled"] is False
    assert lines[40].judgement.verdict == CONFIRMED
    weights = (256 * 256 + 256 + 10 * 256 + 10) * 4  # the two Linear layers, float32
    assert lines[43].judgement.numbers["loads"] == [{"cpu": weights}]
    assert lines[45].judgement.verdict == NOT_REACHED


def test_min_bytes_decides_the_verdict():
    path = str(DATA / "cpu_probes.py")
    run = verify_script(path, probe_findings(path)[:1],
                        Options(device="cpu", min_bytes=64 * 1024))
    assert run.verified[0].judgement.verdict == CONFIRMED


def test_an_error_is_reported_with_the_original_line():
    run = verify_on_cpu("raises.py")
    assert run.outcome["exit"] == "exception"
    assert run.outcome["error"]["line"] == 9
    assert "invalid for input of size 4" in run.outcome["error"]["message"]
    assert run.verified[0].judgement.numbers["hits"] == 1


def listing(folder):
    return {entry.name: entry.stat().st_mtime_ns for entry in os.scandir(folder)}


def test_a_loader_built_through_an_alias_is_measured_and_still_works():
    before = listing(DATA)
    run = verify_on_cpu("dataloader_copies.py")
    assert listing(DATA) == before  # verify never writes to the user's files
    assert "batches of DataLoader rows 64" in run.log_tail
    assert run.raw["measurements"]["0"]["batches"][0]["bytes"] == 16 * 32 * 4 + 16 * 8
    assert run.verified[0].judgement.measured == "no copy was timed: no CUDA device"


def test_a_run_that_ignores_sigterm_keeps_its_measurements_and_says_where_it_hung(
        monkeypatch):
    """The program takes SIGTERM over and hangs: no result at the end, so the
    verdicts come from the snapshots the child wrote as it measured."""
    from memlint.verify import processes

    monkeypatch.setattr(processes, "GRACE_SECONDS", 1.0)
    path = str(DATA / "ignores_sigterm.py")
    run = verify_script(path, probe_findings(path),
                        Options(device="cpu", timeout=8, min_bytes=1024))
    assert run.timed_out and run.outcome == {"exit": "timeout"} and run.raw["partial"]
    verdict = run.verified[0].judgement
    assert verdict.verdict == CONFIRMED and verdict.numbers["hits"] == 5
    assert (run.stopped_at, run.stuck) == ("ignores_sigterm.py:19 in wait_for_data", True)


def test_a_run_still_computing_at_the_timeout_is_running_not_stuck():
    from memlint.verify.report import format_text

    path = str(DATA / "busy_at_timeout.py")
    run = verify_script(path, probe_findings(path),
                        Options(device="cpu", timeout=8, min_bytes=1024))
    assert run.timed_out and not run.stuck
    assert run.stopped_at is not None and run.stopped_at.startswith("busy_at_timeout.py:1")
    assert f"running at {run.stopped_at} when the timeout hit" in format_text([run], [])


def test_a_killed_run_keeps_what_it_measured():
    path = str(DATA / "killed.py")
    run = verify_script(path, probe_findings(path),
                        Options(device="cpu", timeout=60, min_bytes=1024))
    assert run.outcome == {"exit": "died", "status": -9} and not run.timed_out
    assert run.verified[0].judgement.numbers["hits"] == 5


def test_timeout_kills_the_whole_process_group_and_keeps_the_measurements(tmp_path):
    pid_file = tmp_path / "worker.pid"
    run = verify_on_cpu("sleeps_with_worker.py", [str(pid_file)], timeout=12)
    assert run.timed_out
    assert run.outcome == {"exit": "timeout"}  # the child wrote its results on SIGTERM
    assert run.verified[0].judgement.numbers["hits"] > 0
    assert (run.stopped_at, run.stuck) == ("sleeps_with_worker.py:21 in <module>", True)
    worker = int(pid_file.read_text())
    assert wait_until_gone([worker]), f"worker {worker} outlived the timeout"


def test_errors_raised_at_the_line_in_forked_workers_are_seen_per_line():
    run = verify_on_cpu("worker_raises.py")
    assert run.outcome == {"exit": "completed"}  # the script caught the loader's error
    assert "caught:" in run.log_tail
    [verified] = run.verified
    assert verified.judgement.verdict == CONFIRMED
    assert verified.judgement.numbers["worker_errors"] >= 1
    assert "in DataLoader workers" in verified.judgement.measured


def test_a_loss_kept_after_backward_is_confirmed_by_the_graph_it_keeps_on_the_host():
    """backward() freed what the graph saved (no device growth, and none at all
    on the CPU), but every kept loss still holds its 7 nodes (two Linear
    layers, ReLU, pow, mean); the same loss kept as a number holds none."""
    run = verify_on_cpu("history_after_backward.py")
    kept, number = by_line(run)[12].judgement, by_line(run)[13].judgement
    assert kept.verdict == CONFIRMED and kept.numbers["graph_nodes_per_execution"] == 7
    assert "autograd graph nodes kept alive per iteration on the host" in kept.measured
    assert number.verdict == NOT_CONFIRMED and number.numbers["graph_nodes_per_execution"] == 0


def test_one_rank_asked_for_runs_under_torchrun_too():
    """`--nproc-per-node 1`: a script that reads RANK finds it (torchrun sets it),
    where a plain run would die."""
    from memlint.verify.runner import verify_ranks
    path = str(DATA / "reads_rank.py")
    runs = verify_ranks(path, probe_findings(path),
                        Options(device="cpu", timeout=120, min_bytes=1024, nproc_per_node=1))
    assert [run.path for run in runs] == [f"{path} [rank 0]"]
    assert runs[0].outcome == {"exit": "completed"}, runs[0].log_tail
    assert runs[0].verified[0].judgement.numbers["created_bytes_max"] == 1024 * 256 * 4


def test_ranks_under_torchrun_are_each_measured_and_reported():
    """`--nproc-per-node 2`: torchrun starts one child per rank; each writes
    its own result and is judged on its own measurements."""
    from memlint.verify.runner import verify_ranks
    path = str(DATA / "ddp_gloo.py")
    runs = verify_ranks(path, probe_findings(path),
                        Options(device="cpu", timeout=120, min_bytes=1024, nproc_per_node=2))
    assert [run.path for run in runs] == [f"{path} [rank 0]", f"{path} [rank 1]"]
    assert all(run.outcome == {"exit": "completed"} for run in runs), runs[0].log_tail
    sizes = [run.verified[0].judgement.numbers["created_bytes_max"] for run in runs]
    assert sizes == [1024 * 256 * 4, 2 * 1024 * 256 * 4]
