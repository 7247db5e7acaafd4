"""Write the figures of `memlint/rules/measured.py`: per rule, the verdicts of
the held-out review sets as judged, and how often the rule fires on the review
corpus. They decide which rules run by default, so they come from committed
verdicts only (a test recounts them).

    python scripts/write_measured.py --heldout 'heldout8_*' --judged-at bd0d671 \\
        --heldout 'heldout9_*' --judged-at 41f1c8e --corpus-run corpus.json

`--corpus-run` is a `bench/review/score.py --save` run of the whole review
corpus (every rule, preview included); its trees in `.review/` give the number
of Python files.

A rule's figures are those of its default findings: the findings a rule put
in a preview variant of its own (JSON `"preview": true`, e.g. MEM007 on a file
the code does not show to be a checkpoint) run only with `--preview` and are
counted apart, as `<code> (preview variant)`. Which findings those were is
read from the judge's saved run: `--judged-run heldout9_a=RUN.json` writes
`bench/review/judged/heldout9_a.json`, committed beside the verdicts.
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REVIEW = ROOT / "bench" / "review"
MEASURED = ROOT / "memlint" / "rules" / "measured.py"
MARK = "# -- the figures: written by `python scripts/write_measured.py`, never by hand --\n"
VERDICTS = ("TRUE", "FALSE", "DEBATABLE")


def heldout_repos(listings: tuple[str, ...]) -> list[str]:
    """The repositories of the held-out listings, as `owner/name`."""
    repos: list[str] = []
    for pattern in listings:
        files = sorted((REVIEW / "repos").glob(f"{pattern}.csv"))
        if not files:
            raise SystemExit(f"no listing bench/review/repos/{pattern}.csv")
        for listing in files:
            with open(listing, newline="") as handle:
                repos.extend(row["repo"] for row in csv.DictReader(handle))
    return repos


def preview_variants(listings: tuple[str, ...]) -> set[tuple[str, str, str, str]]:
    """(repo, path, line, code) of the judged findings that were in a preview
    variant of their rule, from `bench/review/judged/<listing>.json`."""
    found: set[tuple[str, str, str, str]] = set()
    for pattern in listings:
        for listing in sorted((REVIEW / "repos").glob(f"{pattern}.csv")):
            judged = REVIEW / "judged" / f"{listing.stem}.json"
            if judged.exists():
                for repo, keys in json.loads(judged.read_text(encoding="utf-8")).items():
                    found.update((repo, path, str(line), code) for path, line, code in keys)
    return found


def heldout_verdicts(listings: tuple[str, ...],
                     rule_listings: dict[str, tuple[str, ...]] | None = None,
                     ) -> dict[str, collections.Counter]:
    """Per rule, how many of its default findings in the held-out sets were
    judged TRUE, FALSE and DEBATABLE (misses are not findings; findings of a
    preview variant are counted under `<code> (preview variant)`). A rule in
    `rule_listings` counts only the sets named there (a rule changed since
    the others were judged is measured on the sets judged after the change)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    variants = preview_variants(listings)
    only = {code: set(heldout_repos(globs)) for code, globs in (rule_listings or {}).items()}
    for repo in heldout_repos(listings):
        path = REVIEW / "verdicts" / f"{repo.replace('/', '+')}.csv"
        if not path.exists():
            continue  # a repository where memlint found nothing
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                if row["verdict"] in VERDICTS and repo in only.get(row["code"], (repo,)):
                    key = (repo, row["path"], row["line"], row["code"])
                    code = row["code"] + (" (preview variant)" if key in variants else "")
                    counts[code][row["verdict"]] += 1
    return counts


def write_judged(listing: str, run_path: Path) -> None:
    """Keep, from a judge's saved run, which findings were in a preview variant."""
    run = json.loads(run_path.read_text(encoding="utf-8"))
    keys = {repo: sorted([f["path"], f["line"], f["code"]] for f in result["findings"]
                         if f.get("preview"))
            for repo, result in run.items()}
    target = REVIEW / "judged" / f"{listing}.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({r: k for r, k in sorted(keys.items()) if k}, indent=1) + "\n",
                      encoding="utf-8")


def per_thousand_files(run_path: Path, work: Path) -> tuple[dict[str, float], int, int]:
    """Findings per 1,000 Python files, per rule, on a saved corpus run."""
    run = json.loads(run_path.read_text(encoding="utf-8"))
    files = 0
    for repo in run:
        tree = work / repo.replace("/", "+")
        if not tree.is_dir():
            raise SystemExit(f"{tree} missing: export the corpus with bench/review/score.py")
        files += sum(1 for path in tree.rglob("*") if path.suffix in (".py", ".ipynb"))
    findings = collections.Counter(f["code"] for result in run.values()
                                   for f in result["findings"])
    return {code: 1000 * n / files for code, n in findings.items()}, files, len(run)


def kept_frequency(source: str) -> tuple[dict[str, float], str]:
    """The frequencies measured.py has now, and `source` saying which corpus
    run they came from (its own words, kept from the figures before)."""
    sys.path.insert(0, str(ROOT))
    from memlint.rules import measured

    frequency = {code: figures.per_thousand_files
                 for code, figures in measured.MEASURED.items()}
    before = measured.SOURCE
    start = before.index("frequency on the review corpus")
    end = before.find(";", start)
    note = " (kept: the corpus was not run again)"
    kept = before[start:end if end >= 0 else len(before)].removesuffix(note)
    return frequency, source + kept + note


def figures_block(listings: tuple[str, ...], source: str,
                  counts: dict[str, collections.Counter], frequency: dict[str, float],
                  rule_listings: dict[str, tuple[str, ...]] | None = None) -> str:
    rows = []
    per_rule = dict(sorted((rule_listings or {}).items()))
    for code in sorted(set(counts) | set(frequency)):
        c = counts.get(code, collections.Counter())
        rows.append(f'    "{code}": Measured(true={c["TRUE"]}, false={c["FALSE"]}, '
                    f'debatable={c["DEBATABLE"]},\n'
                    f'                      per_thousand_files={frequency.get(code, 0.0):.2f}),')
    return (MARK
            + "#: the held-out listings (`bench/review/repos/<glob>.csv`) whose verdicts count\n"
            f"HELDOUT_LISTINGS: tuple[str, ...] = {_tuple_lines(listings)}\n"
            "#: rules measured on some of those listings only (changed since the others)\n"
            f"RULE_LISTINGS: dict[str, tuple[str, ...]] = {_dict_lines(per_rule)}\n"
            "#: what the figures are: which sets, judged at which commit, when; which corpus\n"
            f"SOURCE = ({_wrapped(source)})\n"
            "MEASURED: dict[str, Measured] = {\n" + "\n".join(rows) + "\n}\n")


def _tuple_lines(items: tuple[str, ...], indent: str = "") -> str:
    """One item per line: the listings grow with every held-out set."""
    return "(\n" + "".join(f"{indent}    {item!r},\n" for item in items) + f"{indent})"


def _dict_lines(mapping: dict[str, tuple[str, ...]]) -> str:
    """A dict literal with one entry per line (within the line length)."""
    if not mapping:
        return "{}"
    lines = []
    for key, value in mapping.items():
        line = f"    {key!r}: {value!r},"
        if len(line) > 100:  # a tuple too long for a line: one item per line
            line = f"    {key!r}: {_tuple_lines(value, indent='    ')},"
        lines.append(line + "\n")
    return "{\n" + "".join(lines) + "}"


def _wrapped(text: str, width: int = 80) -> str:
    """A long string as adjacent literals, one per line, so the file stays within
    the line length."""
    pieces = textwrap.wrap(text, width, drop_whitespace=False, break_on_hyphens=False)
    return "\n          ".join(repr(piece) for piece in pieces)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", action="append", required=True, metavar="GLOB",
                        help="a held-out listing, bench/review/repos/<GLOB>.csv (repeatable)")
    parser.add_argument("--judged-at", action="append", required=True, metavar="COMMIT",
                        help="the frozen commit each held-out listing was judged on, in the "
                             "order of --heldout")
    corpus = parser.add_mutually_exclusive_group(required=True)
    corpus.add_argument("--corpus-run", type=Path,
                        help="bench/review/score.py --save of the whole corpus")
    corpus.add_argument("--keep-frequency", action="store_true",
                        help="keep the frequencies measured.py has (the corpus was not run "
                             "again); the source says which run they came from")
    parser.add_argument("--work", type=Path, default=ROOT / ".review")
    parser.add_argument("--rule-heldout", action="append", default=[], metavar="CODE=GLOB",
                        help="count only this listing (one of --heldout's) for this rule "
                             "(repeatable): a rule changed since the other sets were judged")
    parser.add_argument("--judged-run", action="append", default=[], metavar="LISTING=RUN",
                        help="a judge's saved run of a listing: which findings were in a "
                             "preview variant (writes bench/review/judged/LISTING.json)")
    args = parser.parse_args(argv)
    for item in args.judged_run:
        listing, _, run = item.partition("=")
        write_judged(listing, Path(run))

    listings = tuple(args.heldout)
    rule_listings: dict[str, tuple[str, ...]] = {}
    for item in args.rule_heldout:
        code, _, pattern = item.partition("=")
        if pattern not in listings:
            parser.error(f"--rule-heldout {item}: {pattern} is not one of the --heldout listings")
        rule_listings[code] = (*rule_listings.get(code, ()), pattern)
    counts = heldout_verdicts(listings, rule_listings)
    judged = len(heldout_repos(listings))
    source = (f"{judged} held-out repositories ({', '.join(listings)}) judged at "
              f"{' and '.join(commit[:7] for commit in args.judged_at)}, "
              f"{datetime.date.today().isoformat()}; ")
    if args.keep_frequency:
        frequency, source = kept_frequency(source)
    else:
        frequency, files, repos = per_thousand_files(args.corpus_run, args.work)
        source += f"frequency on the review corpus ({repos} repositories, {files} files)"
    if rule_listings:
        source += "; " + ", ".join(f"{code} on {' and '.join(globs)} only"
                                   for code, globs in sorted(rule_listings.items()))
    text = MEASURED.read_text(encoding="utf-8")
    MEASURED.write_text(text[:text.index(MARK)]
                        + figures_block(listings, source, counts, frequency, rule_listings),
                        encoding="utf-8")
    print(f"wrote {MEASURED.relative_to(ROOT)}: {source}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
