"""What a rule change does to code nobody judged: run two versions of
memlint (`PYTHONPATH` checkouts) with one rule selected on every exported
tree under a folder, and list the findings one reports and the other does
not (to read by hand: a dropped finding may be a TRUE one lost).

    python bench/review/compare_versions.py OLD_CHECKOUT NEW_CHECKOUT TREES_DIR --select MEM007
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def findings(checkout: str, tree: str, select: str) -> set[tuple[str, int]]:
    done = subprocess.run([sys.executable, "-m", "memlint", "check", "--select", select,
                           "--format", "json", "-j", "2", "."], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": checkout}, check=False)
    try:
        records = json.loads(done.stdout)
    except json.JSONDecodeError:
        return set()
    return {(r["path"], r["line"]) for r in records if r.get("code") == select}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("trees")
    parser.add_argument("--select", required=True)
    args = parser.parse_args()
    totals = {"old": 0, "new": 0}
    for name in sorted(os.listdir(args.trees)):
        tree = os.path.join(args.trees, name)
        old, new = findings(args.old, tree, args.select), findings(args.new, tree, args.select)
        totals["old"] += len(old)
        totals["new"] += len(new)
        for path, line in sorted(old - new):
            print(f"dropped {name} {path}:{line}")
        for path, line in sorted(new - old):
            print(f"added   {name} {path}:{line}")
    print(f"{len(os.listdir(args.trees))} trees: {totals['old']} -> {totals['new']} {args.select}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
