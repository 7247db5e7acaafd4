"""Start-up on small trees: a warm `memlint check` (every file answered from
the cache) beside `ruff check --no-cache`, and what the warm run imports.

    python bench/startup.py [TREE ...]        # default: fixtures/ and two of its folders
    python bench/startup.py --against DIR     # also memlint from another checkout
                                              # (mkdir DIR; git archive REV memlint | tar -x -C DIR)

Each command runs `--runs` times (default 20) after one untimed run that
fills the cache, the commands taking turns; the figures are the median wall
time and the median CPU time (user + system of the process and its children,
steadier than wall time on a shared machine). The import figure is
`python -X importtime`'s total for memlint.cli.main and the modules a warm
run imports beyond it, median of the same number of runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TREES = ["fixtures/load_without_map_location", "fixtures/grad_in_inference", "fixtures"]


def median_seconds(commands: list[tuple[list[str], dict]], runs: int) -> list[tuple]:
    """Each command's median (wall, CPU) seconds, the commands taking turns run
    by run (so a change in the machine's load falls on all of them alike)."""
    times: list[list[tuple[float, float]]] = [[] for _ in commands]
    for run in range(runs + 1):  # the first fills the caches, untimed
        for command, env, own in zip(*zip(*commands), times):
            cpu_before, start = _children_cpu(), time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            if run:
                own.append((time.perf_counter() - start, _children_cpu() - cpu_before))
    return [tuple(statistics.median(column) for column in zip(*own)) for own in times]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def imported_modules(tree: str, env: dict) -> tuple[int, float]:
    """How many modules a warm run imports, and their cumulative import seconds."""
    command = [sys.executable, "-P", "-X", "importtime", "-m", "memlint", "check", tree]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    rows = [line.split("|") for line in done.stderr.splitlines()
            if line.startswith("import time:") and "self [us]" not in line]
    top_level = [int(cumulative) for _, cumulative, name in rows
                 if not name.startswith(" " * 2)]
    return len(rows), sum(top_level) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=DEFAULT_TREES)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--against", metavar="DIR", help="another checkout to compare with")
    options = parser.parse_args()
    ruff = shutil.which("ruff") or shutil.which("ruff", path=os.path.dirname(sys.executable))
    # as a user runs it: with bytecode written once and read after
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    versions = {"this": environment}
    if options.against:
        path = os.pathsep.join(filter(None, [os.path.abspath(options.against),
                                             os.environ.get("PYTHONPATH")]))
        versions["against"] = {**environment, "PYTHONPATH": path}
    print(f"{'tree':<36} {'files':>5} {'memlint':>8} {'wall s':>7} {'ruff':>6} {'ratio':>5} "
          f"{'CPU s':>6} {'ruff':>6} {'ratio':>5} {'modules':>7} {'imports s':>9}")
    for tree in options.trees:
        files = sum(name.endswith((".py", ".ipynb")) for _, _, names in os.walk(tree)
                    for name in names)
        commands = [([sys.executable, "-P", "-m", "memlint", "check", tree], env)
                    for env in versions.values()]
        commands.append(([ruff, "check", "--no-cache", "--exit-zero", "--quiet", tree],
                         environment))
        *ours, theirs = median_seconds(commands, options.runs)
        for name, env, (wall, cpu) in zip(versions, versions.values(), ours):
            modules, imports = imported_modules(tree, env)
            print(f"{tree:<36} {files:>5} {name:>8} {wall:>7.3f} {theirs[0]:>6.3f} "
                  f"{wall / theirs[0]:>5.1f} {cpu:>6.3f} {theirs[1]:>6.3f} "
                  f"{cpu / theirs[1]:>5.1f} {modules:>7} {imports:>9.3f}")


if __name__ == "__main__":
    os.chdir(CHECKOUT)
    main()
