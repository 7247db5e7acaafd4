"""Python's line ends and the encoding a file declares on its first lines: the
one definition every reader of source lines uses."""

from __future__ import annotations

import re

#: `\r\n`, `\r` or `\n`; str.splitlines() also splits on form feeds and others,
#: which Python does not end a line on
LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """The lines as Python, libcst and LSP count them, each with its end."""
    return _LINE.findall(text)


def declared_encoding(data: bytes) -> str:
    """The encoding a BOM or coding cookie declares, else UTF-8, as CPython
    reads it: its first two lines, ended by \\n, \\r\\n or \\r alike (tokenize
    alone misses the cookie of a file with \\r line ends). `SyntaxError` as
    `tokenize.detect_encoding`'s."""
    import tokenize

    lines = iter(data.splitlines(keepends=True)[:2])
    encoding, _ = tokenize.detect_encoding(lambda: next(lines, b""))
    return encoding
