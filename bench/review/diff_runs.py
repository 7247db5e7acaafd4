"""Compare two saved runs of score.py finding by finding: what a change added,
dropped or reworded, with the verdict each finding had.

    python bench/review/score.py --save before.json      # at the old commit
    python bench/review/score.py --save after.json       # at the new one
    python bench/review/diff_runs.py before.json after.json

Exit status 0 when both runs report the same findings with the same messages.
"""

from __future__ import annotations

import argparse
import json
import sys


def keyed(run: dict) -> dict[tuple, dict]:
    return {(repo, f["path"], f["line"], f["column"], f["code"]): f
            for repo, result in run.items() for f in result["findings"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args(argv)
    with open(args.before) as handle:
        before = keyed(json.load(handle))
    with open(args.after) as handle:
        after = keyed(json.load(handle))
    differences = 0
    for key in sorted(before.keys() - after.keys()):
        print(f"dropped  {key[0]} {key[1]}:{key[2]} {key[4]} ({before[key]['verdict']})")
        differences += 1
    for key in sorted(after.keys() - before.keys()):
        print(f"added    {key[0]} {key[1]}:{key[2]} {key[4]} ({after[key]['verdict']})")
        differences += 1
    for key in sorted(before.keys() & after.keys()):
        if before[key]["message"] != after[key]["message"]:
            print(f"reworded {key[0]} {key[1]}:{key[2]} {key[4]}")
            differences += 1
    print(f"{len(before)} -> {len(after)} findings, {differences} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
