"""How `memlint verify` measures MEM007: the devices and bytes of what torch.load returned."""

from __future__ import annotations

from memlint.verify.judges import (CONFIRMED, NOT_CONFIRMED, NOT_REACHED, Judgement, Numbers,
                                   Quantity, Record, RunFacts, human_bytes, loaded_on_gpu)

#: the class in memlint/verify/meters.py that probes the flagged line
METER = "LoadedDevicesMeter"


def judge(record: Record, facts: RunFacts) -> Judgement:
    loads = record.get("loads", [])
    numbers = {"hits": record["hits"], "loads": loads}
    if not loads:
        return Judgement(NOT_REACHED, "torch.load never returned here", numbers)
    on_gpu = loaded_on_gpu(loads)
    if on_gpu:
        where = ", ".join(f"{human_bytes(size)} on {device}"
                          for device, size in sorted(on_gpu.items()))
        return Judgement(CONFIRMED, f"loaded {where} ({len(loads)} "
                         f"load{'s' if len(loads) != 1 else ''})", numbers)
    devices = sorted({d for load in loads for d in load}) or ["no tensors"]
    return Judgement(NOT_CONFIRMED, f"every loaded tensor stayed on {', '.join(devices)} "
                     "(the checkpoint was saved from there)", numbers)


def _loaded_on_gpu(numbers: Numbers) -> float | None:
    loads = numbers.get("loads")
    if not loads:
        return None
    return sum(loaded_on_gpu(loads).values())


QUANTITIES = (Quantity("loaded onto the GPU", _loaded_on_gpu, "bytes"),)
