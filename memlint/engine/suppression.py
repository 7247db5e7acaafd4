"""`# noqa`, `# noqa: MEM003,MEM005` and `# memlint: skip-file`, handled once for all rules."""

from __future__ import annotations

import re

# flake8's own form: codes after a colon, separated by commas and/or spaces.
NOQA_COMMENT = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
NOQA_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)
_SKIP_FILE = re.compile(r"#\s*memlint\s*:\s*skip-file\b", re.IGNORECASE)


def skips_file(source: str) -> bool:
    return "skip-file" in source and _SKIP_FILE.search(source) is not None


def is_suppressed(line_text: str, code: str) -> bool:
    """Whether the reported line's `# noqa` comment covers `code`."""
    if "#" not in line_text:
        return False
    match = NOQA_COMMENT.search(line_text)
    if match is None:
        return False
    codes = match.group("codes")
    if not codes:
        return True
    return any(code.startswith(c.upper()) for c in NOQA_CODE.findall(codes))
