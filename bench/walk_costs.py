"""What each rule adds to the walk of a big file: the figures behind
`RuleEntry.walk_cost`, by which the editor server splits a file's rules over
its kept workers (`engine/paths.py`).

    python bench/walk_costs.py            # the soak's ~300 KB file, 5 rounds

Each rule's check of the parsed file, alone, in CPU seconds (so that other
load on the machine falls outside the figure), less the walk with no rule;
median of the rounds. Printed with each rule's share of all rules' cost, in
percent: what `walk_cost` states.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_soak import big_source  # noqa: E402

from memlint.analysis.project import ModuleFacts  # noqa: E402
from memlint.engine.chunks import PIECES  # noqa: E402
from memlint.engine.parsed import check_parsed  # noqa: E402
from memlint.engine.settings import Settings  # noqa: E402
from memlint.rules.catalogue import CATALOGUE  # noqa: E402


def cpu_seconds(text: str, codes: list[str], rounds: int) -> float:
    settings, times = Settings(), []
    for _ in range(rounds):
        facts = ModuleFacts("train.py", "train", True)
        started = time.process_time()
        check_parsed(text, "train.py", settings, True, codes, facts)
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    text = big_source(300 * 1024)
    PIECES.prepare(text)  # parsed once: the walks are what is timed
    none = cpu_seconds(text, [], args.rounds)
    costs = {entry.code: cpu_seconds(text, [entry.code], args.rounds) - none
             for entry in CATALOGUE}
    total = sum(costs.values())
    print(f"walk with no rule: {none:.3f} s")
    for entry in CATALOGUE:
        print(f"{entry.code}: {costs[entry.code]:.3f} s, {100 * costs[entry.code] / total:.0f} % "
              f"(walk_cost {entry.walk_cost})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
