"""A rule's reference page (`rules/MEM003.md`), from a checkout or an installed wheel.

The pages live once, in `rules/` at the top of the repository. `memlint/rule_pages`
is a symbolic link to that folder, so the pages are package data: setuptools
copies them into the wheel, and an editable install reads them in place.
Where the link did not survive (a checkout without symlink support) the
folder next to the package is read instead.
"""

from __future__ import annotations

import re

import sys
from pathlib import Path

from memlint import rules as registry
from memlint.rules import NAMES_BY_CODE, SYNTAX_ERROR_CODE

_CHECKOUT_PAGES = Path(__file__).resolve().parents[2] / "rules"


def resolve_code(code_or_name: str) -> str | None:
    """`MEM003`, `mem003` or `tensor-history-kept` -> `MEM003`."""
    wanted = code_or_name.strip()
    if wanted.upper() in NAMES_BY_CODE:
        return wanted.upper()
    return next((code for code, name in NAMES_BY_CODE.items() if name == wanted.lower()), None)


def summary(code: str) -> str:
    """One line for `memlint rules` and SARIF: the first line of the rule module's
    docstring (the class docstring is the long explanation)."""
    if code == SYNTAX_ERROR_CODE:
        return "A file that cannot be read, decoded or parsed (always reported)."
    rule = registry.RULES_BY_CODE[code]  # the rule classes load here, not at start-up
    doc = sys.modules[rule.__module__].__doc__ or rule.__doc__ or rule.name
    return doc.strip().splitlines()[0]


def page(code: str) -> str:
    """The reference page of `code`, or one built from the rule's docstring
    and examples when no page was written for it yet."""
    text = _read_page(code)
    return text if text is not None else _generated_page(code)


def _read_page(code: str) -> str | None:
    from importlib import resources  # start-up: only `memlint rule` reads pages
    packaged = resources.files("memlint").joinpath("rule_pages", f"{code}.md")
    try:
        return packaged.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, OSError):
        pass
    checkout = _CHECKOUT_PAGES / f"{code}.md"
    return checkout.read_text(encoding="utf-8") if checkout.is_file() else None


def _generated_page(code: str) -> str:
    """A new rule module is usable before its page is written."""
    rule = registry.RULES_BY_CODE[code]  # the rule classes load here, not at start-up
    doc = " ".join((rule.__doc__ or "").split())
    flagged = "\n\n".join(f"```python\n{example}\n```" for example in rule.INVALID[:3])
    left_alone = "\n\n".join(f"```python\n{example}\n```" for example in rule.VALID[:3])
    return (f"# {rule.code} {rule.name}\n\n{doc}\n\n## Flagged\n\n{flagged}\n\n"
            f"## Left alone\n\n{left_alone}\n")


def for_terminal(markdown: str, color: bool) -> str:
    """A page as a terminal shows it: headings bold (the title in capitals),
    code blocks indented (and cyan), inline code cyan, the Markdown marks
    that only a renderer reads left out. Without colour, inline code keeps
    its backticks so it still stands out."""
    bold, cyan, reset = ("\033[1m", "\033[36m", "\033[0m") if color else ("", "", "")
    out, in_code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            out.append(f"    {cyan}{line}{reset}" if line else "")
        elif line.startswith("# "):
            out.append(f"{bold}{line[2:].upper()}{reset}")
        elif line.startswith("## "):
            out.append(f"{bold}{line[3:]}{reset}")
        else:
            out.append(re.sub(r"`([^`]+)`", rf"{cyan}\1{reset}", line) if color else line)
    return "\n".join(out) + "\n"
