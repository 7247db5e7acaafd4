"""Re-run memlint on the review corpus and score it against the hand verdicts.

The corpus is public PyTorch repositories pinned to a commit (`repos/*.csv`,
one file per reviewer's batch, rows `repo,commit,kind`);
each one's verdicts are in `verdicts/<owner>+<name>.csv`, one row per judged
finding (`path,line,code,verdict,reason`, verdict TRUE / FALSE / DEBATABLE)
and one per known miss (verdict MISSED: memlint should flag that line).
A finding no row judges is *unjudged*: new reasoning produced it, and someone
must read it before the figures mean anything.

The repositories' code is never committed: each is exported from a git
snapshot (the `fetch` tool's `/work/.mirror/<owner>+<name>/repo`) into the
git-ignored `.review/` folder.

    python bench/review/score.py                    # the table, per rule
    python bench/review/score.py --unjudged         # also list findings nobody judged yet
    python bench/review/score.py --repo kuangliu/pytorch-cifar --findings
    python bench/review/score.py --save after.json  # keep the run for a before/after table
"""

from __future__ import annotations

import argparse
import ast
import collections
import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VERDICTS = ("TRUE", "FALSE", "DEBATABLE")
MISSED = "MISSED"
#: what memlint checks, plus the project markers its project facts look for
CHECKED_SUFFIXES = (".py", ".pyi", ".ipynb", "pyproject.toml", "setup.py", "setup.cfg")


@dataclass(frozen=True)
class Repo:
    name: str  # owner/name
    commit: str
    kind: str

    @property
    def slug(self) -> str:
        return self.name.replace("/", "+")


def read_repos(pattern: str = "*") -> list[Repo]:
    repos = []
    for listing in sorted((HERE / "repos").glob(f"{pattern}.csv")):
        with open(listing, newline="") as handle:
            repos.extend(Repo(row["repo"], row["commit"], row["kind"])
                         for row in csv.DictReader(handle))
    return repos


def read_verdicts(repo: Repo) -> list[dict]:
    path = HERE / "verdicts" / f"{repo.slug}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["line"] = int(row["line"])
        if row["verdict"] not in (*VERDICTS, MISSED):
            sys.exit(f"{path}: unknown verdict {row['verdict']!r} (line {row['line']})")
    return rows


def export(repo: Repo, mirrors: Path, work: Path) -> Path:
    """The repository's tree at its commit, exported once from the snapshot."""
    tree = work / repo.slug
    stamp = tree / ".memlint-review-commit"
    if stamp.exists() and stamp.read_text() == repo.commit:
        return tree
    git_dir = mirrors / repo.slug / "repo"
    if (git_dir / ".git").is_dir():
        git_dir = git_dir / ".git"  # a snapshot that came with its work tree's layout
    if not git_dir.exists():
        sys.exit(f"no snapshot of {repo.name} at {git_dir}: bring it with the fetch tool "
                 f"(github:{repo.name}) or pass --mirrors")
    subprocess.run(["rm", "-rf", str(tree)], check=True)
    tree.mkdir(parents=True)
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", repo.commit], check=True,
                             capture_output=True).stdout.decode("utf-8", "surrogateescape")
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, blob = meta.split()
        if kind != "blob" or mode == "120000" or not path.endswith(CHECKED_SUFFIXES):
            continue
        # snapshots lack their largest files: only what memlint reads is needed
        content = subprocess.run([*git, "cat-file", "blob", blob], capture_output=True)
        if content.returncode == 0:
            target = tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.stdout)
    stamp.write_text(repo.commit)
    return tree


def run_memlint(tree: Path) -> list[dict]:
    """memlint's findings on the tree, every rule's, with paths relative to its root."""
    import dataclasses

    from memlint import Settings, check_paths  # the same names in every version

    # every rule, those in preview too: the corpus judges them all (older
    # versions have no preview)
    every = {"preview": True} if "preview" in {f.name for f in dataclasses.fields(Settings)} \
        else {}
    report = check_paths([str(tree)], Settings(root=str(tree), **every), jobs=1)
    found = []
    for finding in report.findings:
        row = finding.to_dict()
        row["path"] = os.path.relpath(finding.path, tree)
        found.append(row)
    for error in report.errors:
        print(f"memlint failed on {error.path}: {error.message}", file=sys.stderr)
    return found


def score(repos: list[Repo], mirrors: Path, work: Path) -> dict:
    """Per repository: each finding with its verdict (or None), and the misses."""
    results = {}
    for repo in repos:
        tree = export(repo, mirrors, work)
        verdicts = read_verdicts(repo)
        judged = {(v["path"], v["line"], v["code"]): v for v in verdicts if v["verdict"] != MISSED}
        findings = run_memlint(tree)
        reported = {(f["path"], f["line"], f["code"]) for f in findings}
        missed = {(v["path"], v["line"], v["code"]): v for v in verdicts if v["verdict"] == MISSED}
        for finding in findings:
            key = (finding["path"], finding["line"], finding["code"])
            verdict = judged.get(key)
            if verdict is None and key in missed:  # a miss now caught is a true finding
                verdict = dict(missed[key], verdict="TRUE")
            finding["verdict"] = verdict["verdict"] if verdict else None
            finding["reason"] = verdict["reason"] if verdict else ""
        lost = [dict(v, merged=_merged(tree, v, reported))
                for key, v in judged.items() if key not in reported]
        misses = [dict(v, caught=(v["path"], v["line"], v["code"]) in reported)
                  for v in verdicts if v["verdict"] == MISSED]
        results[repo.name] = {"commit": repo.commit, "findings": findings,
                              "no_longer_reported": lost, "misses": misses}
    return results


def _merged(tree: Path, verdict: dict, reported: set) -> bool:
    """Whether a judged finding that is no longer reported was folded into
    another finding of the same rule in the same function (one cause, one
    finding): counted apart from findings lost. At a script's top level the
    statement around it (a `for` loop, an `if` block) stands for the function."""
    path = verdict["path"]
    span = _function_span(tree / path, verdict["line"])
    return span is not None and any(
        p == path and c == verdict["code"] and span[0] <= line <= span[1]
        for p, line, c in reported)


def _function_span(path: Path, line: int) -> tuple[int, int] | None:
    """The lines of the innermost function around `line`, else of the top-level
    statement around it (a notebook's lines are its code cells joined, as
    memlint numbers them)."""
    try:
        if path.suffix == ".ipynb":
            from memlint.engine.notebook import python_lines
            cells = json.loads(path.read_bytes())["cells"]
            code = "\n".join("\n".join(python_lines("".join(c["source"]).split("\n")))
                             for c in cells if c["cell_type"] == "code")
            tree = ast.parse(code)
        else:
            tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError, KeyError, TypeError, ImportError):
        return None
    spans = [(n.lineno, n.end_lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if spans:
        return max(spans)
    return next(((n.lineno, n.end_lineno) for n in tree.body
                 if n.lineno <= line <= (n.end_lineno or n.lineno)), None)


def table(results: dict) -> str:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for result in results.values():
        for finding in result["findings"]:
            counts[finding["code"]][finding["verdict"] or "unjudged"] += 1
        for verdict in result["no_longer_reported"]:
            merged = " merged" if verdict["merged"] else ""
            counts[verdict["code"]][f"gone {verdict['verdict']}{merged}"] += 1
        for miss in result["misses"]:
            counts[miss["code"]]["missed caught" if miss["caught"] else "missed"] += 1
    lines = ["| rule | findings | TRUE | FALSE | DEBATABLE | unjudged | precision | "
             "strict precision | TRUE no longer reported | TRUE merged | misses caught |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total: collections.Counter = collections.Counter()
    for code in sorted(counts):
        lines.append(_row(code, counts[code]))
        total.update(counts[code])
    lines.append(_row("all", total))
    return "\n".join(lines)


def _row(code: str, c: collections.Counter) -> str:
    findings = c["TRUE"] + c["FALSE"] + c["DEBATABLE"] + c["unjudged"]
    precision = ratio(c["TRUE"], c["TRUE"] + c["FALSE"])
    strict = ratio(c["TRUE"], c["TRUE"] + c["FALSE"] + c["DEBATABLE"])
    misses = c["missed"] + c["missed caught"]
    return (f"| {code} | {findings} | {c['TRUE']} | {c['FALSE']} | {c['DEBATABLE']} | "
            f"{c['unjudged']} | {precision} | {strict} | {c['gone TRUE']} | "
            f"{c['gone TRUE merged']} | {c['missed caught']}/{misses} |")


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"),
                        help="where the snapshots are (<owner>+<name>/repo git directories)")
    parser.add_argument("--work", type=Path, default=ROOT / ".review",
                        help="where the trees are exported (git-ignored)")
    parser.add_argument("--repo", action="append", help="only this repository (owner/name)")
    parser.add_argument("--listing", default="*",
                        help="only the repositories of repos/<LISTING>.csv (a glob: 'heldout_*')")
    parser.add_argument("--unjudged", action="store_true",
                        help="list the findings no verdict covers, as CSV rows to fill in")
    parser.add_argument("--findings", action="store_true",
                        help="list every finding and its verdict")
    parser.add_argument("--save", type=Path, help="write the whole run as JSON")
    args = parser.parse_args(argv)

    repos = read_repos(args.listing)
    if args.repo:
        unknown = set(args.repo) - {r.name for r in repos}
        if unknown:
            parser.error(f"not in repos/*.csv: {', '.join(sorted(unknown))}")
        repos = [r for r in repos if r.name in args.repo]
    results = score(repos, args.mirrors, args.work)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    for name, result in results.items():
        for finding in result["findings"]:
            if args.findings or (args.unjudged and finding["verdict"] is None):
                print(f"{name}\t{finding['path']},{finding['line']},{finding['code']},"
                      f"{finding['verdict'] or ''},{finding['reason'] or finding['message'][:90]}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
