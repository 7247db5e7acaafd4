"""Write fixtures/VERIFY.md from a GPU session's outputs:

    python bench/verify_report_md.py FIXTURES.json OVERHEAD.json SESSION.log > fixtures/VERIFY.md
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter


def environment(log: str) -> str:
    gpu = re.search(r"torch (\S+) cuda (\S+) (.+)", log)
    python = re.search(r"^(3\.\d+\.\d+)", log, re.M)
    method = re.search(r"start method (\S+)", log)
    driver = re.search(r"nvml ok (\S+)", log)
    return (f"{gpu.group(3)}, driver {driver.group(1) if driver else '?'}, torch {gpu.group(1)} "
            f"(CUDA {gpu.group(2)}), Python {python.group(1)}, default start method "
            f"{method.group(1)}")


def overheads(text: str) -> list[dict]:
    decoder, position, found = json.JSONDecoder(), 0, []
    text = text.strip()
    while position < len(text):
        item, position = decoder.raw_decode(text, position)
        found.append(item)
        while position < len(text) and text[position].isspace():
            position += 1
    return found


def main() -> None:
    fixtures = json.load(open(sys.argv[1], encoding="utf-8"))
    runs = overheads(open(sys.argv[2], encoding="utf-8").read())
    log = open(sys.argv[3], encoding="utf-8").read()
    verdicts = Counter((f["code"], f["verdict"])
                       for s in fixtures["scripts"] for f in s["findings"])
    codes = sorted({code for code, _ in verdicts})
    out = ["# `memlint verify fixtures/` on a GPU", "",
           f"Machine: {environment(log)}.", "",
           "Command: `memlint verify fixtures/ --format json --timeout 60` (default "
           "`--min-bytes 1MiB`), run by `bench/verify_gpu_session.sh`; the numbers below are "
           "copied from its JSON output, nothing is estimated. Exit status 1: findings were "
           "confirmed.", "",
           "## Verdicts by rule", "",
           "| code | confirmed | not-confirmed | not-reached | error |", "|---|---|---|---|---|"]
    for code in codes:
        counts = [str(verdicts[(code, verdict)])
                  for verdict in ("confirmed", "not-confirmed", "not-reached", "error")]
        out.append(f"| {code} | " + " | ".join(counts) + " |")
    out += ["", "## Per fixture", ""]
    for script in fixtures["scripts"]:
        outcome = script["outcome"].get("exit")
        peak = script.get("peak_allocated")
        out.append(f"### `{script['path']}`")
        out.append("")
        out.append(f"{outcome}, {script['run_seconds']:.1f} s"
                   + (f", peak {peak / 2**20:.1f} MiB allocated" if peak is not None else ""))
        out.append("")
        out.append("| line | code | verdict | measured |")
        out.append("|---|---|---|---|")
        for finding in script["findings"]:
            measured = finding["measured"].replace("|", "\\|")
            out.append(f"| {finding['line']} | {finding['code']} | {finding['verdict']} | "
                       f"{measured} |")
        out.append("")
    if fixtures.get("skipped"):
        out += ["Skipped (not runnable): " + ", ".join(f"`{p}`" for p in fixtures["skipped"]), ""]
    out += ["## Probe overhead", "",
            "Each script run in verify's child three times with probes on its flagged lines "
            "and three times with none, alternating (`bench/probe_overhead.py`); the time is "
            "the script's own run, median of three.", "",
            "| script | probed lines | without probes | with probes | overhead |",
            "|---|---|---|---|---|"]
    for run in runs:
        command = " ".join([run["script"], *run["args"]])
        lines = ", ".join(map(str, run["probed_lines"]))
        out.append(f"| `{command}` | {lines} | {run['median_without_s']:.2f} s | "
                   f"{run['median_with_s']:.2f} s | {run['overhead']:+.1%} |")
    spread = max(max(r[k]) - min(r[k])
                 for r in runs for k in ("without_probes_s", "with_probes_s"))
    out += ["", "The differences are within run-to-run noise: repeated runs of one script, "
            f"probes or not, spread by up to {spread:.2f} s.", "",
            "## Pictures", "",
            "`memlint verify tests/data/verify/gpu_training.py --snapshot training.pickle "
            "--plot training.png -- 60`: the snapshot opens in pytorch.org/memory_viz; the plot "
            "is below (each dot is one execution of a flagged line, at the memory allocated "
            "right after it).", "", "![device memory over a verify run](VERIFY_training.png)", ""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
