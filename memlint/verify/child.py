"""The child process of `memlint verify`: runs the user's script as `__main__`
with probes on the flagged statements and writes what they measured as JSON.

    python -m memlint.verify.child SPEC.json [--wait-fd=N]

SPEC holds the script, its arguments, the findings (id, line, code), the
device, and where to write results (and optionally a memory snapshot and a
timeline). The result file is written on every way out: normal end,
`sys.exit`, an exception (an out-of-memory error is evidence, kept with its
line), and SIGTERM from the parent's timeout.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import sys
import threading
import time
import traceback
import types


class StoppedByTimeout(BaseException):
    """Raised in the main thread when the parent's timeout sends SIGTERM."""


class Timeline:
    """Device memory over the run (a sampler thread) and each probed
    statement's executions, for `--plot`."""

    MAX_POINTS = 200_000

    def __init__(self, device, interval: float = 0.005) -> None:
        self.device = device
        self.interval = interval
        self.start = time.perf_counter()
        self.samples: list[tuple[float, int]] = []
        self.events: list[tuple[float, int, str, int]] = []
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def now(self) -> float:
        return time.perf_counter() - self.start

    def _sample(self) -> None:
        while self.running and len(self.samples) < self.MAX_POINTS:
            self.samples.append((self.now(), self.device.allocated()))
            time.sleep(self.interval)

    def event(self, key: int, what: str) -> None:
        if len(self.events) < self.MAX_POINTS:
            self.events.append((self.now(), key, what, self.device.allocated()))

    def stop(self) -> dict:
        self.running = False
        self.thread.join(timeout=1)
        return {"samples": self.samples, "events": self.events}


class Probe:
    """`__memlint_probe__`: the object the instrumented statements call."""

    def __init__(self, meters_by_key: dict[int, list], timeline: Timeline | None) -> None:
        self.meters_by_key = meters_by_key
        self.timeline = timeline
        self.errors: list[str] = []
        self.changed = False  # a probed statement ran since the last snapshot

    def enter(self, key: int) -> None:
        if self.timeline is not None:
            self.timeline.event(key, "enter")
        for meter in self.meters_by_key[key]:
            self._safely(meter.enter)

    def failed(self, key: int) -> None:
        """The statement raised (the error is still propagating)."""
        error = sys.exc_info()[1]
        for meter in self.meters_by_key[key]:
            self._safely(lambda meter=meter: meter.failed(error))

    def exit(self, key: int) -> None:
        frame = sys._getframe(1)  # the user's code, where the statement ran
        for meter in reversed(self.meters_by_key[key]):
            if hasattr(meter, "frame"):
                meter.frame = frame
            self._safely(meter.exit)
            if hasattr(meter, "frame"):
                meter.frame = None  # a frame kept would keep its locals alive
        del frame
        self.changed = True
        if self.timeline is not None:
            self.timeline.event(key, "exit")

    def _safely(self, step) -> None:
        """A failing meter is memlint's problem, never the user's program's."""
        try:
            step()
        except Exception as error:  # noqa: BLE001 - recorded, reported as `error`
            if len(self.errors) < 20:
                self.errors.append(f"{type(error).__name__}: {error}")


class Snapshots:
    """What the probes measured so far, written to `path` (atomically) within
    `interval` seconds of each probed statement, by a thread: a run that
    hangs, is killed, or dies keeps every measurement taken before. The final
    result replaces it when the run ends on its own."""

    def __init__(self, path: str, probe: Probe, build, interval: float = 0.25) -> None:
        self.path, self.probe, self.build, self.interval = path, probe, build, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._write_changes, daemon=True)
        self.thread.start()

    def _write_changes(self) -> None:
        while not self.stopped.wait(self.interval):
            if self.probe.changed:
                self.probe.changed = False
                try:
                    _write_json(self.path, self.build())
                except Exception:  # noqa: BLE001 - a meter read mid-update: next time
                    self.probe.changed = True

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=2)


def _write_json(path: str, data: dict) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def _error_line(error: BaseException, script: str) -> int | None:
    """The line of the user's script closest to where `error` was raised."""
    line = None
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == script:
            line = lineno
    return line


def _describe(error: BaseException, script: str) -> dict:
    text = f"{type(error).__name__}: {error}"
    return {"type": type(error).__name__, "message": text[:4000],
            "line": _error_line(error, script),
            "out_of_memory": type(error).__name__ == "OutOfMemoryError"
            or "CUDA out of memory" in text}


def run(spec: dict) -> dict:
    from memlint.verify.instrument import PROBE_NAME, instrument
    from memlint.verify import meters as meter_classes
    from memlint.verify.judges import rule_verify
    from memlint.verify.meters import Device, Meter, WorkerHitsMeter

    script = os.path.abspath(spec["script"])
    device = Device(_existing(spec.get("device")))
    if device.is_cuda:
        import torch

        if spec.get("select_device", True):
            torch.cuda.set_device(device.torch_device)
        if spec.get("snapshot"):
            torch.cuda.memory._record_memory_history(max_entries=spec.get("snapshot_entries",
                                                                          100_000))
    source = spec.get("source")  # `verify --fix`: the fixed text, run in the file's place
    if source is None:
        with open(script, "rb") as handle:
            source = handle.read().decode("utf-8")
    findings = [(f["id"], f["line"], f["code"]) for f in spec["findings"]]
    instrumented = instrument(source, script, findings)

    meters: dict[int, Meter] = {}
    meters_by_key: dict[int, list[Meter]] = {}
    for statement in instrumented.statements:
        for finding_id, code in statement.findings:
            meter_type = getattr(meter_classes, rule_verify(code).METER)
            meter: Meter
            if meter_type is WorkerHitsMeter:
                meter = WorkerHitsMeter(device, spec.get("hits_path"), finding_id)
            else:
                meter = meter_type(device)
            if hasattr(meter, "accumulator"):
                meter.accumulator = statement.accumulator
            meters[finding_id] = meter
            meters_by_key.setdefault(statement.key, []).append(meter)

    if spec.get("seed") is not None:
        _seed(spec["seed"])
    timeline = Timeline(device) if spec.get("timeline") else None
    probe = Probe(meters_by_key, timeline)
    setattr(builtins, PROBE_NAME, probe)

    sampler, recorder = None, None
    if device.is_cuda:
        from memlint.verify.account import AccountSampler

        sampler = AccountSampler(device.torch_device, spec.get("context_bytes"))
        recorder = _peak_recorder(spec, device, script, instrumented.statements)
        if recorder is not None:
            sampler.on_tick = recorder.tick
        sampler.begin()

    statements = [{"key": s.key, "line": s.line, "end_line": s.end_line, "kind": s.kind,
                   "findings": [fid for fid, _ in s.findings]} for s in instrumented.statements]

    def measured() -> dict:
        """What the probes measured so far: the snapshots' body and the result's."""
        return {"script": script, "pid": os.getpid(),
                "device": str(device.torch_device) if device.torch_device else None,
                "statements": statements,
                "unprobed": {str(k): v for k, v in instrumented.unprobed.items()},
                "measurements": {str(fid): meter.result() for fid, meter in meters.items()},
                "probe_errors": list(probe.errors),
                "account": sampler.summary() if sampler is not None else None}

    snapshots = Snapshots(spec["result_path"] + ".partial", probe,
                          lambda: {**measured(), "outcome": {"exit": "unfinished"},
                                   "partial": True}) if spec.get("result_path") else None

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__dict__["__builtins__"] = builtins
    saved_main = sys.modules["__main__"]
    sys.modules["__main__"] = main
    sys.argv = [script, *spec.get("args", [])]
    sys.path[0] = os.path.dirname(script)

    outcome: dict = {"exit": "completed"}
    started = time.perf_counter()
    try:
        exec(instrumented.code, main.__dict__)
    except StoppedByTimeout:
        outcome = {"exit": "timeout"}
    except SystemExit as stop:
        outcome = {"exit": "sys.exit", "code": stop.code if isinstance(stop.code, int) else 1}
    except BaseException as error:  # noqa: BLE001 - the user's error is evidence
        outcome = {"exit": "exception", "error": _describe(error, script)}
    finally:
        run_seconds = time.perf_counter() - started
        sys.modules["__main__"] = saved_main
        if snapshots is not None:
            snapshots.stop()

    for meter in meters.values():
        probe._safely(meter.finish)
    result = {**measured(), "outcome": outcome, "run_seconds": run_seconds,
              "allocated_at_end": device.allocated()}
    if device.is_cuda:
        import torch

        result["peak_allocated"] = torch.cuda.max_memory_allocated(device.torch_device)
        result["peak_reserved"] = torch.cuda.max_memory_reserved(device.torch_device)
        result["account"] = sampler.end() if sampler is not None else None
        result["torch"] = torch.__version__
        if recorder is not None:
            result["peak"] = _explain_peak(recorder, result["peak_reserved"])
        if spec.get("snapshot"):
            torch.cuda.memory._dump_snapshot(spec["snapshot"])
            torch.cuda.memory._record_memory_history(enabled=None)
    if timeline is not None:
        result["timeline"] = timeline.stop()
    return result


def _peak_recorder(spec: dict, device, script: str, statements):
    """The allocator's history around the reserve's growth (verify/peak.py),
    where the spec asks for it (`verify --explain-peak`); under `--snapshot`
    the whole run's."""
    if not spec.get("explain_peak"):
        return None
    import torch
    import torch._inductor  # noqa: F401 - see below
    from memlint.verify.peak import PeakRecorder, breakdown

    # The allocator's snapshot imports torch._inductor (and with it dynamo and
    # sympy) the first time it is taken: ~4 s in the sampler thread, holding
    # the GIL, that stalled the program and the first window's snapshot
    # (issue 28; seen on an H100, torch 2.11). Imported here, before the
    # script runs, or while a prestarted child waits (PRELOAD_INDUCTOR).

    spans = {fid: (s.line, s.end_line) for s in statements for fid, _ in s.findings}
    index = device.torch_device.index if device.torch_device.index is not None else 0

    def explain(snapshot: dict, identities: dict) -> dict | None:
        try:
            return breakdown(snapshot, index, script, spans, identities)
        except Exception as error:  # noqa: BLE001 - an odd snapshot is memlint's problem
            return {"error": f"{type(error).__name__}: {error}"}

    recorder = PeakRecorder(torch, device.torch_device, keep_recording=bool(spec.get("snapshot")),
                            explain=explain)
    recorder.start()
    return recorder


def _explain_peak(recorder, measured_reserved: int) -> dict | None:
    """The peak's parts, and whether they add up to the allocator's peak."""
    from memlint.verify.peak import check_sum

    recorder.finish()
    explained = recorder.explained
    if explained is None or "parts" not in explained:
        return explained
    explained["measured_reserved"] = measured_reserved
    explained["adds_up"] = check_sum(explained, measured_reserved)
    explained["windows"] = recorder.windows
    return explained


def _seed(seed: int) -> None:
    """The same random state for both runs of `verify --fix`."""
    import random

    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    import torch
    torch.manual_seed(seed)


def _stop_on_sigterm(_signum, _frame):
    raise StoppedByTimeout()


def _dump_stacks_on_sigusr1(path: str):
    """On SIGUSR1 (sent by the parent before it stops the run), write every
    thread's Python stack to `path`, the main thread named on its first line.
    faulthandler does it from C, so it works while the program is stuck in C
    code or has replaced the Python signal handlers."""
    import faulthandler

    handle = open(path, "w", encoding="utf-8")  # kept open for the handler
    handle.write(f"main thread {threading.get_ident():#018x}\n")
    handle.flush()
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)
    return handle


def _existing(device: str | None) -> str | None:
    """`cuda:N` when that GPU exists, else `cuda:0` (two ranks on a one-GPU
    machine both use GPU 0); any other device as given."""
    if device and device.startswith("cuda:"):
        import torch

        if int(device.split(":", 1)[1]) >= torch.cuda.device_count():
            return "cuda:0"
    return device


def for_this_rank(spec: dict) -> dict:
    """Under torchrun (`verify --nproc-per-node`), each rank writes its own
    files (`result.json.rank1`) and measures on its own GPU (`cuda:LOCAL_RANK`),
    which it does not select for the script: a script that forgets
    `torch.cuda.set_device` must still land on GPU 0, as it would."""
    rank = os.environ.get("RANK")
    if rank is None or not spec.get("ranks"):
        return spec
    spec = dict(spec)
    for key in ("result_path", "stack_path", "snapshot"):
        if spec.get(key):
            spec[key] = f"{spec[key]}.rank{rank}"
    if str(spec.get("device", "")).startswith("cuda"):
        spec["device"] = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
        spec["select_device"] = False
    return spec


#: set by the parent for `--explain-peak`: a prestarted child imports
#: torch._inductor while it waits (see `_peak_recorder`)
PRELOAD_INDUCTOR = "MEMLINT_VERIFY_PRELOAD_INDUCTOR"


def _wait_for_spec(fd: int) -> bool:
    """Started before its spec was written (runner.prestart): import what the
    run imports anyway, torch above all, while the parent checks the script;
    then wait for the parent's word. False: the run is off (pipe closed)."""
    import torch  # noqa: F401 - imported now, it is not imported after the spec
    if os.environ.get(PRELOAD_INDUCTOR):
        import torch._inductor  # noqa: F401 - what the peak recorder's snapshot imports
    import memlint.verify.account  # noqa: F401
    import memlint.verify.instrument  # noqa: F401
    import memlint.verify.judges  # noqa: F401
    import memlint.verify.meters  # noqa: F401

    with os.fdopen(fd, "rb") as pipe:
        return pipe.read() == b"go"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 and argv[1].startswith("--wait-fd="):
        if not _wait_for_spec(int(argv[1].split("=", 1)[1])):
            return 0
    with open(argv[0], encoding="utf-8") as handle:
        spec = for_this_rank(json.load(handle))
    stacks = _dump_stacks_on_sigusr1(spec["stack_path"]) if spec.get("stack_path") else None
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    result = run(spec)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _write_json(spec["result_path"], result)
    if stacks is not None:
        import faulthandler

        faulthandler.unregister(signal.SIGUSR1)
        stacks.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
