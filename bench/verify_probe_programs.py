"""Run verify on the probe test programs (tests/data/verify) on the GPU and
print every run's raw child result and verdicts as JSON: the recordings the
CPU tests judge again (tests/data/verify/recorded/)."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from memlint.verify.runner import Options, verify_script  # noqa: E402
from tests.verify_helpers import DATA, probe_findings  # noqa: E402

CASES = [("gpu_whole_dataset.py", []), ("gpu_worker_cuda.py", ["spawn"]),
         ("gpu_worker_cuda.py", ["fork"]), ("gpu_training.py", ["40"]),
         ("cpu_probes.py", [])]


def main() -> None:
    recordings = []
    for name, args in CASES:
        path = str(DATA / name)
        findings = probe_findings(path)
        run = verify_script(path, findings, Options(args=args, timeout=120))
        raw = dict(run.raw or {})
        raw.pop("timeline", None)
        recordings.append({"program": name, "args": args,
                           "findings": [f.to_dict() for f in findings], "raw": raw,
                           "verdicts": [v.to_dict() for v in run.verified],
                           "log_tail": run.log_tail})
        print(name, args, [(v.finding.line, v.judgement.verdict, v.judgement.measured)
                           for v in run.verified], file=sys.stderr)
    json.dump(recordings, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
