"""How stable the memory account's CUDA context is over repeated verify runs
(issue 28, item 4): the context from the probe process, the rest of the peak
called "other", plain and under torchrun.

    python bench/context_spread.py --runs 5 > context_spread.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memlint.verify.account import peak_parts  # noqa: E402
from memlint.verify.runner import Options, verify_ranks  # noqa: E402
from tests.verify_helpers import DATA, probe_findings  # noqa: E402

PROGRAM = DATA / "gpu_training.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for launch in (None, 1):
        for _ in range(args.runs):
            run, *_ = verify_ranks(str(PROGRAM), probe_findings(PROGRAM),
                                   Options(args=["30"], timeout=180, nproc_per_node=launch))
            parts = peak_parts(run.raw["account"])
            rows.append({"torchrun ranks": launch, **parts})
    summary = {}
    for launch in (None, 1):
        mine = [r for r in rows if r["torchrun ranks"] == launch]
        summary[str(launch)] = {key: [min(r[key] for r in mine), max(r[key] for r in mine)]
                                for key in ("context", "other", "reserved", "total")}
    json.dump({"runs": rows, "min_max": summary}, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
