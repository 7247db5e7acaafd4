"""The peak explained: what held PyTorch's reserved memory at the run's worst
moment, by kind (parameters, gradients, optimizer state, activations saved
for backward, other tensors, the allocator's cache) and by finding (the
tensors allocated at a flagged line).

From the allocator's history (`torch.cuda.memory._record_memory_history`,
Python stacks only): a snapshot holds the live blocks at its time and a trace
of the events before it (allocations and frees with their stacks, segments
reserved and released). Replaying the trace backwards from the snapshot finds
the moment the reserve was largest and the blocks live then.

Bounded cost (issue 28): the child records only while the reserve grows. Once
the allocator's reserve has not grown for QUIET_SECONDS, the recorder takes a
snapshot and stops; if the reserve grows again it records again (at most
MAX_WINDOWS times). A training loop reaches its reserve in its first steps,
so the rest of the run pays nothing.

Kinds, from what the program's objects are (identities read when the
snapshot is taken) and else from how a block was made and freed:
- parameters, gradients (`.grad`), optimizer state (`optimizer.state`): a
  block holding such a tensor at the snapshot, allocated before the peak;
- a block allocated at a flagged line (a frame of the script on the finding's
  lines): held by that finding;
- allocated inside `torch/optim/`: optimizer state (and its step's buffers);
- allocated with no Python frame (the autograd engine's own thread) and not
  freed there: gradients; freed there too: other (backward's buffers);
- allocated by Python code and freed by the autograd engine: activations
  saved for backward;
- anything else: other tensors. The cache is reserved minus allocated.
"""

from __future__ import annotations

import bisect
import gc
import os
import sys
import threading
import time
from typing import Any

PARAMETERS = "parameters"
GRADIENTS = "gradients"
OPTIMIZER = "optimizer state"
ACTIVATIONS = "activations saved for backward"
FLAGGED = "tensors kept by flagged lines"
OTHER = "other tensors"
CACHE = "allocator cache"
#: the order of the parts in reports and in the stacked bar
KINDS = (PARAMETERS, GRADIENTS, OPTIMIZER, ACTIVATIONS, FLAGGED, OTHER, CACHE)

_GROW = ("segment_alloc", "segment_map")
_SHRINK = ("segment_free", "segment_unmap")
_LIVE = ("active_allocated", "active_pending_free")


class PeakRecorder:
    """In the child: the allocator's history, recorded while the reserve grows.

    `tick(reserved)` is called by the account's sampler thread; the snapshot
    is taken there (the allocator's lock keeps it consistent with the main
    thread's allocations)."""

    QUIET_SECONDS = 1.0
    MAX_WINDOWS = 4
    MAX_ENTRIES = 200_000

    def __init__(self, torch, device, keep_recording: bool = False, explain=None) -> None:
        self.torch = torch
        self.device = device
        #: explain(snapshot, identities) -> the breakdown, made when the snapshot
        #: is taken: the raw snapshot (tens of thousands of dicts with their
        #: stacks) is not kept for the rest of the run
        self.explain = explain
        self.explained: dict | None = None
        #: `--snapshot` records the whole run: never stop it
        self.keep_recording = keep_recording
        self.recording = False
        self.windows = 0
        self.grown_at = time.perf_counter()
        self.highest = 0
        self.snapshot: dict | None = None
        self.identities: dict[str, list[tuple[int, int]]] = {}
        self.lock = threading.Lock()

    def start(self) -> None:
        if not self.keep_recording:
            self.torch.cuda.memory._record_memory_history(
                enabled="all", context="all", stacks="python", max_entries=self.MAX_ENTRIES)
        self.recording, self.windows = True, self.windows + 1
        self.grown_at = time.perf_counter()

    def tick(self, reserved: int, _allocated: int = 0) -> None:
        now = time.perf_counter()
        if reserved > self.highest:
            self.highest, self.grown_at = reserved, now
            if not self.recording and self.windows < self.MAX_WINDOWS:
                self.start()
            return
        if self.recording and not self.keep_recording and self.highest > 0 \
                and now - self.grown_at >= self.QUIET_SECONDS and not main_thread_importing():
            self.take()

    def take(self) -> None:
        """Snapshot and the program's tensors now; recording stops."""
        with self.lock:
            if not self.recording:
                return
            self.snapshot = self.torch.cuda.memory._snapshot()
            self.identities = tensor_identities(self.torch, self.device)
            if not self.keep_recording:
                self.torch.cuda.memory._record_memory_history(enabled=None)
            self.recording = False
            if self.explain is not None:
                self.explained = self.explain(self.snapshot, self.identities)
                self.snapshot, self.identities = None, {}

    def finish(self) -> None:
        """At the end of the run: a window still open is closed here."""
        if self.recording:
            self.take()


def main_thread_importing() -> bool:
    """Whether the program's main thread is inside an import. The snapshot and
    the object scan wait for it to end: one taken during a long import
    (torch._dynamo, on an optimizer's first use) left the program's import
    half done (ImportError in tests/data/verify/gpu_training.py, on an H200)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def tensor_identities(torch, device) -> dict[str, list[tuple[int, int]]]:
    """(data pointer, bytes) of the parameters, their gradients and the
    optimizers' state tensors on `device`, found among the live objects."""
    found: dict[str, list[tuple[int, int]]] = {PARAMETERS: [], GRADIENTS: [], OPTIMIZER: []}

    def add(kind: str, tensor) -> None:
        if issubclass(type(tensor), torch.Tensor) and tensor.device == device:
            found[kind].append((tensor.data_ptr(), tensor.untyped_storage().nbytes()))

    # by the object's own type, never isinstance(): Parameter's __instancecheck__
    # reads attributes of every object, and on a lazily imported module that
    # started an import beside the program's own (it broke one: issue 28)
    parameter, optimizer = torch.nn.Parameter, torch.optim.Optimizer
    for thing in gc.get_objects():
        kind = type(thing)
        if issubclass(kind, parameter):
            add(PARAMETERS, thing)
            if thing.grad is not None:
                add(GRADIENTS, thing.grad)
        elif issubclass(kind, optimizer):
            for state in thing.state.values():
                for value in (state.values() if isinstance(state, dict) else ()):
                    add(OPTIMIZER, value)
    return found


def _script_lines(frames: list[dict] | None, script: str) -> set[int]:
    return {f["line"] for f in frames or () if os.path.abspath(f["filename"]) == script}


def _kind_by_history(alloc_frames: list[dict] | None, freed_by: list[dict] | None,
                     freed: bool) -> str:
    """What a block is from where it was made and who freed it (after the peak)."""
    if alloc_frames is None:  # made before the recording window: unknown
        return OTHER
    if any("/torch/optim/" in f["filename"].replace(os.sep, "/") for f in alloc_frames):
        return OPTIMIZER
    if not alloc_frames:  # the autograd engine's thread
        return OTHER if freed and not freed_by else GRADIENTS
    if freed and not freed_by:
        return ACTIVATIONS
    return OTHER


def breakdown(snapshot: dict, device_index: int, script: str,
              spans: dict[int, tuple[int, int]],
              identities: dict[str, list[tuple[int, int]]] | None = None) -> dict | None:
    """The reserve at its largest in the snapshot's history, split into KINDS
    (summing to it exactly) and, per finding id of `spans` (id -> first and
    last line in `script`), the bytes of the blocks allocated on its lines."""
    script = os.path.abspath(script)
    segments = [s for s in snapshot.get("segments", []) if s.get("device", 0) == device_index]
    traces = snapshot.get("device_traces") or []
    events: list[dict] = traces[device_index] if device_index < len(traces) else []
    live: dict[int, tuple[int, list[dict] | None]] = {}
    for segment in segments:
        for block in segment.get("blocks", []):
            if block.get("state") in _LIVE:
                live[block["address"]] = (block["size"], block.get("frames"))
    reserved = sum(s["total_size"] for s in segments)
    allocated = sum(size for size, _ in live.values())
    # walk back from the snapshot: the figures after each event; the peak is
    # the largest reserve, and there the most allocated, first reached
    best, best_at = (reserved, allocated), len(events) - 1
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        action, size = event["action"], event.get("size", 0)
        if action in _GROW:
            reserved -= size
        elif action in _SHRINK:
            reserved += size
        elif action == "alloc":
            allocated -= size
        elif action == "free_completed":
            allocated += size
        if (reserved, allocated) >= best:  # before this event; ties: the first moment
            best, best_at = (reserved, allocated), index - 1
    peak_reserved, peak_allocated = best
    # the blocks live at the peak: undo the events after it
    freed_after: dict[int, list[dict]] = {}
    for index in range(len(events) - 1, best_at, -1):
        event = events[index]
        action, address = event["action"], int(event.get("addr", -1))
        if action == "alloc":
            live.pop(address, None)
        elif action == "free_completed":
            live[address] = (event.get("size", 0), None)
        elif action == "free_requested":
            freed_after[address] = event.get("frames") or []  # the first free after the peak
    made_at: dict[int, list[dict]] = {}
    for event in events[:best_at + 1]:
        if event["action"] == "alloc":
            made_at[event["addr"]] = event.get("frames") or []
    for address, (size, recorded) in list(live.items()):
        # made in this window: its alloc event; made in an earlier window (the
        # history is off between windows) and live since: the block's own
        # frames, which the allocator keeps until the block is made again;
        # None: made while the history was off, nothing known of where
        live[address] = (size, made_at.get(address, recorded or None))
    ends = sorted(live)
    kinds = {kind: 0 for kind in KINDS}
    by_finding = {finding: 0 for finding in spans}
    known = _known_blocks(ends, live, identities or {}, freed_after)
    for address in ends:
        size, frames = live[address]
        kind = known.get(address)
        if kind is None:
            lines = _script_lines(frames, script)
            finding = next((fid for fid, (first, last) in sorted(spans.items())
                            if any(first <= line <= last for line in lines)), None)
            if finding is not None:
                by_finding[finding] += size
                kind = FLAGGED
            else:
                kind = _kind_by_history(frames, freed_after.get(address),
                                        address in freed_after)
        kinds[kind] += size
    kinds[CACHE] = peak_reserved - peak_allocated
    at = events[best_at].get("time_us") if 0 <= best_at < len(events) else None
    return {"reserved": peak_reserved, "allocated": peak_allocated, "parts": kinds,
            "findings": {str(fid): size for fid, size in by_finding.items()},
            "events": len(events), "at_event": best_at, "time_us": at}


def _known_blocks(ends: list[int], live: dict[int, tuple[int, Any]],
                  identities: dict[str, list[tuple[int, int]]],
                  freed_after: dict[int, list[dict]]) -> dict[int, str]:
    """Blocks live at the peak that still held a parameter, gradient or
    optimizer state tensor when the snapshot was taken (not freed in between:
    the same allocation)."""
    known: dict[int, str] = {}
    for kind in (PARAMETERS, GRADIENTS, OPTIMIZER):
        for pointer, _ in identities.get(kind, ()):
            at = bisect.bisect_right(ends, pointer) - 1
            if at < 0:
                continue
            address = ends[at]
            if pointer < address + live[address][0] and address not in freed_after:
                known.setdefault(address, kind)
    return known


def check_sum(explained: dict, measured_reserved: int, tolerance: float = 0.02) -> bool:
    """The parts add up to the allocator's measured reserved peak within `tolerance`."""
    total = sum(explained["parts"].values())
    return measured_reserved > 0 and abs(total - measured_reserved) <= tolerance \
        * measured_reserved


def process_bar(raw: dict) -> dict[str, int] | None:
    """One process's memory at its peak as the stacked bar draws it: the CUDA
    context, the reserve's parts, and the rest NVML counts (libraries)."""
    explained = raw.get("peak")
    if not explained or "parts" not in explained:
        return None
    account = raw.get("account") or {}
    bar = {"CUDA context": account.get("context_bytes") or 0, **explained["parts"]}
    bar["other (libraries)"] = account.get("other_bytes") or 0
    return bar


def peak_rows(raw: dict, findings: list) -> list[str]:
    """The peak explained, as report rows: each kind with its share, whether
    the parts add up to the allocator's peak, and what each finding holds."""
    from memlint.verify.judges import human_bytes

    explained = raw.get("peak")
    if not explained:
        return []
    if "error" in explained:
        return [f"  the peak could not be explained: {explained['error']}"]
    total = explained["reserved"]
    measured = explained.get("measured_reserved") or total

    def share(part: int) -> str:
        return f"{100 * part / total:5.1f} %" if total else "    -"

    rows = [f"  the reserved peak, by what held it (the allocator's history): "
            f"{human_bytes(total)} reserved, {human_bytes(explained['allocated'])} allocated"]
    for kind in KINDS:
        part = explained["parts"].get(kind, 0)
        if part or kind in (PARAMETERS, CACHE):
            rows.append(f"    {kind:<32}{human_bytes(part):>12}   {share(part)}")
    gap = (total - measured) / measured if measured else 0.0
    rows.append(f"    the parts add up to {human_bytes(sum(explained['parts'].values()))}; the "
                f"allocator's peak is {human_bytes(measured)} ({100 * gap:+.1f} %)"
                + ("" if explained.get("adds_up", True) else
                   ": the peak was not in the recorded window, the parts are of a lower one"))
    for fid, held in sorted(explained.get("findings", {}).items(), key=lambda kv: int(kv[0])):
        if int(fid) >= len(findings):
            continue
        finding = findings[int(fid)]
        rows.append(f"    {finding.code} at {os.path.basename(finding.path)}:{finding.line} holds "
                    f"{human_bytes(held)} of the {human_bytes(total)} peak ({share(held).strip()})")
    return rows
