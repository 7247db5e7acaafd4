"""What MEM005 and MEM007 cost on a real GPU: the figures behind their pages.

    python bench/gpu_costs.py --out bench/results/gpu_costs_h100.json

MEM005 (no `pin_memory`): for typical batches (ImageNet-size images, CIFAR-size
images, a spectrogram, tabular rows, token ids), the host-to-device copy time
from pageable and from pinned memory, the time the pinning itself takes (a
loader pins in its own thread), and one epoch of a DataLoader feeding a small
model on the GPU with and without `pin_memory=True`.

MEM007 (`torch.load` without `map_location`): for checkpoints of a small, a
medium and a large model saved from the GPU, what lands on the GPU when they are
loaded (in a fresh process, as a script reloading them does) and the peak GPU
memory of `model.load_state_dict(torch.load(path))` with and without
`map_location="cpu"`.

Every figure is a median of repeated runs; the JSON keeps them all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

MiB = 2**20
#: name -> (shape, dtype): what one batch of each kind of data looks like
BATCHES = {
    "imagenet images 64x3x224x224 float32": ((64, 3, 224, 224), torch.float32),
    "cifar images 128x3x32x32 float32": ((128, 3, 32, 32), torch.float32),
    "spectrograms 32x1x128x1024 float32": ((32, 1, 128, 1024), torch.float32),
    "tabular rows 256x64 float32": ((256, 64), torch.float32),
    "token ids 32x512 int64": ((32, 512), torch.int64),
}
#: name -> (layers, width): MLPs of about 2 MiB, 128 MiB and 1 GiB of float32 weights
MODELS = {"2 MiB": (2, 512), "128 MiB": (8, 2048), "1 GiB": (16, 4096)}


def _median_seconds(action, repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        action()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_costs() -> list[dict]:
    rows = []
    for name, (shape, dtype) in BATCHES.items():
        pageable = torch.ones(shape, dtype=dtype)
        pinned = pageable.pin_memory()
        size = pageable.numel() * pageable.element_size()
        pageable_s = _median_seconds(lambda: pageable.to("cuda"))
        pinned_s = _median_seconds(lambda: pinned.to("cuda", non_blocking=True))
        pin_s = _median_seconds(lambda: pageable.pin_memory(), repeats=10)
        rows.append({"batch": name, "bytes": size, "pageable_s": pageable_s,
                     "pinned_s": pinned_s, "pin_s": pin_s,
                     "copy_speedup": pageable_s / pinned_s,
                     "pageable_gb_s": size / pageable_s / 1e9,
                     "pinned_gb_s": size / pinned_s / 1e9})
    return rows


def _epoch_seconds(dataset, batch_size: int, pin: bool, model) -> float:
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=4,
                                         pin_memory=pin, persistent_workers=False)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for inputs, in loader:
        model(inputs.to("cuda", non_blocking=True)).float().sum().item()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def epoch_costs(rounds: int = 3) -> list[dict]:
    """Whole epochs, alternating pinned and pageable: what a user waits for."""
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, stride=4), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1)).cuda()
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 1)).cuda()
    cases = [("imagenet images 64x3x224x224 float32, small conv",
              torch.utils.data.TensorDataset(torch.randn(1024, 3, 224, 224)), 64, conv),
             ("tabular rows 256x64 float32, MLP",
              torch.utils.data.TensorDataset(torch.randn(262144, 64)), 256, mlp)]
    rows = []
    with torch.no_grad():
        for name, dataset, batch_size, model in cases:
            _epoch_seconds(dataset, batch_size, True, model)  # warm up workers and kernels
            pinned, pageable = [], []
            for _ in range(rounds):
                pageable.append(_epoch_seconds(dataset, batch_size, False, model))
                pinned.append(_epoch_seconds(dataset, batch_size, True, model))
            rows.append({"case": name, "pageable_epoch_s": pageable, "pinned_epoch_s": pinned,
                         "epoch_speedup": statistics.median(pageable) /
                         statistics.median(pinned)})
    return rows


def _mlp(layers: int, width: int) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


_LOAD_CHILD = r"""
import json, sys, torch
layers, width, path, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).cuda()
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
state = torch.load(path) if how == "default" else torch.load(path, map_location="cpu")
landed = torch.cuda.memory_allocated() - base
model.load_state_dict(state)
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated() - base
devices = sorted({str(t.device) for t in state.values()})
print(json.dumps({"landed_bytes": landed, "peak_extra_bytes": peak, "devices": devices}))
"""


def load_costs() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, (layers, width) in MODELS.items():
            path = os.path.join(folder, f"{layers}x{width}.pt")
            model = _mlp(layers, width).cuda()
            torch.save(model.state_dict(), path)
            weights = sum(p.numel() * p.element_size() for p in model.parameters())
            del model
            torch.cuda.empty_cache()
            row: dict = {"checkpoint": name, "weights_bytes": weights}
            for how in ("default", "map_location_cpu"):
                done = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(layers), str(width),
                                       path, how], capture_output=True, text=True, check=True)
                row[how] = json.loads(done.stdout)
            rows.append(row)
    return rows


def markdown(result: dict) -> str:
    lines = [f"Device: {result['device']}; torch {result['torch']}.", "",
             "| batch | size | pageable | pinned | copy speed-up | pinning itself |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in result["copies"]:
        lines.append(f"| {row['batch']} | {row['bytes'] / MiB:.2f} MiB | "
                     f"{row['pageable_gb_s']:.1f} GB/s | {row['pinned_gb_s']:.1f} GB/s | "
                     f"{row['copy_speedup']:.1f}x | {row['pin_s'] * 1e3:.2f} ms |")
    lines += ["", "| DataLoader epoch (4 workers) | pageable | pinned | speed-up |",
              "|---|---:|---:|---:|"]
    for row in result["epochs"]:
        lines.append(f"| {row['case']} | {statistics.median(row['pageable_epoch_s']):.2f} s | "
                     f"{statistics.median(row['pinned_epoch_s']):.2f} s | "
                     f"{row['epoch_speedup']:.2f}x |")
    lines += ["", "| checkpoint saved from cuda:0 | loaded onto the GPU by `torch.load(p)` | "
              "peak extra GPU memory, `load_state_dict(torch.load(p))` | "
              "same with `map_location='cpu'` |", "|---|---:|---:|---:|"]
    for row in result["loads"]:
        lines.append(f"| {row['checkpoint']} | {row['default']['landed_bytes'] / MiB:.2f} MiB | "
                     f"{row['default']['peak_extra_bytes'] / MiB:.2f} MiB | "
                     f"{row['map_location_cpu']['peak_extra_bytes'] / MiB:.2f} MiB |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON to write (a .md beside it)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "copies": copy_costs(), "epochs": epoch_costs(), "loads": load_costs()}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    table = markdown(result)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as handle:
        handle.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
