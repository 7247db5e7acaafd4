"""`--add-noqa`: a `# noqa: CODE` comment for every finding, as ruff's adds
them, so a large codebase can adopt memlint and fail only on new code.

The comment goes on the finding's line, where memlint looks for it, unless
that line ends inside a string or with a backslash (a comment there would
change the code); then it goes on the last line of the statement, which
memlint also reads for a simple statement.
"""

from __future__ import annotations

import io
import tokenize

from memlint.analysis.source_lines import LINE_BREAK
from memlint.engine.suppression import NOQA_CODE, NOQA_COMMENT
from memlint.finding import Finding
from memlint.rules import SYNTAX_ERROR_CODE


def add_noqa(text: str, findings: list[Finding]) -> tuple[str, int]:
    """`text` with the comments added, and how many lines got one."""
    codes_by_line: dict[int, set[str]] = {}
    movable = _comment_lines(text)
    for finding in findings:
        if finding.code != SYNTAX_ERROR_CODE:
            line = movable.get(finding.line, finding.line)
            codes_by_line.setdefault(line, set()).add(finding.code)
    lines = LINE_BREAK.split(text)
    breaks = LINE_BREAK.findall(text)
    for number, codes in codes_by_line.items():
        lines[number - 1] = _with_noqa(lines[number - 1], codes)
    rebuilt = [line + ending for line, ending in zip(lines, breaks + [""])]
    return "".join(rebuilt), len(codes_by_line)


def _with_noqa(line: str, codes: set[str]) -> str:
    """The line with its `# noqa` naming `codes` too (a bare one covers all)."""
    match = NOQA_COMMENT.search(line) if "#" in line else None
    if match is None:
        return f"{line.rstrip()}  # noqa: {', '.join(sorted(codes))}"
    if not match.group("codes"):
        return line
    known = {code.upper() for code in NOQA_CODE.findall(match.group("codes"))}
    merged = ", ".join(sorted(known | codes))
    return f"{line[:match.start()]}# noqa: {merged}{line[match.end():]}"


def _comment_lines(text: str) -> dict[int, int]:
    """line -> the line to comment instead, for lines that end inside a
    string or with a backslash: the last line of their statement."""
    physical = LINE_BREAK.split(text)
    moved: dict[int, int] = {}
    first: int | None = None
    inside_strings: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in _STRINGS:
                inside_strings.update(range(token.start[0], token.end[0]))
            if token.type == tokenize.NEWLINE and first is not None:
                last = token.start[0]
                moved.update((number, last) for number in range(first, last)
                             if number in inside_strings or physical[number - 1].endswith("\\"))
                first, inside_strings = None, set()
            elif first is None and token.type not in _BETWEEN_STATEMENTS:
                first = token.start[0]
    except (tokenize.TokenError, SyntaxError):  # a file memlint could parse, so rare
        pass
    return moved


_STRINGS = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
_BETWEEN_STATEMENTS = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                       tokenize.ENCODING}
