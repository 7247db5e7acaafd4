"""Write rules/README.md, the index of the rule packages, and the measured
columns of README.md's rules table (a test checks both are current).

    python scripts/write_rule_index.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memlint.rules import NAMES_BY_CODE, SEVERITY_BY_CODE, how_it_runs  # noqa: E402
from memlint.rules.catalogue import PACKAGES_BY_CODE  # noqa: E402
from memlint.rules.measured import SOURCE, frequency_of, verdict_of  # noqa: E402

README_HEADER = ("| code | name | flags | severity | runs | precision on unseen code "
                 "| per 1,000 files |\n|---|---|---|---|---|---|---|")


def rule_index() -> str:
    rows = []
    for code, name in NAMES_BY_CODE.items():
        folder = "/".join(PACKAGES_BY_CODE[code].split("."))
        rows.append(f"| [{code}](../{folder}/page.md) | {name} | {SEVERITY_BY_CODE[code]} | "
                    f"[`{folder.rsplit('/', 1)[1]}/`](../{folder}/) |")
    return ("# Rules\n\n"
            "Each rule is one package under `memlint/rules/`: `__init__.py` (its code, name,\n"
            "severity and text screen), `rule.py` (the check, with its VALID/INVALID examples),\n"
            "`page.md` (the reference page `memlint rule CODE` prints) and `verify.py` (how\n"
            "`memlint verify` measures it). Its fixtures are in `fixtures/<name>/`.\n"
            "This index is written by `python scripts/write_rule_index.py`.\n\n"
            "| code | name | severity | package |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")


def measured_cells(code: str) -> str:
    return f"{SEVERITY_BY_CODE[code]} | {how_it_runs(code)} | {verdict_of(code)} | " \
           f"{frequency_of(code)}"


def readme_with_rules_table(readme: str) -> str:
    """README.md with its rules table's measured columns and the line naming
    their source rewritten; the hand-written `flags` column is kept."""
    head, rest = readme.split("\n## Rules\n", 1)
    section, tail = rest.split("\n## ", 1)
    flags = dict(re.findall(r"^\| (MEM\d{3}) \| [a-z0-9-]+ \| (.*?) \|", section, re.M))
    rows = [f"| {code} | {name} | {flags.get(code, '')} | {measured_cells(code)} |"
            for code, name in NAMES_BY_CODE.items()]
    after = section.split("\n\n`memlint rules`", 1)[1]
    table = (f"\n{README_HEADER}\n" + "\n".join(rows) + "\n\nPrecision (TRUE / (TRUE + FALSE)) "
             f"and the share of findings judged debatable: {SOURCE}. A rule runs in "
             "*preview* (only with `--preview`, `preview = true` or its code in `select`) "
             "while its precision on unseen code is below 0.90 or more than a fifth of its "
             "findings are debatable, judged on at least 10 findings "
             "(`memlint/rules/measured.py`).")
    return f"{head}\n## Rules\n{table}\n\n`memlint rules`{after}\n## {tail}"


if __name__ == "__main__":
    (ROOT / "rules" / "README.md").write_text(rule_index(), encoding="utf-8")
    readme = ROOT / "README.md"
    readme.write_text(readme_with_rules_table(readme.read_text(encoding="utf-8")),
                      encoding="utf-8")
