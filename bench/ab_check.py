"""Interleaved A/B of `python -m memlint check -jN` between two checkouts, on one corpus.

What one change costs, measured as the CLI runs it: each round runs both
checkouts, in alternating order, on the same files (already in the page cache),
and the CPU time of the run and its children is compared (the machine is
shared: CPU seconds are the steadier figure, medians and minima both shown).

    git worktree add /tmp/before <commit>; git worktree add /tmp/after <commit>
    python bench/ab_check.py /tmp/before /tmp/after --corpus .bench/sample-10 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def run(tree: str, jobs: str, corpus: str) -> tuple[float, float, int, int]:
    """(wall s, CPU s, exit status, output lines) of one `memlint check` run of `tree`."""
    env = {**os.environ, "PYTHONPATH": tree}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", f"-j{jobs}",
                           os.path.abspath(corpus)],
                          cwd=tree, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stdout.count(b"\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="checkout of the reference commit")
    parser.add_argument("after", help="checkout of the commit measured")
    parser.add_argument("--corpus", default=".bench/sample-10")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", default="1,2", help="comma-separated -j values")
    args = parser.parse_args()
    corpus = os.path.abspath(args.corpus)
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    results: dict[tuple[str, str], list[tuple[float, float, int, int]]] = {}
    for round_number in range(args.rounds):
        for jobs in args.jobs.split(","):
            order = list(trees) if round_number % 2 == 0 else list(trees)[::-1]
            for name in order:
                results.setdefault((name, jobs), []).append(run(trees[name], jobs, corpus))
    for jobs in args.jobs.split(","):
        before, after = results[("before", jobs)], results[("after", jobs)]
        for label, i in (("wall", 0), ("cpu", 1)):
            median_b = statistics.median(r[i] for r in before)
            median_a = statistics.median(r[i] for r in after)
            min_b, min_a = min(r[i] for r in before), min(r[i] for r in after)
            print(f"-j{jobs} {label}: before median {median_b:.2f} s min {min_b:.2f} | "
                  f"after median {median_a:.2f} s min {min_a:.2f} | "
                  f"after/before median {median_a / median_b:.3f} min {min_a / min_b:.3f}")
        outputs = {(r[2], r[3]) for r in before}, {(r[2], r[3]) for r in after}
        print(f"  (exit status, output lines) before {outputs[0]} after {outputs[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
