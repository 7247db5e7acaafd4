"""The peak explained (verify/peak.py) on synthetic allocator snapshots: the
replay finds the largest reserve, the parts add up to it, each block goes to
its kind, each finding gets what was allocated on its lines; the recorder
records only while the reserve grows."""

from __future__ import annotations

from types import SimpleNamespace

from memlint.finding import Finding
from memlint.verify import peak
from memlint.verify.peak import (ACTIVATIONS, CACHE, FLAGGED, GRADIENTS, OPTIMIZER, OTHER,
                                 PARAMETERS, PeakRecorder, breakdown, check_sum, peak_rows,
                                 process_bar)

MiB = 2**20
SCRIPT = "/work/train.py"
OPTIM = "/venv/lib/python3.12/site-packages/torch/optim/adam.py"


def at(line: int, filename: str = SCRIPT) -> list[dict]:
    return [{"filename": filename, "line": line, "name": "f"}]


def alloc(addr: int, size: int, frames: list[dict]) -> dict:
    return {"action": "alloc", "addr": addr, "size": size * MiB, "frames": frames}


def free(addr: int, size: int, frames: list[dict]) -> list[dict]:
    return [{"action": "free_requested", "addr": addr, "size": size * MiB, "frames": frames},
            {"action": "free_completed", "addr": addr, "size": size * MiB, "frames": frames}]


def snapshot(events: list[dict], blocks: list[tuple[int, int, str]],
             segment: int = 100, frames: dict[int, list[dict]] | None = None) -> dict:
    """One segment of `segment` MiB at address 0, holding `blocks`
    (address, MiB, state) at the snapshot, after `events`; `frames`: the
    stacks the allocator kept for blocks made while the history was on."""
    return {"segments": [{"device": 0, "address": 0, "total_size": segment * MiB,
                          "blocks": [{"address": a, "size": s * MiB, "state": state,
                                      "frames": (frames or {}).get(a, [])}
                                     for a, s, state in blocks]}],
            "device_traces": [events]}


def training_step() -> dict:
    """A step: parameters (10), gradients by the engine (10), optimizer state
    (20), an activation freed by backward (30), a tensor kept at line 42 (5);
    then the activation is freed: the peak is before that free."""
    events = [{"action": "segment_alloc", "addr": 0, "size": 100 * MiB, "frames": at(10)},
              alloc(0, 10, at(10)),           # parameters, made at line 10
              alloc(10 * MiB, 30, at(20)),    # an activation, made in forward (line 20)
              alloc(40 * MiB, 5, at(42)),     # kept by the flagged line 42
              alloc(45 * MiB, 10, []),        # a gradient, made by the autograd engine
              alloc(55 * MiB, 20, at(7, OPTIM)),  # optimizer state
              *free(10 * MiB, 30, [])]        # the activation, freed by backward
    return snapshot(events, [(0, 10, "active_allocated"), (40 * MiB, 5, "active_allocated"),
                             (45 * MiB, 10, "active_allocated"),
                             (55 * MiB, 20, "active_allocated")])


def test_the_parts_add_up_to_the_reserve_at_its_peak_and_name_each_kind():
    explained = breakdown(training_step(), 0, SCRIPT, {3: (42, 42)},
                          {PARAMETERS: [(0, 10 * MiB)], GRADIENTS: [], OPTIMIZER: []})
    parts = explained["parts"]
    assert explained["reserved"] == 100 * MiB and explained["allocated"] == 75 * MiB
    assert parts == {PARAMETERS: 10 * MiB, GRADIENTS: 10 * MiB, OPTIMIZER: 20 * MiB,
                     ACTIVATIONS: 30 * MiB, FLAGGED: 5 * MiB, OTHER: 0, CACHE: 25 * MiB}
    assert sum(parts.values()) == 100 * MiB
    assert explained["findings"] == {"3": 5 * MiB}
    assert check_sum(explained, 100 * MiB) and check_sum(explained, 101 * MiB)
    assert not check_sum(explained, 110 * MiB)


def test_without_identities_parameters_are_other_tensors():
    parts = breakdown(training_step(), 0, SCRIPT, {})["parts"]
    assert parts[PARAMETERS] == 0 and parts[OTHER] == 10 * MiB + 5 * MiB


def test_a_parameter_freed_after_the_peak_is_not_the_one_found_at_the_snapshot():
    """The identity holds for the allocation the snapshot saw: a block at the
    same address freed after the peak was something else."""
    events = [{"action": "segment_alloc", "addr": 0, "size": 20 * MiB, "frames": []},
              alloc(0, 10, at(5)), *free(0, 10, at(6)), alloc(0, 10, at(9))]
    explained = breakdown(snapshot(events, [(0, 10, "active_allocated")], 20), 0, SCRIPT, {},
                          {PARAMETERS: [(0, 10 * MiB)]})
    # the peak (20 MiB reserved, 10 allocated) is first reached by the first block
    assert explained["reserved"] == 20 * MiB and explained["allocated"] == 10 * MiB
    assert sum(explained["parts"].values()) == 20 * MiB


def test_segments_released_after_the_peak_are_counted_back():
    events = [{"action": "segment_alloc", "addr": 0, "size": 100 * MiB, "frames": []},
              {"action": "segment_alloc", "addr": 200 * MiB, "size": 50 * MiB, "frames": []},
              alloc(200 * MiB, 50, at(3)), *free(200 * MiB, 50, at(4)),
              {"action": "segment_free", "addr": 200 * MiB, "size": 50 * MiB, "frames": []}]
    explained = breakdown(snapshot(events, []), 0, SCRIPT, {})
    assert explained["reserved"] == 150 * MiB and explained["allocated"] == 50 * MiB
    assert explained["parts"][OTHER] == 50 * MiB and explained["parts"][CACHE] == 100 * MiB


def test_blocks_made_before_the_history_are_other_tensors():
    events = [alloc(20 * MiB, 10, at(3))]
    explained = breakdown(snapshot(events, [(0, 20, "active_allocated"),
                                            (20 * MiB, 10, "active_allocated")]), 0, SCRIPT,
                          {3: (3, 3)})
    assert explained["parts"][OTHER] == 20 * MiB and explained["findings"] == {"3": 10 * MiB}
    assert sum(explained["parts"].values()) == 100 * MiB


def test_a_block_made_in_an_earlier_window_is_still_its_lines():
    """The recorder records in windows (while the reserve grows): a data set
    put on the GPU in the first window and live at a later, higher peak is
    still held by its flagged line (the LM run's three MEM001 lines showed 0 B
    when the peak fell in a second window)."""
    events = [alloc(20 * MiB, 10, at(9))]  # the second window: a batch at line 9
    explained = breakdown(snapshot(events, [(0, 20, "active_allocated"),
                                            (20 * MiB, 10, "active_allocated")],
                                   frames={0: at(3)}), 0, SCRIPT, {3: (3, 3)})
    assert explained["findings"] == {"3": 20 * MiB}
    assert explained["parts"][FLAGGED] == 20 * MiB and explained["parts"][OTHER] == 10 * MiB


def test_rows_say_what_each_finding_holds_of_the_peak():
    explained = breakdown(training_step(), 0, SCRIPT, {0: (42, 42)})
    explained.update(measured_reserved=100 * MiB, adds_up=True)
    finding = Finding(path=SCRIPT, line=42, column=5, code="MEM003", end_line=42, end_column=9,
                      name="x", message="m")
    rows = peak_rows({"peak": explained}, [finding])
    text = "\n".join(rows)
    assert "MEM003 at train.py:42 holds 5.00 MiB of the 100.00 MiB peak (5.0 %)" in text
    assert "activations saved for backward" in text and "(+0.0 %)" in text
    bar = process_bar({"peak": explained, "account": {"context_bytes": 500 * MiB,
                                                      "other_bytes": 40 * MiB}})
    assert sum(bar.values()) == 640 * MiB


class FakeTorch:
    """Records the history switches and snapshots the recorder asks for."""

    def __init__(self) -> None:
        self.calls: list = []
        self.cuda = SimpleNamespace(memory=SimpleNamespace(
            _record_memory_history=lambda **kw: self.calls.append(kw.get("enabled")),
            _snapshot=lambda: self.calls.append("snapshot") or {"segments": []}))


def test_the_recorder_stops_once_the_reserve_is_quiet_and_records_again_when_it_grows(
        monkeypatch):
    monkeypatch.setattr(peak, "tensor_identities", lambda torch, device: {})
    clock = [0.0]
    monkeypatch.setattr(peak.time, "perf_counter", lambda: clock[0])
    fake = FakeTorch()
    recorder = PeakRecorder(fake, "cuda:0")
    recorder.start()
    for t, reserved in ((0.1, 0), (0.2, 100), (0.5, 100), (1.1, 100)):
        clock[0] = t
        recorder.tick(reserved)
    assert fake.calls == ["all"] and recorder.recording
    clock[0] = 1.3
    recorder.tick(100)  # quiet for 1.1 s: snapshot, stop
    assert fake.calls == ["all", "snapshot", None] and not recorder.recording
    clock[0] = 5.0
    recorder.tick(150)  # grows again: a second window
    assert fake.calls[-1] == "all" and recorder.windows == 2
    recorder.finish()
    assert fake.calls[-2:] == ["snapshot", None]


def test_under_snapshot_the_recorder_never_stops_the_history(monkeypatch):
    monkeypatch.setattr(peak, "tensor_identities", lambda torch, device: {})
    fake = FakeTorch()
    recorder = PeakRecorder(fake, "cuda:0", keep_recording=True)
    recorder.start()
    recorder.tick(100)
    recorder.finish()
    assert fake.calls == ["snapshot"]


def test_the_snapshot_is_explained_when_taken_and_not_kept(monkeypatch):
    """Tens of thousands of event dicts kept for the rest of the run would
    weigh on the program's garbage collector."""
    monkeypatch.setattr(peak, "tensor_identities", lambda torch, device: {"x": [(1, 2)]})
    seen = []
    recorder = PeakRecorder(FakeTorch(), "cuda:0",
                            explain=lambda snap, ids: seen.append(ids) or {"parts": {}})
    recorder.start()
    recorder.finish()
    assert seen == [{"x": [(1, 2)]}] and recorder.explained == {"parts": {}}
    assert recorder.snapshot is None


def test_the_account_takes_the_context_measured_beside_the_run():
    from memlint.verify.account import with_context

    account = {"at_peak": {"nvml": 1000 * MiB, "reserved": 300 * MiB}, "peak_reserved": 320 * MiB,
               "context_bytes": 0, "context_settled": False}
    fixed = with_context(account, 518 * MiB)
    assert fixed["context_bytes"] == 518 * MiB and fixed["other_bytes"] == 182 * MiB
    assert fixed["process_peak_bytes"] == 1020 * MiB and fixed["context_settled"]
    assert with_context(account, None) is account


def test_nvml_is_asked_only_when_the_reserve_moves_or_a_while_passed(monkeypatch):
    from memlint.verify import account as account_module
    from memlint.verify.account import AccountSampler

    clock = [0.0]
    monkeypatch.setattr(account_module.time, "perf_counter", lambda: clock[0])
    reserve = [0]
    asked = []
    sampler = AccountSampler.__new__(AccountSampler)
    sampler.start, sampler.samples, sampler.on_tick = 0.0, [], None
    sampler._last_reserved, sampler._last_query, sampler._changed = None, -1.0, True
    sampler.allocator = lambda: (reserve[0], 0)
    sampler.query = lambda: asked.append(clock[0]) or 1
    for t, r in ((0.02, 0), (0.04, 0), (0.06, 0), (0.08, 10), (0.10, 10), (0.12, 10),
                 (0.14, 10), (0.40, 10)):
        clock[0], reserve[0] = t, r
        sampler.sample(force=False)
    # the first tick, the reserve's change and the tick after it, then 0.25 s later
    assert asked == [0.02, 0.04, 0.08, 0.10, 0.40]
