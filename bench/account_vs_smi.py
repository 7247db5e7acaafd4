"""Compare `memlint verify`'s memory account with nvidia-smi sampled during
the same run: for the run's main process, NVML's figure as the account read
it (its peak, and the median of its samples) against the largest and median
`used_memory` that `nvidia-smi --query-compute-apps` reported for that pid.

    python bench/account_vs_smi.py VERIFY.json SMI_SAMPLES.csv
"""

from __future__ import annotations

import json
import statistics
import sys


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        report = json.load(handle)
    smi: dict[int, list[int]] = {}
    with open(argv[1], encoding="utf-8") as handle:
        for row in handle:
            parts = [p.strip() for p in row.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                smi.setdefault(int(parts[0]), []).append(int(parts[1]) * 2**20)
    for script in report["scripts"]:
        main_account = (script.get("account") or {}).get("main")
        if not main_account:
            print(f"{script['path']}: no account")
            continue
        pid = main_account["pid"]
        ours = main_account["at_peak"]["nvml"]
        theirs = smi.get(pid, [])
        if not theirs:
            print(f"{script['path']}: pid {pid} never seen by nvidia-smi")
            continue
        peak = max(theirs)
        parts = main_account["context_bytes"] + main_account["at_peak"]["reserved"]
        print(f"{script['path']}: pid {pid}: account NVML peak {ours / 2**20:.0f} MiB, "
              f"nvidia-smi peak {peak / 2**20:.0f} MiB over {len(theirs)} samples "
              f"(ratio {ours / peak:.3f}); nvidia-smi median "
              f"{statistics.median(theirs) / 2**20:.0f} MiB; context + reserved at the peak "
              f"{parts / 2**20:.0f} MiB, other {(ours - parts) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
