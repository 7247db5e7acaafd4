"""Write rules/README.md, the index of the rule packages (a test checks it is current).

    python scripts/write_rule_index.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memlint.rules import NAMES_BY_CODE, SEVERITY_BY_CODE  # noqa: E402
from memlint.rules.catalogue import PACKAGES_BY_CODE  # noqa: E402


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


if __name__ == "__main__":
    (ROOT / "rules" / "README.md").write_text(rule_index(), encoding="utf-8")
