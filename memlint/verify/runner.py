"""The parent side of `memlint verify`: check the script, run it in a child
process with probes on the flagged lines, and judge each finding."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from memlint.engine import check_file, discover
from memlint.finding import Finding
from memlint.engine.settings import Settings
from memlint.verify.account import with_context
from memlint.verify.child import PRELOAD_INDUCTOR
from memlint.verify.context_probe import context_bytes
from memlint.verify.instrument import is_runnable
from memlint.verify.judges import CONFIRMED, ERROR, NOT_REACHED, Judgement, RunFacts, judge
from memlint.verify.processes import ContextWatcher, Prestarted, run_child

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Options:
    args: list[str] = field(default_factory=list)
    timeout: float = 120.0
    min_bytes: int = 2**20
    device: str = "cuda:0"
    settings: Settings = field(default_factory=Settings)
    snapshot: str | None = None
    timeline: bool = False
    python: str = sys.executable
    seed: int | None = None  #: seeds random, numpy and torch in the child when set
    #: None: the script runs as a plain child; N (1 included): under torchrun, one
    #: child per rank, so that a script reading RANK or LOCAL_RANK finds them
    nproc_per_node: int | None = None
    #: record the allocator's history while the reserve grows and explain the
    #: peak (`--explain-peak`): off by default, its cost on a many-small-
    #: allocations program is not yet within the overhead goal (bench/verify-overhead)
    explain_peak: bool = False
    #: a child started before the static check (`prestart`), used by the first
    #: run whose command it matches
    early: Prestarted | None = None


@dataclass
class Verified:
    finding: Finding
    judgement: Judgement

    def to_dict(self) -> dict:
        return {**self.finding.to_dict(), "verdict": self.judgement.verdict,
                "measured": self.judgement.measured, "numbers": self.judgement.numbers}


@dataclass
class ScriptRun:
    """One script's verify run: its findings' verdicts and the run's facts."""

    path: str
    verified: list[Verified]
    outcome: dict
    run_seconds: float | None = None
    timed_out: bool = False
    raw: dict | None = None  #: the child's whole result (measurements, timeline)
    log_tail: str = ""
    #: where a run stopped by the timeout was in the script (`train.py:42 in step`)
    stopped_at: str | None = None
    #: whether it was stuck there (no CPU used and the same stack over a second)
    #: rather than still running
    stuck: bool = False

    @property
    def confirmed(self) -> int:
        return sum(v.judgement.verdict == CONFIRMED for v in self.verified)


def runnable_targets(paths: list[str], settings: Settings) -> tuple[list[tuple[str, list[Finding]]],
                                                                    list[str]]:
    """(script, findings) for every runnable file with findings, and the
    files with findings that were skipped because running them does nothing.
    A script named on its own runs even without findings: its memory account
    (per process, per rank, per GPU) is worth having by itself."""
    targets, skipped = [], []
    named = {os.path.abspath(p) for p in paths if os.path.isfile(p)}
    for path in sorted(set(discover(paths, settings))):
        if not path.endswith(".py"):
            continue
        findings, _ = check_file(path, settings)
        findings = [f for f in findings if f.code != "MEM000"]
        if not findings and os.path.abspath(path) not in named:
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            if is_runnable(handle.read()):
                targets.append((path, findings))
            else:
                skipped.append(path)
    return targets, skipped


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def prestart(device: str, python: str = sys.executable,
             explain_peak: bool = False) -> Prestarted | None:
    """The child of a plain run on `device`, started now so that its import of
    torch hides the static check and the CUDA check (issue 28, item 7); the
    caller `close`s it. None off CUDA, where no child is run early. With
    `explain_peak` it also imports what the peak recorder's snapshot needs."""
    if not device.startswith("cuda"):
        return None
    work = tempfile.mkdtemp(prefix="memlint-verify-")
    env = _child_env()
    if explain_peak:
        env[PRELOAD_INDUCTOR] = "1"
    return Prestarted(_child_command(python, None, os.path.join(work, "spec.json")), env, work)


def _child_command(python: str, ranks: int | None, spec_path: str) -> list[str]:
    launcher = _launcher(ranks) if ranks is not None else []
    return [python, *launcher, "-m", "memlint.verify.child", spec_path]


def verify_script(path: str, findings: list[Finding], options: Options,
                  source: str | None = None) -> ScriptRun:
    """Run one script with probes on `findings` and judge each of them;
    `source` (a fixed text) runs in the file's place, the file untouched.
    Under torchrun this is rank 0's run; `verify_ranks` gives all."""
    return verify_ranks(path, findings, options, source)[0]


def verify_ranks(path: str, findings: list[Finding], options: Options,
                 source: str | None = None) -> list[ScriptRun]:
    """One ScriptRun per rank: a single one for a plain run; under torchrun
    (`nproc_per_node` given), each rank's verdicts from its own measurements."""
    ranks = options.nproc_per_node
    if ranks is None:
        return [_verify_one(path, findings, options, source)]
    return _verify_launched(path, findings, options, source, ranks)


class _Launched(NamedTuple):
    """What the parent knows once the child (or torchrun and its ranks) ended."""

    status: int | None
    timed_out: bool
    contexts: dict | None
    log_tail: str
    result_path: str  #: rank r writes `<result_path>.rank<r>` under torchrun
    stack_path: str
    hits_path: str
    busy: bool | None = None  #: at the timeout: still computing (see processes.ChildEnd)
    context: int | None = None  #: the CUDA context's size, from the probe beside the run


def _launch(work: str, path: str, findings: list[Finding], options: Options,
            source: str | None, ranks: int | None = None) -> _Launched:
    """Write the child's spec into `work`, run it (under torchrun with one
    child per rank when `ranks` is given) with the GPU's processes watched, and
    wait for it or the timeout."""
    result_path, hits_path, stack_path, spec_path, log_path = (
        os.path.join(work, name) for name in
        ("result.json", "worker-hits.txt", "stacks.txt", "spec.json", "child.log"))
    spec = {"script": os.path.abspath(path), "source": source, "args": list(options.args),
            "stack_path": stack_path, "ranks": ranks,
            "device": options.device, "seed": options.seed, "result_path": result_path,
            "hits_path": hits_path, "timeline": options.timeline,
            "explain_peak": options.explain_peak,
            "context_bytes": None,  # measured beside the run, applied by the parent
            "snapshot": os.path.abspath(options.snapshot) if options.snapshot and ranks is None
            else None,
            "findings": [{"id": i, "line": f.line, "code": f.code}
                         for i, f in enumerate(findings)]}
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    # every run on a GPU: the account's other processes (workers, ranks, not ours)
    watcher = ContextWatcher() if options.device.startswith("cuda") else None
    command = _child_command(options.python, ranks, spec_path)
    context = _ContextBeside(options) if options.device.startswith("cuda") else None
    ended = run_child(
        command, options.timeout, _child_env(), log_path,
        on_start=watcher.start if watcher else None,
        stack_path=stack_path if ranks is None else None,  # torchrun's agent has no handler
        early=_early(options, work, command))
    contexts = watcher.stop() if watcher else None
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        log_tail = "".join(handle.readlines()[-15:])
    return _Launched(ended.status, ended.timed_out, contexts, log_tail, result_path, stack_path,
                     hits_path, ended.busy, context.value() if context is not None else None)


def _early(options: Options, work: str, command: list[str]) -> Prestarted | None:
    """The prestarted child, where it was started in `work` for `command`."""
    if options.early is None or options.early.work != work:
        return None
    return options.early.claim(command)


class _ContextBeside:
    """The context probe (verify/context_probe.py), run in a thread while the
    script runs: run before it, its process start, torch import and CUDA
    context added 4 s to every verify run on an H100 (issue 28, item 7). Its
    figure is per process (NVML), so the run beside it does not change it."""

    def __init__(self, options: Options) -> None:
        self.found: list[int | None] = []
        self.thread = threading.Thread(
            target=lambda: self.found.append(context_bytes(options.device, options.python)),
            daemon=True)
        self.thread.start()

    def value(self) -> int | None:
        self.thread.join(timeout=120)
        return self.found[0] if self.found else None


def _measured(result_path: str, launched: _Launched) -> dict | None:
    """The child's result, or what it measured before it was stopped or died."""
    raw = _read_json(result_path)
    if raw is None:
        raw = _read_json(result_path + ".partial")
        if raw is not None:
            raw["outcome"] = {"exit": "timeout"} if launched.timed_out else \
                {"exit": "died", "status": launched.status}
    if raw is not None and raw.get("account") is not None:
        raw["account"] = with_context(raw["account"], launched.context)
    return raw


def _unmeasured(label: str, findings: list[Finding], launched: _Launched, why: str,
                stop: Stop) -> ScriptRun:
    verified = [Verified(f, Judgement(ERROR, why)) for f in findings]
    return ScriptRun(label, verified, {"exit": "died", "status": launched.status},
                     timed_out=launched.timed_out, log_tail=launched.log_tail,
                     stopped_at=stop.line, stuck=stop.stuck)


def _verify_one(path: str, findings: list[Finding], options: Options,
                source: str | None = None) -> ScriptRun:
    with _work_dir(options) as work:
        launched = _launch(work, path, findings, options, source)
        raw = _measured(launched.result_path, launched)
        stop = where_stopped(launched.stack_path, os.path.abspath(path), launched.busy) \
            if launched.timed_out else NOT_STOPPED
        worker_hits = _read_worker_hits(launched.hits_path)
    if raw is None:
        why = "stopped by --timeout before it could report" if launched.timed_out else \
            f"the child process died (exit status {launched.status}) before it could report"
        last = launched.log_tail.strip().splitlines()[-1:] or [""]
        return _unmeasured(path, findings, launched, f"{why}; {last[0]}".rstrip("; "), stop)
    if launched.contexts is not None:
        raw["contexts"] = launched.contexts
    raw["worker_hits"] = {str(k): v for k, v in worker_hits.items()}
    return ScriptRun(path, judge_run(raw, findings, options.min_bytes, options.device,
                                     worker_hits),
                     raw["outcome"], raw.get("run_seconds"), launched.timed_out, raw,
                     launched.log_tail, stop.line, stop.stuck)


@contextlib.contextmanager
def _work_dir(options: Options) -> Iterator[str]:
    """Where the run's files go: the prestarted child's folder while it is
    unclaimed (its owner removes it), else a temporary one."""
    if options.early is not None and options.early.available:
        yield options.early.work
        return
    with tempfile.TemporaryDirectory(prefix="memlint-verify-") as work:
        yield work


def _launcher(ranks: int) -> list[str]:
    """PyTorch's own launcher (torchrun), one node, `ranks` processes."""
    return ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]


def _verify_launched(path: str, findings: list[Finding], options: Options,
                     source: str | None, ranks: int) -> list[ScriptRun]:
    with tempfile.TemporaryDirectory(prefix="memlint-verify-") as work:
        launched = _launch(work, path, findings, options, source, ranks)
        runs = []
        for rank in range(ranks):
            label = f"{path} [rank {rank}]"
            raw = _measured(f"{launched.result_path}.rank{rank}", launched)
            stop = where_stopped(f"{launched.stack_path}.rank{rank}", os.path.abspath(path),
                                 None) if launched.timed_out else NOT_STOPPED
            if raw is None:
                why = "stopped by --timeout before it could report" if launched.timed_out \
                    else f"rank {rank} died before it could report (launcher exit status " \
                         f"{launched.status})"
                runs.append(_unmeasured(label, findings, launched, why, stop))
                continue
            raw["rank"] = rank
            if launched.contexts is not None:
                raw["contexts"] = launched.contexts
            runs.append(ScriptRun(label, judge_run(raw, findings, options.min_bytes,
                                                   raw.get("device") or options.device, {}),
                                  raw["outcome"], raw.get("run_seconds"), launched.timed_out,
                                  raw, launched.log_tail, stop.line, stop.stuck))
        return runs


def _read_json(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class Stop(NamedTuple):
    """Where a run stopped by the timeout was in the script, and whether stuck there."""

    line: str | None
    stuck: bool = False


NOT_STOPPED = Stop(None)


def where_stopped(stack_path: str, script: str, busy: bool | None) -> Stop:
    """The innermost frame of the script itself in the main thread's last stack
    (`train.py:42 in load_batch`), from the dumps the child wrote on SIGUSR1;
    stuck when the process used no CPU between the two dumps and its main
    thread's whole stack did not change (`busy` is None where CPU time cannot
    be read: the stacks alone decide then)."""
    if not os.path.exists(stack_path):
        return NOT_STOPPED
    with open(stack_path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    if not lines or not lines[0].startswith("main thread "):
        return NOT_STOPPED
    stacks = _main_thread_stacks(lines[1:], lines[0].split()[-1].lower())
    if not stacks:
        return NOT_STOPPED
    here = next((f"{os.path.basename(script)}:{line} in {function}"
                 for file, line, function in stacks[-1] if os.path.abspath(file) == script), None)
    still = len(stacks) >= 2 and stacks[-1] == stacks[-2]
    return Stop(here, still and busy is not True)


def _main_thread_stacks(lines: list[str], main: str) -> list[list[tuple[str, str, str]]]:
    """Each dump's frames of the main thread, innermost first."""
    stacks: list[list[tuple[str, str, str]]] = []
    in_main = False
    for line in lines:
        if line.startswith(("Thread ", "Current thread ")):
            in_main = main in line.lower()
            if in_main:
                stacks.append([])
            continue
        match = _FRAME.match(line)
        if in_main and match:
            stacks[-1].append((match["file"], match["line"], match["function"]))
    return stacks


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def _read_worker_hits(hits_path: str) -> dict[int, dict]:
    """Per finding id: executions in worker processes and the errors raised there
    (each row of the file is `PID FINDING-ID [ERROR TEXT]`)."""
    hits: dict[int, dict] = {}
    if os.path.exists(hits_path):
        with open(hits_path, encoding="ascii", errors="replace") as handle:
            for row in handle:
                parts = row.rstrip("\n").split(" ", 2)
                if len(parts) < 2 or not parts[1].isdigit():
                    continue
                entry = hits.setdefault(int(parts[1]), {"hits": 0, "errors": []})
                if len(parts) == 3 and parts[2]:
                    entry["errors"].append(parts[2])
                else:
                    entry["hits"] += 1
    return hits


def judge_run(raw: dict, findings: list[Finding], min_bytes: int, device: str,
              worker_hits: dict[int, dict] | None = None) -> list[Verified]:
    """Verdicts from a child's result; also used on recorded GPU results."""
    if worker_hits is None:
        worker_hits = {int(k): v for k, v in raw.get("worker_hits", {}).items()}
    outcome = raw["outcome"]
    error = outcome.get("error") or {}
    spans = {fid: (s["line"], s["end_line"]) for s in raw["statements"] for fid in s["findings"]}
    verified = []
    for finding_id, finding in enumerate(findings):
        if str(finding_id) in raw["unprobed"]:
            verified.append(Verified(finding, Judgement(ERROR, raw["unprobed"][str(finding_id)])))
            continue
        in_workers = (worker_hits or {}).get(finding_id, {"hits": 0, "errors": []})
        facts = RunFacts(min_bytes, device, outcome, raw.get("contexts"),
                         in_workers["hits"], in_workers["errors"])
        record = raw["measurements"].get(str(finding_id))
        span = spans.get(finding_id, (finding.line, finding.line))
        if error.get("out_of_memory") and error.get("line") and \
                span[0] <= error["line"] <= span[1]:
            judgement = Judgement(CONFIRMED, "ran out of CUDA memory at this line: "
                                  + error["message"].splitlines()[0][:200],
                                  {"out_of_memory": True, "hits": (record or {}).get("hits", 0)})
        else:
            judgement = judge(finding.code, record, facts)
        if raw.get("partial") and judgement.verdict == NOT_REACHED:
            judgement.measured += " before the run was stopped"
        if raw.get("probe_errors") and judgement.verdict != CONFIRMED:
            judgement.measured += f" (probe error: {raw['probe_errors'][0]})"
        verified.append(Verified(finding, judgement))
    return verified


def cuda_problem(device: str) -> str | None:
    """Why no CUDA device is usable for `device`, or None when one is. NVML
    answers in milliseconds where nvidia-ml-py is installed; importing torch
    here (a second or more, which the child pays again) only where it is not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "memlint verify needs PyTorch with CUDA in this Python environment"
    if not device.startswith("cuda"):
        return f"--device must name a CUDA device (cuda or cuda:N), not {device!r}"
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    count = _nvml_device_count()
    if count is not None and count > 0:
        return None if index < count else f"no CUDA device {device}: this machine has {count}"
    import torch

    if not torch.cuda.is_available():
        return f"no usable CUDA device (torch {torch.__version__}: torch.cuda.is_available() " \
               "is False)"
    if index >= torch.cuda.device_count():
        return f"no CUDA device {device}: this machine has {torch.cuda.device_count()}"
    return None


def _nvml_device_count() -> int | None:
    """GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001 - nvidia-ml-py missing or no driver: ask torch
        return None
