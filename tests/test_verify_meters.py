"""The meters on CPU tensors: saved-tensor bytes, the return catcher behind
MEM005/MEM007, the tensors a statement creates, grad mode."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from memlint.verify.meters import (  # noqa: E402
    DeviceBytesMeter, Device, GradModeMeter, KeptOnDeviceMeter, LoadedDevicesMeter, LoaderCopyMeter,
    ReturnCatcher, SavedTensorsMeter, bytes_by_device, tensors_in)

CPU = Device("cpu")


def test_saved_tensors_counts_activations_once_and_parameters_apart():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    meter = SavedTensorsMeter(CPU)
    meter.enter()
    model(torch.randn(64, 256))
    meter.exit()
    saved = meter.result()["saved"][0]
    # the input of the first Linear and the ReLU output (which the second
    # Linear saves too, the same storage): 2 x 64 x 256 float32
    assert saved["activation_bytes"] == 2 * 64 * 256 * 4
    assert saved["parameter_bytes"] == 10 * 256 * 4  # the second Linear's weight.t()
    assert saved["grad_enabled"] is True


def test_saved_tensors_under_no_grad_is_nothing():
    meter = SavedTensorsMeter(CPU)
    with torch.no_grad():
        meter.enter()
        torch.nn.Linear(8, 8)(torch.randn(4, 8)).relu()
        meter.exit()
    assert meter.result()["saved"][0]["activation_bytes"] == 0


def test_saved_tensors_hooks_are_removed_after_the_statement():
    meter = SavedTensorsMeter(CPU)
    meter.enter()
    meter.exit()
    x = torch.randn(16, 16, requires_grad=True)
    (x * x).sum()  # would be counted into the last record if the hooks were still on
    assert meter.result()["saved"][0]["tensors"] == 0


def test_return_catcher_sees_an_aliased_function_and_restores_the_profiler(tmp_path):
    from torch import load as renamed_load

    path = str(tmp_path / "w.pt")
    torch.save({"w": torch.zeros(10, 10), "nested": [torch.ones(3)]}, path)
    meter = LoadedDevicesMeter(CPU)
    meter.enter()
    renamed_load(path)  # noqa: MEM007 - the meter under test
    meter.exit()
    assert meter.result()["loads"] == [{"cpu": 10 * 10 * 4 + 3 * 4}]
    import sys

    assert sys.getprofile() is None
    renamed_load(path)  # noqa: MEM007 - outside the statement: not recorded
    assert len(meter.result()["loads"]) == 1


def test_return_catcher_ignores_other_functions():
    caught = []
    with ReturnCatcher(os.path.join, lambda frame, value: caught.append(value)):
        os.path.basename("/a/b")
    assert caught == []
    with ReturnCatcher(os.path.join, lambda frame, value: caught.append(value)):
        os.path.join("a", "b")
    assert caught == [os.path.join("a", "b")]


def test_loader_meter_sees_batches_without_changing_them():
    from torch.utils.data import DataLoader as Renamed
    from torch.utils.data import TensorDataset

    data = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    meter = LoaderCopyMeter(CPU)
    meter.enter()
    loader = Renamed(data, batch_size=8)
    meter.exit()
    batches = [labels.tolist() for _, labels in loader]
    assert batches == [list(range(0, 8)), list(range(8, 16)), list(range(16, 20))]
    assert isinstance(loader, Renamed) and type(loader).__name__ == "DataLoader"
    assert [b["bytes"] for b in meter.result()["batches"]] == [8 * 2 * 4 + 8 * 8] * 2 + \
        [4 * 2 * 4 + 4 * 8]
    assert meter.result()["pin_memory"] == [False]


def test_device_bytes_meter_keeps_only_what_is_still_referenced():
    meter = DeviceBytesMeter(CPU)
    meter.enter()
    kept = torch.zeros(1000, 250).to(torch.float64)
    meter.exit()
    meter.enter()
    torch.zeros(500).sum()
    meter.exit()
    meter.finish()
    record = meter.result()
    assert record["created_bytes"][0] >= 1000 * 250 * 8
    assert record["live_bytes_at_end"] >= 1000 * 250 * 8
    del kept
    meter.finish()
    assert meter.result()["live_bytes_at_end"] < 1000 * 250 * 8


def test_grad_mode_meter_sees_a_bare_no_grad_do_nothing():
    meter = GradModeMeter(CPU)
    meter.enter()
    torch.no_grad()
    meter.exit()
    meter.enter()
    torch.set_grad_enabled(False)
    meter.exit()
    torch.set_grad_enabled(True)
    modes = meter.result()["modes"]
    assert [m["grad_after"] for m in modes] == [True, False]


def test_tensors_in_and_bytes_by_device_count_shared_storage_once():
    base = torch.zeros(100)
    state = {"a": base, "b": [base[:10], (torch.ones(5),)], "c": "text"}
    assert len(tensors_in(state)) == 3
    assert bytes_by_device(tensors_in(state)) == {"cpu": 100 * 4 + 5 * 4}


def test_grad_mode_meter_counts_what_the_next_forward_saves_until_the_function_returns():
    meter = GradModeMeter(CPU)
    layer = torch.nn.Linear(256, 256)

    def evaluate(batch):
        meter.enter()
        torch.no_grad()
        meter.exit()
        return layer(batch).relu()

    evaluate(torch.randn(64, 256))
    layer(torch.randn(64, 256)).relu()  # after evaluate returned: not counted
    [mode] = meter.result()["modes"]
    # the input (kept for the weight's gradient) and the ReLU output
    assert mode["saved_after_bytes"] == 2 * 64 * 256 * 4
    assert mode["saved_after_until"] == "evaluate"
    import sys

    assert sys.getprofile() is None


def test_kept_on_device_meter_reads_the_container_back_a_bounded_number_of_times():
    import sys as _sys
    meter = KeptOnDeviceMeter(CPU)
    meter.accumulator = "kept"
    kept = []
    for _ in range(KeptOnDeviceMeter.KEPT_SAMPLES + 10):
        meter.enter()
        kept.append(torch.zeros(4))
        meter.frame = _sys._getframe()
        meter.exit()
    record = meter.result()
    # CPU tensors: nothing on a CUDA device, but every sample taken, no more
    assert record["kept_on_device_after"] == [0] * KeptOnDeviceMeter.KEPT_SAMPLES
    assert len(record["allocated_after"]) == KeptOnDeviceMeter.KEPT_SAMPLES + 10
    assert record["hits"] == KeptOnDeviceMeter.KEPT_SAMPLES + 10


def test_default_device_meter_records_the_selected_gpu_and_leaves_cuda_alone(monkeypatch):
    from memlint.verify.meters import DefaultDeviceMeter

    monkeypatch.setenv("LOCAL_RANK", "1")
    meter = DefaultDeviceMeter(CPU)
    meter.enter()
    torch.zeros(10)
    meter.exit()
    record = meter.result()
    assert record["selected"] == "cuda:1" and record["hits"] == 1
    assert record["samples"] == [{"new_contexts": [], "allocated_delta": {},
                                  "current_device": None}]
    assert not torch.cuda.is_initialized()
    monkeypatch.delenv("LOCAL_RANK")
    assert DefaultDeviceMeter(CPU).result()["selected"] is None
