"""Probe overhead: the same script run in verify's child with probes on its
flagged lines and with none, alternating, timing the script's own run.

    python bench/probe_overhead.py SCRIPT [ARGS...] --repeats 3 --device cuda:0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from memlint.engine import check_file  # noqa: E402
from memlint.engine.settings import Settings  # noqa: E402
from memlint.verify.processes import run_child  # noqa: E402
from memlint.verify.runner import _child_env  # noqa: E402
from tests.verify_helpers import probe_findings  # noqa: E402


def timed_run(script: str, args: list[str], findings, device: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        spec = {"script": os.path.abspath(script), "args": args, "device": device,
                "result_path": os.path.join(work, "r.json"),
                "findings": [{"id": i, "line": f.line, "code": f.code}
                             for i, f in enumerate(findings)]}
        with open(os.path.join(work, "s.json"), "w") as handle:
            json.dump(spec, handle)
        run_child([sys.executable, "-m", "memlint.verify.child", os.path.join(work, "s.json")],
                  600, _child_env(), os.path.join(work, "log"))
        with open(spec["result_path"]) as handle:
            return json.load(handle)["run_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("args", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda:0")
    options = parser.parse_args()
    findings = probe_findings(options.script) or check_file(options.script, Settings())[0]
    with_probes, without = [], []
    for _ in range(options.repeats):
        without.append(timed_run(options.script, options.args, [], options.device))
        with_probes.append(timed_run(options.script, options.args, findings, options.device))
    base, probed = statistics.median(without), statistics.median(with_probes)
    print(json.dumps({"script": options.script, "args": options.args,
                      "probed_lines": sorted({f.line for f in findings}),
                      "without_probes_s": without, "with_probes_s": with_probes,
                      "median_without_s": base, "median_with_s": probed,
                      "overhead": probed / base - 1}, indent=2))


if __name__ == "__main__":
    main()
