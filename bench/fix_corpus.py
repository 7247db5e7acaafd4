"""`--fix --unsafe-fixes` on the review corpus: every fixed file still
compiles, a second run changes nothing, the fixed findings are gone, and no
line changed but those the fixes name.

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


def python_files(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): p.read_text(encoding="utf-8", errors="surrogateescape")
            for p in tree.rglob("*.py")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listing", default="*")
    parser.add_argument("--review", type=Path, default=ROOT / ".review")
    args = parser.parse_args()
    totals = dict(repos=0, files=0, changed=0, fixed=0, not_compiling=0, second_run_changes=0,
                  stray_lines=0, fixed_left=0)
    with tempfile.TemporaryDirectory() as scratch:
        for repo in read_repos(args.listing):
            source = args.review / repo.slug
            if not source.is_dir():
                continue
            tree = Path(scratch) / repo.slug
            shutil.copytree(source, tree, ignore=shutil.ignore_patterns("*.ipynb"))
            before = python_files(tree)
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
                edited = {e["line"] + k for f in fixable if f["path"] in (name, f"./{name}")
                          for e in f["fix"]["edits"] for k in range(e["end_line"] - e["line"] + 1)}
                for line in difflib.unified_diff(before[name].splitlines(),
                                                 text.splitlines(), n=0, lineterm=""):
                    if line.startswith("@@"):
                        removed = line.split()[1].lstrip("-")
                        start = int(removed.split(",")[0]) + (removed.endswith(",0"))
                        if start not in edited:
                            totals["stray_lines"] += 1
                            print(f"{repo.name}: {name}: a change at line {start} no fix names")
            totals["fixed"] += len(fixable)
            second = python_files(tree)
            memlint("--fix", "--unsafe-fixes", ".", cwd=tree)
            if python_files(tree) != second:
                totals["second_run_changes"] += 1
                print(f"{repo.name}: a second --fix changed files again")
            left = json.loads(memlint("--format", "json", ".", cwd=tree).stdout or "[]")
            totals["fixed_left"] += sum(1 for f in left if f.get("fix") is not None)
    print(" ".join(f"{key}={value}" for key, value in totals.items()))
    bad = totals["not_compiling"] + totals["second_run_changes"] + totals["stray_lines"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
