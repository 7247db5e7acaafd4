"""What each rule's probe measures at its flagged statement (runs in the child).

One meter per finding. `enter` runs just before the statement, `exit` just
after it (also when it raises), `finish` once when the script has ended.
Each meter records raw numbers only; judging them is the job of the rule's
`verify.py`, which names its meter here.
Meters that need a CUDA device read it through `Device`, which answers 0
where there is none, so the machinery itself runs (and is tested) on a CPU.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:  # imported at run time only where used (see _keep_outputs_mode)
    from torch.utils._python_dispatch import TorchDispatchMode
    from memlint.verify.returns import ReturnWatcher

MAX_SAMPLES = 20_000


class Device:
    """The CUDA device the run is measured on (or none, for CPU tests)."""

    def __init__(self, name: str | None) -> None:
        self.torch_device = torch.device(name) if name else None
        self._reader: Callable[[], tuple[int, int]] | None = None

    @property
    def is_cuda(self) -> bool:
        return self.torch_device is not None and self.torch_device.type == "cuda"

    def allocated(self) -> int:
        """PyTorch's allocated bytes on the device, read from the allocator's
        nested stats (`memory_allocated()` flattens them all into a new dict:
        the timeline's sampler thread paid that every 5 ms)."""
        if not self.is_cuda:
            return 0
        if self._reader is None:
            from memlint.verify.account import allocator_reader
            self._reader = allocator_reader(torch, self.torch_device)
        return self._reader()[1]

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.torch_device)


class Meter:
    """Counts executions; subclasses add what their rule needs."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.hits = 0
        self.errors = 0
        self.first_error: str | None = None

    def enter(self) -> None:
        pass

    def exit(self) -> None:
        self.hits += 1

    def failed(self, error: BaseException) -> None:
        """The statement raised `error`; `exit` still follows."""
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(error).__name__}: {error}"[:500]

    def finish(self) -> None:
        pass

    def result(self) -> dict:
        record: dict[str, Any] = {"hits": self.hits}
        if self.errors:
            record.update(errors=self.errors, first_error=self.first_error)
        return record


def tensors_in(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """Tensors inside a loaded object or a batch: containers, modules, datasets."""
    if depth > 6:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v, depth + 1)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v, depth + 1)]
    if isinstance(value, torch.nn.Module):
        return list(value.parameters()) + list(value.buffers())
    if hasattr(value, "tensors") and isinstance(value.tensors, (list, tuple)):  # TensorDataset
        return [t for v in value.tensors for t in tensors_in(v, depth + 1)]
    return []


def storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return str(tensor.device), tensor.untyped_storage().data_ptr()


def bytes_by_device(tensors: list[torch.Tensor]) -> dict[str, int]:
    """Bytes of distinct storages per device (views and shared storages once)."""
    seen: set[tuple[str, int]] = set()
    totals: dict[str, int] = {}
    for tensor in tensors:
        key = storage_key(tensor)
        if key in seen:
            continue
        seen.add(key)
        totals[key[0]] = totals.get(key[0], 0) + tensor.untyped_storage().nbytes()
    return totals


class ReturnCatcher:
    """Catch what one Python function returns while a statement runs, however
    it was imported (`from torch import load as tl` too): a profile hook that
    matches the function's code object, active for the statement only."""

    def __init__(self, function: Callable, on_return: Callable[[Any, Any], None]) -> None:
        self.code = getattr(function, "__code__", None)
        self.on_return = on_return
        self.previous = None

    def _profile(self, frame, event, arg):
        if event == "return" and frame.f_code is self.code:
            self.on_return(frame, arg)
        if self.previous is not None:
            self.previous(frame, event, arg)

    def __enter__(self):
        self.previous = sys.getprofile()
        if self.code is not None:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self.previous)


# -- MEM001 -------------------------------------------------------------------

class DeviceBytesMeter(Meter):
    """Device bytes the statement left allocated, bytes of the device tensors
    it made (a whole copy freed within the statement counts too), and whether
    those tensors are still alive when the script ends."""

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.before = 0
        self.deltas: list[int] = []
        self.outputs: list[weakref.ref] = []
        self.mode: TorchDispatchMode | None = None
        self.live_bytes_at_end = 0
        self.created: list[int] = []
        self.current_created = 0
        self.created_storages: set = set()
        self._keep_outputs_mode().__enter__().__exit__(None, None, None)

    def _keep_outputs_mode(self) -> TorchDispatchMode:
        """A dispatch mode that keeps weak references to the GPU tensors each
        operation makes. PyTorch wraps a mode's `__torch_dispatch__` so that
        torch.compile skips it, and the wrapper imports torch._dynamo on its
        first call: over a second of every verify run, for a program that may
        never compile anything. Ours is marked as already wrapped (the
        wrapper's own cache), so nothing is imported."""
        from torch.utils._python_dispatch import TorchDispatchMode

        meter = self
        cuda_only = self.device.is_cuda

        def dispatch(mode, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for tensor in tensors_in(result):
                if not cuda_only or tensor.device.type == "cuda":
                    meter.keep(tensor)
            return result

        setattr(dispatch, "__dynamo_disable", dispatch)
        return type("KeepOutputs", (TorchDispatchMode,), {"__torch_dispatch__": dispatch})()

    def keep(self, tensor: torch.Tensor) -> None:
        """Remember a tensor the statement made; count its storage once."""
        key = storage_key(tensor)
        if key not in self.created_storages:
            self.created_storages.add(key)
            self.current_created += tensor.untyped_storage().nbytes()
        if len(self.outputs) < MAX_SAMPLES:
            self.outputs.append(weakref.ref(tensor))

    def enter(self) -> None:
        self.before = self.device.allocated()
        self.current_created = 0
        self.created_storages = set()
        self.mode = self._keep_outputs_mode()
        self.mode.__enter__()

    def exit(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None
        super().exit()
        if len(self.deltas) < MAX_SAMPLES:
            self.deltas.append(self.device.allocated() - self.before)
            self.created.append(self.current_created)
        self.created_storages = set()

    def finish(self) -> None:
        alive = [t for t in (ref() for ref in self.outputs) if t is not None]
        self.live_bytes_at_end = sum(bytes_by_device(alive).values())

    def result(self) -> dict:
        return {**super().result(), "device": str(self.device.torch_device),
                "allocated_delta": self.deltas, "created_bytes": self.created,
                "live_bytes_at_end": self.live_bytes_at_end}


# -- MEM003 -------------------------------------------------------------------

class GrowthMeter(Meter):
    """Device bytes allocated right after each execution of the line: memory
    the line keeps alive grows by a fixed step per iteration. For the first
    executions also the host side: the autograd graph nodes that the
    container or running value it adds to (`losses`, `total`) reaches, and
    the process's resident memory. A loss kept
    after `backward()` keeps its graph's nodes on the host though backward
    freed what they saved on the GPU."""

    HOST_SAMPLES = 16  # each one walks every live tensor's graph: a few only

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.after: list[int] = []
        self.graph_nodes_after: list[int] = []
        self.resident_after: list[int] = []
        self.accumulator: str | None = None  # set by the child from the statement
        self.frame = None  # the user's frame, during `exit` only

    def exit(self) -> None:
        super().exit()
        if len(self.after) < MAX_SAMPLES:
            self.after.append(self.device.allocated())
        if len(self.graph_nodes_after) < self.HOST_SAMPLES and self.accumulator \
                and self.frame is not None:
            kept = eval(self.accumulator, self.frame.f_globals, self.frame.f_locals)
            self.graph_nodes_after.append(graph_nodes(tensors_in(kept)))
            self.resident_after.append(resident_bytes())

    def result(self) -> dict:
        return {**super().result(), "allocated_after": self.after,
                "graph_nodes_after": self.graph_nodes_after,
                "resident_after": self.resident_after}


def graph_nodes(tensors: list[torch.Tensor]) -> int:
    """The autograd nodes reachable from `tensors`: the graphs they keep
    alive (each node is a C++ object on the host, with the tensors it saved
    for backward, if backward has not freed them)."""
    roots = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen: set[int] = set()
    kept: list[Any] = []  # holds the Python wrappers while their ids are compared
    while roots:
        node = roots.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        kept.append(node)
        roots.extend(following for following, _ in getattr(node, "next_functions", ()))
    return len(kept)


def resident_bytes() -> int:
    """The process's resident memory (Linux), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# -- MEM010 -------------------------------------------------------------------

class KeptOnDeviceMeter(GrowthMeter):
    """What the container the line adds to (`preds`, `feats`) holds on the
    device after each of its first executions: the bytes of its CUDA tensors
    (each storage once), so that what the loop keeps is measured apart from
    what else it allocates; and, as for MEM003, the device's allocated bytes
    after every execution, whose last value is what the loop leaves behind."""

    KEPT_SAMPLES = 64  # each one walks the container: its first executions only

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.kept_after: list[int] = []

    def exit(self) -> None:
        Meter.exit(self)
        if len(self.after) < MAX_SAMPLES:
            self.after.append(self.device.allocated())
        if len(self.kept_after) < self.KEPT_SAMPLES and self.accumulator \
                and self.frame is not None:
            kept = eval(self.accumulator, self.frame.f_globals, self.frame.f_locals)
            self.kept_after.append(sum(size for device, size in bytes_by_device(
                tensors_in(kept)).items() if device.startswith("cuda")))

    def result(self) -> dict:
        return {**super().result(), "kept_on_device_after": self.kept_after}


# -- MEM004 -------------------------------------------------------------------

class SavedTensorsMeter(Meter):
    """Bytes autograd saved for backward while the statement ran, counted in
    `saved_tensors_hooks`; parameters are counted apart, since they exist anyway."""

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.per_hit: list[dict] = []
        self.hooks: torch.autograd.graph.saved_tensors_hooks | None = None
        self.current: dict = {}
        self.seen: set = set()

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = storage_key(tensor)
        if key not in self.seen:
            self.seen.add(key)
            size = tensor.untyped_storage().nbytes()
            base = tensor._base if tensor._base is not None else tensor  # weight.t() too
            kind = "parameter_bytes" if base.is_leaf and base.requires_grad \
                else "activation_bytes"
            self.current[kind] += size
            if tensor.device.type == "cuda":
                self.current["device_" + kind] += size
        self.current["tensors"] += 1
        return tensor

    def enter(self) -> None:
        self.current = {"activation_bytes": 0, "parameter_bytes": 0, "tensors": 0,
                        "device_activation_bytes": 0, "device_parameter_bytes": 0,
                        "grad_enabled": torch.is_grad_enabled()}
        self.seen = set()
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self.hooks.__enter__()

    def exit(self) -> None:
        if self.hooks is not None:
            self.hooks.__exit__(None, None, None)
            self.hooks = None
        super().exit()
        if len(self.per_hit) < MAX_SAMPLES:
            self.per_hit.append(self.current)
        self.seen = set()

    def result(self) -> dict:
        return {**super().result(), "saved": self.per_hit}


# -- MEM005 -------------------------------------------------------------------

class LoaderCopyMeter(Meter):
    """Host-to-device copy time of the loader's own first batches, as they
    come (pageable) and from a pinned copy of the same batch."""

    BATCHES = 3
    REPEATS = 3

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.catcher: ReturnCatcher | None = None
        self.batches: list[dict] = []
        self.pin_memory: list[bool] = []

    def enter(self) -> None:
        from torch.utils.data import DataLoader

        self.catcher = ReturnCatcher(DataLoader.__init__, self._caught)
        self.catcher.__enter__()

    def _caught(self, frame, _value) -> None:
        loader = frame.f_locals.get("self")
        if isinstance(loader, torch.utils.data.DataLoader) and \
                not getattr(loader, "_memlint_measured", False):
            self._measure_batches_of(loader)

    def exit(self) -> None:
        if self.catcher is not None:
            self.catcher.__exit__()
            self.catcher = None
        super().exit()

    def _measure_batches_of(self, loader) -> None:
        """Swap the loader's class for a subclass whose iterator times the
        first batches on the way through; the program sees the same batches."""
        meter = self
        self.pin_memory.append(bool(loader.pin_memory))
        base = type(loader)

        def __iter__(self):
            for index, batch in enumerate(base.__iter__(self)):
                if index < meter.BATCHES and len(meter.batches) < meter.BATCHES:
                    meter.batches.append(meter.time_copies(batch))
                yield batch

        measured = type(base.__name__, (base,), {"__iter__": __iter__,
                                                 "_memlint_measured": True})
        measured.__module__ = base.__module__
        loader.__class__ = measured

    def time_copies(self, batch) -> dict:
        tensors = [t for t in tensors_in(batch) if t.device.type == "cpu"]
        size = sum(t.untyped_storage().nbytes() for t in tensors)
        record: dict[str, Any] = {"bytes": size, "tensors": len(tensors),
                  "already_pinned": all(t.is_pinned() for t in tensors) if tensors else False}
        if not tensors or not self.device.is_cuda:
            return record
        from memlint.verify.raw_copies import copy_seconds

        pageable = [t.clone() if t.is_pinned() else t for t in tensors]
        pinned = [t.pin_memory() for t in tensors]
        pageable_seconds = copy_seconds(pageable, self.REPEATS)
        pinned_seconds = copy_seconds(pinned, self.REPEATS)
        if pageable_seconds is None or pinned_seconds is None:
            record["untimed"] = "the CUDA runtime library could not be reached"
        else:
            record["pageable_seconds"], record["pinned_seconds"] = pageable_seconds, pinned_seconds
        return record

    def result(self) -> dict:
        return {**super().result(), "loaders": len(self.pin_memory),
                "pin_memory": self.pin_memory, "batches": self.batches}


# -- MEM006 -------------------------------------------------------------------

class GradModeMeter(Meter):
    """Grad mode (and inference mode) before and after the bare call, and,
    where grad mode stayed on, the bytes autograd then saved for backward
    until the enclosing function (or the script) returned."""

    WATCHED_EXECUTIONS = 3

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.modes: list[dict] = []
        self.before: tuple[bool, bool] = (True, False)
        self.counter: SavedTensorsMeter | None = None
        self.watcher: ReturnWatcher | None = None

    @staticmethod
    def _mode() -> tuple[bool, bool]:
        return torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def enter(self) -> None:
        self.before = self._mode()

    def exit(self) -> None:
        super().exit()
        after = self._mode()
        if len(self.modes) < MAX_SAMPLES:
            self.modes.append({"grad_before": self.before[0], "grad_after": after[0],
                               "inference_before": self.before[1],
                               "inference_after": after[1]})
        if after[0] and not after[1] and self.hits <= self.WATCHED_EXECUTIONS:
            self._count_saved_until_return()

    def _count_saved_until_return(self) -> None:
        """Keep a saved-tensors counter on until the user's frame returns."""
        from memlint.verify.returns import ReturnWatcher, user_frame

        frame = user_frame()
        if self.counter is not None or frame is None:
            return
        self.counter = SavedTensorsMeter(self.device)
        self.counter.enter()
        self.watcher = ReturnWatcher(frame, self._stop_counting)
        if not self.watcher.active:
            self.counter.exit()
            self.counter = None

    def _stop_counting(self) -> None:
        if self.counter is None or self.watcher is None:  # set together
            return
        self.watcher.cancel()
        self.counter.exit()
        saved = self.counter.per_hit[-1]
        self.modes[-1]["saved_after_bytes"] = saved["activation_bytes"]
        self.modes[-1]["saved_after_until"] = self.watcher.code.co_name
        self.counter = None

    def finish(self) -> None:
        self._stop_counting()

    def result(self) -> dict:
        return {**super().result(), "modes": self.modes}


# -- MEM007 -------------------------------------------------------------------

class LoadedDevicesMeter(Meter):
    """Devices and bytes of the tensors `torch.load` returned."""

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.loads: list[dict[str, int]] = []
        self.catcher: ReturnCatcher | None = None

    def enter(self) -> None:
        self.catcher = ReturnCatcher(torch.serialization.load, self._caught)
        self.catcher.__enter__()

    def _caught(self, _frame, value) -> None:
        if len(self.loads) < MAX_SAMPLES:
            self.loads.append(bytes_by_device(tensors_in(value)))

    def exit(self) -> None:
        if self.catcher is not None:
            self.catcher.__exit__()
            self.catcher = None
        super().exit()

    def result(self) -> dict:
        return {**super().result(), "loads": self.loads}


# -- MEM002 -------------------------------------------------------------------

class WorkerHitsMeter(Meter):
    """Counts executions in the main process and, apart, in worker processes
    (forked workers inherit the probes; they report through a hits file)."""

    def __init__(self, device: Device, hits_path: str | None = None, key: int = 0) -> None:
        super().__init__(device)
        import os

        self.main_pid = os.getpid()
        self.hits_path = hits_path
        self.key = key

    def _in_worker(self) -> bool:
        import os

        return os.getpid() != self.main_pid and bool(self.hits_path)

    def _report(self, text: str = "") -> None:
        import os

        if self.hits_path is None:  # reported only from a worker, with a hits file
            return
        line = " ".join(f"{os.getpid()} {self.key} {text}".split())  # one line, ASCII
        with open(self.hits_path, "a", encoding="ascii", errors="replace") as handle:
            handle.write(line[:600] + "\n")

    def failed(self, error: BaseException) -> None:
        if self._in_worker():
            self._report(f"{type(error).__name__}: {error}")
        else:
            super().failed(error)

    def exit(self) -> None:
        if self._in_worker():
            self._report()
        else:
            super().exit()


# -- MEM008 -------------------------------------------------------------------

class DefaultDeviceMeter(Meter):
    """The GPUs on which the statement created a CUDA context or left bytes
    allocated, and the GPU this process selected (`cuda:LOCAL_RANK` under a
    launcher). It never touches CUDA itself before the program has: reading
    `memory_allocated` would not create a context, but an uninitialised
    CUDA is left to the program to initialise."""

    SAMPLES = 16

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        rank = os.environ.get("LOCAL_RANK")
        self.selected = f"cuda:{rank}" if rank is not None and rank.isdigit() else None
        self.samples: list[dict] = []
        self.before: tuple[set[str], dict[str, int]] = (set(), {})

    @staticmethod
    def _state() -> tuple[set[str], dict[str, int]]:
        """(devices with a CUDA context, bytes allocated on each of them)."""
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return set(), {}
        has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
        indices = [i for i in range(torch.cuda.device_count())
                   if has_context is None or has_context(i)]
        return ({f"cuda:{i}" for i in indices},
                {f"cuda:{i}": torch.cuda.memory_allocated(i) for i in indices})

    def enter(self) -> None:
        self.before = self._state()

    def exit(self) -> None:
        super().exit()
        if len(self.samples) >= self.SAMPLES:
            return
        contexts, allocated = self._state()
        old_contexts, old_allocated = self.before
        self.samples.append({
            "new_contexts": sorted(contexts - old_contexts),
            "allocated_delta": {d: n - old_allocated.get(d, 0) for d, n in allocated.items()
                                if n != old_allocated.get(d, 0)},
            "current_device": f"cuda:{torch.cuda.current_device()}" if contexts else None})

    def result(self) -> dict:
        return {**super().result(), "selected": self.selected, "samples": self.samples,
                "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0}
