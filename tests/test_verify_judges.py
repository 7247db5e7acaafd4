"""The judges, on measurements recorded from real GPU runs (an H200, torch
2.11: tests/data/verify/recorded/) and on hand-made edge cases."""

from __future__ import annotations

import json

import pytest

from memlint.finding import Finding
from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, RunFacts,
                                   human_bytes, judge)
from memlint.verify.runner import judge_run
from tests.verify_helpers import DATA

RECORDED = json.loads((DATA / "recorded" / "programs_h200.json").read_text())
MiB = 2**20


def recording(program, args=()):
    for item in RECORDED:
        if item["program"] == program and item["args"] == list(args):
            return item
    raise LookupError(program)


def rejudge(item, min_bytes=MiB):
    findings = [Finding(**f) for f in item["findings"]]
    return {v.finding.line: v.judgement for v in
            judge_run(item["raw"], findings, min_bytes, "cuda:0")}


def test_recorded_verdicts_are_reproduced():
    for item in RECORDED:
        verdicts = rejudge(item)
        assert {v["line"]: v["verdict"] for v in item["verdicts"]} == \
            {line: j.verdict for line, j in verdicts.items()}, item["program"]


def test_whole_array_on_the_gpu_is_confirmed_and_a_constant_is_not():
    verdicts = rejudge(recording("gpu_whole_dataset.py"))
    assert verdicts[8].verdict == CONFIRMED
    assert verdicts[8].measured == "put 64.00 MiB on cuda:0, still live at exit"
    assert verdicts[9].verdict == NOT_CONFIRMED and "too small" in verdicts[9].measured


def test_a_transient_whole_copy_counts_by_the_bytes_it_created():
    verdicts = rejudge(recording("gpu_whole_dataset.py"))
    assert verdicts[10].verdict == CONFIRMED and "freed within the statement" in \
        verdicts[10].measured


def test_worker_contexts_under_spawn_and_the_fork_error():
    spawn = rejudge(recording("gpu_worker_cuda.py", ["spawn"]))[14]
    assert spawn.verdict == CONFIRMED
    assert spawn.numbers["worker_contexts"] == 2
    assert all(500 * MiB < size < 800 * MiB for size in spawn.numbers[
        "worker_context_bytes"].values())
    fork = rejudge(recording("gpu_worker_cuda.py", ["fork"]))[14]
    assert fork.verdict == CONFIRMED and "forked subprocess" in fork.measured
    assert fork.numbers["worker_errors"] >= 1  # seen at the line, in the workers


def test_training_program_growth_saved_activations_and_pinned_copies():
    verdicts = rejudge(recording("gpu_training.py", ["40"]))
    assert verdicts[27].verdict == CONFIRMED
    assert 3.5 * MiB < verdicts[27].numbers["per_execution_bytes"] < 4.5 * MiB
    assert verdicts[29].verdict == CONFIRMED
    assert verdicts[29].numbers["activation_bytes_max"] > 3 * MiB  # at least the input batch
    assert verdicts[15].verdict == CONFIRMED and verdicts[15].numbers["speedup"] >= 1.2


def test_a_higher_threshold_turns_byte_findings_into_not_confirmed():
    verdicts = rejudge(recording("gpu_training.py", ["40"]), min_bytes=2**30)
    assert verdicts[27].verdict == NOT_CONFIRMED
    assert verdicts[29].verdict == NOT_CONFIRMED
    assert verdicts[15].verdict == CONFIRMED  # a copy rate does not depend on --min-bytes


def facts(**kwargs):
    return RunFacts(min_bytes=MiB, device="cuda:0", **kwargs)


def test_growth_that_comes_and_goes_is_not_steady():
    saw_tooth = [0, 0, 3 * MiB, 0, 3 * MiB, 0, 3 * MiB, 6 * MiB]
    result = judge("MEM003", {"hits": 8, "allocated_after": saw_tooth}, facts())
    assert result.verdict == NOT_CONFIRMED and "not steadily" in result.measured
    steady = [i * 2 * MiB for i in range(8)]
    result = judge("MEM003", {"hits": 8, "allocated_after": steady}, facts())
    assert result.verdict == CONFIRMED
    assert result.measured == "+2.00 MiB retained per iteration over 6 iterations " \
                              "(12.00 MiB in all)"


def test_pinned_copies_that_are_not_faster_do_not_confirm():
    batch = {"bytes": 4096, "pageable_seconds": 1e-5, "pinned_seconds": 1e-5}
    result = judge("MEM005", {"hits": 1, "batches": [batch], "loaders": 1}, facts())
    assert result.verdict == NOT_CONFIRMED and "1.0x" in result.measured


def test_grad_mode_that_changed_is_not_confirmed():
    mode = {"grad_before": True, "grad_after": False, "inference_before": False,
            "inference_after": False}
    assert judge("MEM006", {"hits": 1, "modes": [mode]}, facts()).verdict == NOT_CONFIRMED


def test_mem002_in_the_main_process_only_is_not_confirmed():
    result = judge("MEM002", {"hits": 5}, facts(contexts={"worker_context_bytes": {}}))
    assert result.verdict == NOT_CONFIRMED and "main process" in result.measured
    assert judge("MEM002", {"hits": 0}, facts()).verdict == NOT_REACHED


def test_loads_that_stay_on_the_cpu_are_not_confirmed():
    result = judge("MEM007", {"hits": 1, "loads": [{"cpu": 4096}]}, facts())
    assert result.verdict == NOT_CONFIRMED and "cpu" in result.measured


def test_an_out_of_memory_error_at_the_line_confirms_it():
    raw = {"outcome": {"exit": "exception", "error": {
        "type": "OutOfMemoryError", "line": 12, "out_of_memory": True,
        "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB"}},
        "statements": [{"key": 0, "line": 12, "end_line": 12, "kind": "Assign",
                        "findings": [0]}],
        "unprobed": {}, "measurements": {"0": {"hits": 1, "allocated_delta": [0]}}}
    finding = Finding("t.py", 12, 5, "MEM001", 12, 40, "whole-dataset-to-device", "m")
    [verified] = judge_run(raw, [finding], MiB, "cuda:0")
    assert verified.judgement.verdict == CONFIRMED
    assert "out of CUDA memory at this line" in verified.judgement.measured


@pytest.mark.parametrize("size, text", [(512, "512 B"), (1536, "1.50 KiB"),
                                        (64 * MiB, "64.00 MiB"), (3.81 * 2**30, "3.81 GiB")])
def test_human_bytes(size, text):
    assert human_bytes(size) == text


def test_fork_errors_raised_at_the_line_in_workers_confirm_mem002():
    error = "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with " \
            "multiprocessing, you must use the 'spawn' start method"
    result = judge("MEM002", {"hits": 0}, facts(worker_hits=4, worker_errors=[error] * 4))
    assert result.verdict == CONFIRMED and "4 times in DataLoader workers" in result.measured
    other = judge("MEM002", {"hits": 0}, facts(worker_hits=4, worker_errors=["ValueError: x"]))
    assert other.verdict == NOT_CONFIRMED


def test_recorded_fixture_run_confirms_every_rule_somewhere():
    """The committed `memlint verify fixtures/` run (fixtures/VERIFY.md's source)."""
    scripts = json.loads((DATA / "recorded" / "fixtures_h200.json").read_text())["scripts"]
    confirmed = {f["code"] for s in scripts for f in s["findings"] if f["verdict"] == CONFIRMED}
    assert confirmed == {f"MEM00{i}" for i in range(1, 8)}
    assert all(f["verdict"] != "error" for s in scripts for f in s["findings"])


def test_outputs_kept_on_the_device_are_confirmed_by_the_container_growth():
    kept = [i * 2 * MiB for i in range(1, 21)]  # the list grows by one 2 MiB batch each time
    record = {"hits": 20, "kept_on_device_after": kept,
              "allocated_after": [10 * MiB + k for k in kept]}
    result = judge("MEM010", record, facts())
    assert result.verdict == CONFIRMED
    assert result.measured.startswith("+2.00 MiB kept on the device per iteration "
                                      "(40.00 MiB held after 20 iterations; the device's "
                                      "allocation grew 38.00 MiB over 20 iterations)")
    assert result.numbers["per_execution_bytes"] == 2 * MiB


def test_a_container_that_does_not_grow_on_the_device_is_not_confirmed():
    host = {"hits": 20, "kept_on_device_after": [0] * 20, "allocated_after": [MiB] * 20}
    assert judge("MEM010", host, facts()).verdict == NOT_CONFIRMED
    tiny = {"hits": 20, "kept_on_device_after": [i * 64 for i in range(20)]}
    result = judge("MEM010", tiny, facts())
    assert result.verdict == NOT_CONFIRMED and "too small to confirm" in result.measured


def test_without_a_readable_container_the_allocated_growth_decides():
    steady = [i * 2 * MiB for i in range(8)]
    result = judge("MEM010", {"hits": 8, "allocated_after": steady}, facts())
    assert result.verdict == CONFIRMED and "retained per iteration" in result.measured


def _default_device_record(selected, samples, device_count=2):
    return {"hits": len(samples), "selected": selected, "samples": samples,
            "device_count": device_count}


def test_mem008_confirmed_when_a_rank_lands_on_another_gpu():
    sample = {"new_contexts": ["cuda:0"], "allocated_delta": {"cuda:0": 64 * 2**20},
              "current_device": "cuda:0"}
    result = judge("MEM008", _default_device_record("cuda:1", [sample]), facts())
    assert result.verdict == CONFIRMED
    assert "selected cuda:1" in result.measured and "64.00 MiB on cuda:0" in result.measured
    assert result.numbers["new_contexts"] == ["cuda:0"]


def test_mem008_a_missing_selected_gpu_is_said():
    sample = {"new_contexts": ["cuda:0"], "allocated_delta": {}, "current_device": "cuda:0"}
    result = judge("MEM008", _default_device_record("cuda:1", [sample], device_count=1), facts())
    assert result.verdict == CONFIRMED and "does not have" in result.measured


def test_mem008_not_confirmed_on_the_selected_gpu_or_without_a_rank():
    own = {"new_contexts": ["cuda:0"], "allocated_delta": {"cuda:0": 64 * 2**20},
           "current_device": "cuda:0"}
    assert judge("MEM008", _default_device_record("cuda:0", [own]), facts()).verdict \
        == NOT_CONFIRMED
    unranked = judge("MEM008", _default_device_record(None, [own]), facts())
    assert unranked.verdict == NOT_CONFIRMED and "--nproc-per-node" in unranked.measured
    # bytes elsewhere below --min-bytes, no new context there: too small
    small = {"new_contexts": [], "allocated_delta": {"cuda:0": 512}, "current_device": "cuda:0"}
    assert judge("MEM008", _default_device_record("cuda:1", [small]), facts()).verdict \
        == NOT_CONFIRMED
