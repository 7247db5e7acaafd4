"""Python's line ends, the one definition every reader of source lines uses."""

from __future__ import annotations

import re

#: `\r\n`, `\r` or `\n`; str.splitlines() also splits on form feeds and others,
#: which Python does not end a line on
LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """The lines as Python, libcst and LSP count them, each with its end."""
    return _LINE.findall(text)
