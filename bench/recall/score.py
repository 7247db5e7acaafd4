"""Recall on real code: memlint run on every repository of the labelled
recall set (`cases.csv`, judged by a reviewer who did not write the rules),
each at its commit, checked as a whole tree.

    python bench/recall/score.py                 # per-rule table
    python bench/recall/score.py --cases         # also every case with the outcome
    python bench/recall/score.py --save run.json

A POSITIVE case is found when memlint reports its rule on its line; a
NEAR_MISS is kept when it does not. The trees are exported like the review
corpus's (bench/review/score.py: snapshots from the `fetch` tool) into the
git-ignored `.review/`.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "review"))
from score import Repo, export, ratio, run_memlint  # noqa: E402

ROOT = HERE.parent.parent


def read_cases() -> list[dict]:
    with open(HERE / "cases.csv", newline="", encoding="utf-8") as handle:
        cases = list(csv.DictReader(handle))
    for case in cases:
        case["line"] = int(case["line"])
        if case["label"] not in ("POSITIVE", "NEAR_MISS"):
            sys.exit(f"cases.csv: unknown label {case['label']!r}")
    return cases


def outcomes(cases: list[dict], mirrors: Path, work: Path) -> list[dict]:
    """Each case with `reported`: whether memlint flags its rule on its line
    (preview included), and `by_default`: whether `memlint check` without
    `--preview` does (a rule of the default set, not a variant in preview)."""
    default_codes = _default_codes()
    by_tree: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for case in cases:
        by_tree[(case["repo"], case["commit"])].append(case)
    done = []
    for (name, commit), group in sorted(by_tree.items()):
        tree = export(Repo(name, commit, "recall"), mirrors, work)
        found = run_memlint(tree)
        reported = {(f["path"], f["line"], f["code"]) for f in found}
        shown = {(f["path"], f["line"], f["code"]) for f in found
                 if f["code"] in default_codes and not f.get("preview")}
        done.extend(dict(case, reported=(case["path"], case["line"], case["code"]) in reported,
                         by_default=(case["path"], case["line"], case["code"]) in shown)
                    for case in group)
    return done


def table(done: list[dict]) -> str:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in done:
        counts[case["code"]][(case["label"], case["reported"])] += 1
    lines = ["| rule | positives | found | recall | near misses | left alone | kept |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    total: collections.Counter = collections.Counter()
    for code in sorted(counts):
        lines.append(_row(code, counts[code]))
        total.update(counts[code])
    lines.append(_row("all", total))
    return "\n".join(lines)


def _row(code: str, c: collections.Counter) -> str:
    positives = c[("POSITIVE", True)] + c[("POSITIVE", False)]
    near = c[("NEAR_MISS", True)] + c[("NEAR_MISS", False)]
    return (f"| {code} | {positives} | {c[('POSITIVE', True)]} | "
            f"{ratio(c[('POSITIVE', True)], positives)} | {near} | "
            f"{c[('NEAR_MISS', False)]} | {ratio(c[('NEAR_MISS', False)], near)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--work", type=Path, default=ROOT / ".review")
    parser.add_argument("--cases", action="store_true", help="list every case and its outcome")
    parser.add_argument("--save", type=Path, help="write every case's outcome as JSON")
    args = parser.parse_args(argv)
    done = outcomes(read_cases(), args.mirrors, args.work)
    if args.save:
        args.save.write_text(json.dumps(done, indent=1))
    if args.cases:
        for case in done:
            wanted = case["label"] == "POSITIVE"
            mark = "ok  " if case["reported"] == wanted else "MISS" if wanted else "FLAG"
            print(f"{mark} {case['code']} {case['repo']} {case['path']}:{case['line']}")
    print(table(done))
    codes = _default_codes()
    default = [c for c in done if c["label"] == "POSITIVE" and c["code"] in codes]
    print(f"Of the default set alone: {sum(c['by_default'] for c in default)} of "
          f"{len(default)} true cases of its rules found "
          f"({sum(c['by_default'] for c in default)} of "
          f"{sum(c['label'] == 'POSITIVE' for c in done)} of every rule's).")
    for code in sorted(codes & {c["code"] for c in default}):
        of_rule = [c for c in default if c["code"] == code]
        print(f"  {code}: {sum(c['by_default'] for c in of_rule)} of {len(of_rule)} by default")
    return 0


def _default_codes() -> set[str]:
    from memlint import Settings

    return set(Settings().selected_codes())


if __name__ == "__main__":
    sys.exit(main())
