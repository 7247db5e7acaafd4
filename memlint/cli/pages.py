"""A rule's reference page: `page.md` in the rule's package
(`memlint/rules/mem003_tensor_history_kept/page.md`), package data in a wheel
and read in place from a checkout."""

from __future__ import annotations

import re

import sys

from memlint import rules as registry
from memlint.rules import NAMES_BY_CODE, SYNTAX_ERROR_CODE
from memlint.rules.catalogue import PACKAGES_BY_CODE


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
    try:
        return resources.files(PACKAGES_BY_CODE[code]).joinpath("page.md").read_text(
            encoding="utf-8")
    except (KeyError, OSError):
        return None


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
