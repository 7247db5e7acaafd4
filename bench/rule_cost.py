"""What some rules add to a cold `memlint check`, on the benchmark corpus.

    python bench/rule_cost.py MEM008 MEM009 MEM010            # whole corpus
    python bench/rule_cost.py MEM008 --sample 5 --rounds 2    # every 5th file
    python bench/rule_cost.py MEM008 --tree .review/facebookresearch+dino  # other files

Each file is checked in this process twice per round, once with every rule and
once with the named codes ignored, alternating which goes first, so that the
machine's load falls on both sides alike. The figure is the ratio of the two
CPU-second totals; a file no rule wants costs both sides the same screen. The
corpus is run_bench.py's (the transformers wheel's files, `.bench/corpus/`)
unless `--tree` names others.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_bench import ensure_corpus, sample_tree, CORPUS  # noqa: E402
from memlint.engine import check_file, discover  # noqa: E402
from memlint.engine.settings import Settings  # noqa: E402


def cpu_seconds(path: str, settings: Settings) -> float:
    start = time.process_time()
    _, error = check_file(path, settings)
    if error is not None:
        raise SystemExit(f"memlint crashed on {path}: {error}")
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("codes", nargs="+", help="the rules whose cost is measured")
    parser.add_argument("--sample", type=int, default=1, metavar="K",
                        help="every K-th file only (default: all files)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tree", action="append", metavar="DIR",
                        help="time these trees' files instead (repeatable)")
    args = parser.parse_args()

    if args.tree:
        wheel, files = " ".join(args.tree), sorted(discover(args.tree, Settings()))
        files = files[::args.sample]
    else:
        wheel = ensure_corpus()
        files = sorted(discover([str(CORPUS)], Settings()))
        _, files = sample_tree(files, args.sample)
    every = Settings()
    without = Settings(ignore=tuple(args.codes))
    for path in files[:20]:  # warm imports and caches on both sides
        cpu_seconds(path, every), cpu_seconds(path, without)

    totals = {"all rules": 0.0, "without": 0.0}
    for round_ in range(args.rounds):
        for i, path in enumerate(files):
            sides = [("all rules", every), ("without", without)]
            for name, settings in (sides if (i + round_) % 2 else sides[::-1]):
                totals[name] += cpu_seconds(path, settings)
    added = totals["all rules"] / totals["without"] - 1
    print(f"{len(files)} files of {wheel}, {args.rounds} round(s)")
    print(f"all rules: {totals['all rules']:.2f} CPU s; without {' '.join(args.codes)}: "
          f"{totals['without']:.2f} CPU s; the rules add {added:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
