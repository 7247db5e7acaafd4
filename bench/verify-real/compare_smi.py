"""Does `memlint verify`'s memory account agree with nvidia-smi?

    python bench/verify-real/compare_smi.py VERIFY.json SMI.csv GPU_UUIDS.csv

VERIFY.json is `memlint verify --format json --nproc-per-node N` output;
SMI.csv is `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory
--format=csv -lms 100`, sampled while that same run went on; GPU_UUIDS.csv is
`nvidia-smi --query-gpu=index,uuid --format=csv`. For every process of the run
and every GPU it held memory on, the most nvidia-smi saw is set beside the
most memlint's process watch saw (NVML, every 0.2 s) and, for each rank on its
own GPU, beside the rank's own account at its peak (NVML, every 0.02 s, with
the context / reserved / allocated split). Exit 1 if any pair differs by more
than 2 %.
"""

from __future__ import annotations

import csv
import json
import sys

MiB = 2**20
TOLERANCE = 0.02


def smi_peaks(smi_path: str, uuids_path: str) -> dict[tuple[str, str], int]:
    """(pid, "cuda:i") -> the most MiB nvidia-smi printed for it."""
    with open(uuids_path, encoding="utf-8") as handle:
        index_of = {row["uuid"].strip(): row["index"].strip()
                    for row in csv.DictReader(handle, skipinitialspace=True)}
    peaks: dict[tuple[str, str], int] = {}
    with open(smi_path, encoding="utf-8") as handle:
        for row in csv.reader(handle, skipinitialspace=True):
            if len(row) != 3 or not row[0].strip().isdigit() or not row[2].endswith("MiB"):
                continue  # the header, repeated by -lms, or a "[N/A]"
            key = (row[0].strip(), f"cuda:{index_of[row[1].strip()]}")
            peaks[key] = max(peaks.get(key, 0), int(row[2].split()[0]))
    return peaks


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        report = json.load(handle)
    smi = smi_peaks(argv[1], argv[2])
    ranks = {}
    processes = {}
    for script in report["scripts"]:
        account = script.get("account") or {}
        main_process = account.get("main")
        if main_process:
            ranks[str(main_process["pid"])] = (script["path"], main_process)
        processes = account.get("processes") or processes
    rows, worst = [], 0.0
    print("| process | GPU | nvidia-smi peak | memlint (process watch) | diff | "
          "memlint (rank's own account) | diff | the rank's account at its peak |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for pid, devices in sorted(processes.get("devices_by_pid", {}).items()):
        for gpu, watched in sorted(devices.items()):
            seen = smi.get((pid, gpu))
            if seen is None:
                rows.append(f"| pid {pid} | {gpu} | not seen | {watched / MiB:.0f} MiB | | | | |")
                worst = float("inf")
                continue
            watch_diff = abs(watched / MiB - seen) / seen
            worst = max(worst, watch_diff)
            name, own = ranks.get(pid, (f"pid {pid}", None))
            own_cells = " | |"
            split = ""
            if own is not None and own.get("device") == gpu:
                peak = own["at_peak"]
                own_diff = abs(peak["nvml"] / MiB - seen) / seen
                worst = max(worst, own_diff)
                own_cells = f" {peak['nvml'] / MiB:.0f} MiB | {own_diff:.1%} |"
                split = (f"context {own['context_bytes'] / MiB:.0f} MiB + reserved "
                         f"{peak['reserved'] / MiB:.0f} MiB (allocated "
                         f"{peak['allocated'] / MiB:.0f} MiB) + other "
                         f"{(peak['nvml'] - own['context_bytes'] - peak['reserved']) / MiB:.0f} MiB")
            rows.append(f"| {name} (pid {pid}) | {gpu} | {seen} MiB | {watched / MiB:.0f} MiB | "
                        f"{watch_diff:.1%} |{own_cells} {split} |")
    print("\n".join(rows))
    verdict = "within" if worst <= TOLERANCE else "NOT within"
    print(f"\nlargest difference {worst:.2%}: {verdict} {TOLERANCE:.0%}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
