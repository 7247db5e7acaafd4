"""`memlint verify` on a real GPU: the probe programs and the fixtures.
Skipped where there is no CUDA device (CI); run on the GPU machine with
`python -m pytest -m gpu tests/`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from memlint.verify.judges import CONFIRMED, NOT_CONFIRMED  # noqa: E402
from memlint.verify.runner import Options, verify_script  # noqa: E402
from tests.expectations import FIXTURES  # noqa: E402
from tests.verify_helpers import DATA, probe_findings  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device; torch sees none here")]
MiB = 2**20


def verify(name, *args):
    path = str(DATA / name)
    run = verify_script(path, probe_findings(path), Options(args=list(args), timeout=120))
    return {v.finding.line: v.judgement for v in run.verified}


def test_whole_array_on_the_device():
    verdicts = verify("gpu_whole_dataset.py")
    assert verdicts[8].verdict == CONFIRMED and verdicts[8].numbers["live_bytes_at_end"] >= 64 * MiB
    assert verdicts[9].verdict == NOT_CONFIRMED
    assert verdicts[10].verdict == CONFIRMED
    assert "freed within the statement" in verdicts[10].measured


def test_cuda_in_spawned_workers_costs_a_context_each():
    verdict = verify("gpu_worker_cuda.py", "spawn")[14]
    assert verdict.verdict == CONFIRMED and verdict.numbers["worker_contexts"] == 2


def test_cuda_in_forked_workers_fails():
    verdict = verify("gpu_worker_cuda.py", "fork")[14]
    assert verdict.verdict == CONFIRMED and "forked subprocess" in verdict.measured


def test_training_program():
    verdicts = verify("gpu_training.py", "30")
    assert verdicts[15].verdict == CONFIRMED  # pinned copies faster
    assert verdicts[27].verdict == CONFIRMED  # outputs kept with their graphs
    assert verdicts[29].verdict == CONFIRMED  # eval forward with autograd on


#: the script run plainly, its allocator peaks printed at the end
_PLAIN_PEAKS = ("import runpy, sys, torch; sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__'); "
                "print('PEAKS', torch.cuda.max_memory_allocated(), "
                "torch.cuda.max_memory_reserved())")


@pytest.mark.parametrize("name, args", [
    ("gpu_pageable_loader.py", ()), ("gpu_training.py", ("30",)),
    ("gpu_whole_dataset.py", ()), ("gpu_predictions_kept.py", ())])
def test_probes_leave_the_peaks_they_measure_as_they_are(name, args):
    """Issue 28: a probe must not keep or copy what it looks at."""
    path = str(DATA / name)
    plain = subprocess.run([sys.executable, "-c", _PLAIN_PEAKS, path, *args],
                           capture_output=True, text=True, timeout=300, check=True)
    allocated, reserved = (int(n) for n in plain.stdout.split("PEAKS")[1].split())
    run = verify_script(path, probe_findings(path), Options(args=list(args), timeout=180))
    assert run.outcome == {"exit": "completed"}, run.log_tail
    assert abs(run.raw["peak_allocated"] - allocated) <= MiB, (run.raw["peak_allocated"], allocated)
    assert abs(run.raw["peak_reserved"] - reserved) <= MiB, (run.raw["peak_reserved"], reserved)


def test_verify_fixtures_confirms_findings_and_exits_1():
    done = subprocess.run([sys.executable, "-m", "memlint.verify.cli", str(FIXTURES),
                           "--format", "json", "--timeout", "60"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]
    scripts = json.loads(done.stdout)["scripts"]
    verdicts = [f["verdict"] for s in scripts for f in s["findings"]]
    assert verdicts.count(CONFIRMED) >= 10
    assert "error" not in verdicts


def test_a_run_that_dies_of_out_of_memory_keeps_its_verdicts():
    path = str(DATA / "gpu_oom.py")
    run = verify_script(path, probe_findings(path), Options(timeout=120))
    assert run.outcome["exit"] == "exception" and run.outcome["error"]["out_of_memory"]
    verdict = run.verified[0].judgement
    assert verdict.verdict == CONFIRMED and verdict.numbers["allocated_delta_max"] == 64 * MiB


def test_a_run_stuck_in_a_dataloader_keeps_its_verdicts_and_says_where():
    path = str(DATA / "gpu_stuck_loader.py")
    run = verify_script(path, probe_findings(path), Options(timeout=20))
    assert run.timed_out
    verdict = run.verified[0].judgement
    assert verdict.verdict == CONFIRMED and verdict.numbers["allocated_delta_max"] == 64 * MiB
    assert run.stuck and run.stopped_at is not None \
        and run.stopped_at.startswith("gpu_stuck_loader.py:22")


def test_each_rank_of_a_torchrun_job_is_measured_on_its_gpu():
    from memlint.verify.runner import verify_ranks
    path = str(DATA / "gpu_ddp_gloo.py")
    runs = verify_ranks(path, probe_findings(path), Options(timeout=180, nproc_per_node=2))
    assert all(run.outcome == {"exit": "completed"} for run in runs), runs[0].log_tail
    verdicts = [run.verified[0].judgement for run in runs]
    assert [v.verdict for v in verdicts] == [CONFIRMED, CONFIRMED]
    assert [v.numbers["created_bytes_max"] for v in verdicts] == [16 * MiB, 32 * MiB]


def test_predictions_kept_on_the_device_grow_by_one_batch_each():
    verdicts = verify("gpu_predictions_kept.py", "20")
    kept = verdicts[18]
    assert kept.verdict == CONFIRMED
    batch = 1000 * 2048 * 4  # one batch of float32 logits
    assert abs(kept.numbers["per_execution_bytes"] - batch) <= batch * 0.01
    assert kept.numbers["kept_on_device_bytes"] >= 19 * batch
    assert verdicts[19].verdict == NOT_CONFIRMED  # the host copies keep nothing on the device


def test_hooks_that_keep_activations_grow_by_one_output_per_forward():
    from memlint import check_paths
    path = str(FIXTURES / "hook_keeps_activations" / "feature_hooks.py")
    findings = [f for f in check_paths([path], jobs=1).findings if f.code == "MEM009"]
    run = verify_script(path, findings, Options(timeout=120))
    verdicts = {v.finding.line: v.judgement for v in run.verified}
    output = 256 * 4096 * 4  # one forward's activation, float32
    for line in (19, 26):
        assert verdicts[line].verdict == CONFIRMED
        assert abs(verdicts[line].numbers["per_execution_bytes"] - output) <= output * 0.01


def test_a_rank_that_lands_on_gpu_0_is_confirmed_and_rank_0_is_not():
    """MEM008 under torchrun: rank 1 selects cuda:1 (LOCAL_RANK) and its
    `.cuda()` creates a context on cuda:0; rank 0's default is its own. On a
    one-GPU machine cuda:1 does not exist, and the verdict says so."""
    from memlint import check_paths
    from memlint.verify.runner import verify_ranks
    path = str(FIXTURES / "implicit_default_gpu" / "rank_never_used.py")
    findings = [f for f in check_paths([path], jobs=1).findings if f.code == "MEM008"]
    runs = verify_ranks(path, findings, Options(timeout=180, nproc_per_node=2))
    assert all(run.outcome == {"exit": "completed"} for run in runs), runs[0].log_tail
    rank0, rank1 = (run.verified[0].judgement for run in runs)
    assert rank0.verdict == NOT_CONFIRMED and rank0.numbers["selected"] == "cuda:0"
    assert rank1.verdict == CONFIRMED and rank1.numbers["selected"] == "cuda:1"
    assert rank1.numbers["new_contexts"] == ["cuda:0"]
    assert rank1.numbers["allocated_delta_max"]["cuda:0"] >= 64 * MiB


def test_a_launch_shows_what_each_rank_holds_on_each_gpu():
    """With two GPUs, the process watch puts rank 1's stray context on cuda:0
    beside rank 0's own memory there, and rank 1 holds nothing on cuda:1 (the
    GPU it selected and never used): one line, cuda:0, in the picture."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from memlint.verify.runner import verify_ranks
    path = str(FIXTURES / "implicit_default_gpu" / "rank_never_used.py")
    runs = verify_ranks(path, [], Options(timeout=180, nproc_per_node=2))
    assert all(run.outcome == {"exit": "completed"} for run in runs), runs[0].log_tail
    contexts = runs[0].raw["contexts"]
    rank0, rank1 = (str(run.raw["pid"]) for run in runs)
    assert sorted(contexts["gpu_timeline"]) == ["cuda:0"]
    assert contexts["devices_by_pid"][rank1]["cuda:0"] >= 256 * MiB  # a context at least
    assert sorted(contexts["devices_by_pid"][rank1]) == ["cuda:0"]
    assert sorted(contexts["devices_by_pid"][rank0]) == ["cuda:0"]
    together = max(b for _, b in contexts["gpu_timeline"]["cuda:0"])
    assert together >= contexts["devices_by_pid"][rank0]["cuda:0"] + 256 * MiB


@pytest.mark.parametrize("name, args", [
    ("gpu_training.py", ("30",)), ("gpu_whole_dataset.py", ()),
    ("gpu_predictions_kept.py", ()),
    ("gpu_peak_later_window.py", ())])
def test_the_peak_is_explained_by_parts_that_add_up_to_it(name, args):
    """Issue 28: the reserved peak broken into its parts, from the allocator's
    history; the parts sum to the allocator's own peak within 2 %."""
    from memlint.verify.peak import CACHE, PARAMETERS, check_sum

    path = str(DATA / name)
    run = verify_script(path, probe_findings(path), Options(args=list(args), timeout=180,
                                                            explain_peak=True))
    explained = run.raw["peak"]
    assert explained and "parts" in explained, explained
    assert check_sum(explained, run.raw["peak_reserved"]), (explained, run.raw["peak_reserved"])
    assert explained["parts"][CACHE] >= 0
    if name == "gpu_training.py":
        assert explained["parts"][PARAMETERS] >= 60 * MiB  # 3*64*64*2048 + 2048*2048 floats
    held = {run.verified[int(fid)].finding.line: size
            for fid, size in explained["findings"].items()}
    if name == "gpu_whole_dataset.py":  # line 8 keeps a 64 MiB array on the device
        assert held[8] >= 64 * MiB
    if name == "gpu_peak_later_window.py":  # made in the first window, live at the peak
        assert explained["windows"] >= 2, explained
        assert held[22] >= 64 * MiB, explained
