"""Python's line ends, the encoding a file declares on its first lines, and a
parse that keeps Python's warnings about the user's code to itself: the one
definition every reader of source lines uses."""

from __future__ import annotations

import ast
import re
import warnings

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


def parse_quietly(source: str | bytes) -> ast.Module:
    """`ast.parse`, without Python's warnings about the user's code
    (`1if x else 2`, an invalid escape sequence) printed on memlint's stderr:
    they are not memlint's findings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # escapes, before 3.12
        return ast.parse(source)
