"""`--fix --unsafe-fixes` on the review corpus: every fixed file still
compiles, a second run changes nothing, the fixed findings are gone, and no
line changed but those the fixes name; in notebooks, nothing but the fixed
cells' code changed (outputs, metadata, other cells), and each fixed cell
still parses.

    python bench/fix_corpus.py [--listing GLOB] [--work DIR]

Each repository of `bench/review/repos/<GLOB>.csv` is copied (its `.py` files
as exported under `.review/`) into a scratch folder, fixed there, and
compared with the original; the user's trees are never touched.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "review"))
from score import read_repos  # noqa: E402  (the review corpus's own listing)

ROOT = HERE.parent


def memlint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", "check", "-j", "2", *args],
                          cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def python_files(tree: Path, pattern: str = "*.py") -> dict[str, str]:
    return {str(p.relative_to(tree)): p.read_text(encoding="utf-8", errors="surrogateescape")
            for p in tree.rglob(pattern)}


def stray_changes(before: str, after: str, edited: set[int]) -> list[int]:
    """Lines of `before` that changed although no fix names them."""
    stray = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), n=0, lineterm=""):
        if line.startswith("@@"):
            removed = line.split()[1].lstrip("-")
            start = int(removed.split(",")[0]) + (removed.endswith(",0"))
            if start not in edited:
                stray.append(start)
    return stray


def edited_lines(fixable: list[dict], name: str, cell: int | None = None) -> set[int]:
    return {e["line"] + k for f in fixable if f["path"] in (name, f"./{name}")
            and f.get("cell") == cell
            for e in f["fix"]["edits"] for k in range(e["end_line"] - e["line"] + 1)}


def notebook_problems(name: str, before: str, after: str, fixable: list[dict]) -> list[str]:
    """What a fix changed in a notebook besides the fixed cells' code lines."""
    from memlint.engine.notebook import _cell_parses, cell_text
    old, new = json.loads(before), json.loads(after)
    problems = []
    for number, (a, b) in enumerate(zip(old["cells"], new["cells"]), start=1):
        if cell_text(a) == cell_text(b):
            continue
        if not _cell_parses(cell_text(b)):
            problems.append(f"cell {number} no longer parses")
        problems += [f"cell {number}: a change at line {n} no fix names"
                     for n in stray_changes(cell_text(a), cell_text(b),
                                            edited_lines(fixable, name, number))]
    for cell in (*old["cells"], *new["cells"]):
        cell["source"] = None
    if old != new or len(old["cells"]) != len(new["cells"]):
        problems.append("something besides the cells' code changed")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listing", default="*")
    parser.add_argument("--review", type=Path, default=ROOT / ".review")
    args = parser.parse_args()
    totals = dict(repos=0, files=0, changed=0, fixed=0, not_compiling=0, second_run_changes=0,
                  stray_lines=0, fixed_left=0, notebooks_changed=0, notebook_problems=0)
    with tempfile.TemporaryDirectory() as scratch:
        for repo in read_repos(args.listing):
            source = args.review / repo.slug
            if not source.is_dir():
                continue
            tree = Path(scratch) / repo.slug
            shutil.copytree(source, tree)
            before = python_files(tree)
            notebooks_before = python_files(tree, "*.ipynb")
            findings = memlint("--format", "json", ".", cwd=tree)
            fixable = [f for f in json.loads(findings.stdout or "[]")
                       if f.get("fix") is not None]
            memlint("--fix", "--unsafe-fixes", ".", cwd=tree)
            after = python_files(tree)
            totals["repos"] += 1
            totals["files"] += len(before)
            for name, text in after.items():
                if text == before[name]:
                    continue
                totals["changed"] += 1
                try:
                    compile(text, name, "exec")
                except (SyntaxError, ValueError) as error:
                    totals["not_compiling"] += 1
                    print(f"{repo.name}: {name}: no longer compiles: {error}")
                for start in stray_changes(before[name], text, edited_lines(fixable, name)):
                    totals["stray_lines"] += 1
                    print(f"{repo.name}: {name}: a change at line {start} no fix names")
            for name, text in python_files(tree, "*.ipynb").items():
                if text == notebooks_before[name]:
                    continue
                totals["notebooks_changed"] += 1
                for problem in notebook_problems(name, notebooks_before[name], text, fixable):
                    totals["notebook_problems"] += 1
                    print(f"{repo.name}: {name}: {problem}")
            totals["fixed"] += len(fixable)
            second = {**python_files(tree), **python_files(tree, "*.ipynb")}
            memlint("--fix", "--unsafe-fixes", ".", cwd=tree)
            if {**python_files(tree), **python_files(tree, "*.ipynb")} != second:
                totals["second_run_changes"] += 1
                print(f"{repo.name}: a second --fix changed files again")
            left = json.loads(memlint("--format", "json", ".", cwd=tree).stdout or "[]")
            totals["fixed_left"] += sum(1 for f in left if f.get("fix") is not None)
    print(" ".join(f"{key}={value}" for key, value in totals.items()))
    bad = totals["not_compiling"] + totals["second_run_changes"] + totals["stray_lines"] \
        + totals["notebook_problems"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
