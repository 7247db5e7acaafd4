"""Per process and per GPU: the most memory `memlint verify`'s NVML watch saw
(`account.processes.devices_by_pid` of its JSON) against the most that
`nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory` reported during
the same run.

    python compare_per_gpu.py VERIFY.json SMI.csv GPUS.csv
"""
import json
import sys

report = json.load(open(sys.argv[1], encoding="utf-8"))
index_of = {}
for row in open(sys.argv[3], encoding="utf-8"):
    parts = [p.strip() for p in row.split(",")]
    if len(parts) == 2 and parts[0].isdigit():
        index_of[parts[1]] = int(parts[0])
smi = {}
for row in open(sys.argv[2], encoding="utf-8"):
    parts = [p.strip() for p in row.split(",")]
    if len(parts) == 3 and parts[0].isdigit() and parts[2].isdigit() and parts[1] in index_of:
        key = (parts[0], f"cuda:{index_of[parts[1]]}")
        smi[key] = max(smi.get(key, 0), int(parts[2]) * 2**20)
seen = {}
for script in report["scripts"]:
    devices = ((script.get("account") or {}).get("processes") or {}).get("devices_by_pid", {})
    for pid, by_device in devices.items():
        for device, used in by_device.items():
            seen[(pid, device)] = used
for (pid, device), used in sorted(seen.items()):
    theirs = smi.get((pid, device))
    ratio = f"{used / theirs:.3f}" if theirs else "n/a"
    print(f"pid {pid} {device}: verify {used / 2**20:.0f} MiB, nvidia-smi "
          f"{(theirs or 0) / 2**20:.0f} MiB, ratio {ratio}")
