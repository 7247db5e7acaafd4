"""What can be said of a file that does not parse, or would not parse safely:
the MEM000 finding, the screen for nesting deep enough to crash a parser, and
the error a crashing rule becomes. Shared by the text-only and libcst halves
of the engine (`source.py`, `parsed.py`)."""

from __future__ import annotations

import ast
import re
from itertools import accumulate

from memlint.analysis.source_lines import parse_quietly
from memlint.finding import Finding
from memlint.rules import NAMES_BY_CODE, SYNTAX_ERROR_CODE


class RuleCrash(Exception):
    """A rule raised on this file: memlint's bug, not the user's."""


_BRACKETS = re.compile(r"[()\[\]{}]")
_SUSPICIOUS_DEPTH = 100
_SUSPICIOUS_LINE_LENGTH = 2000
#: 50 lines in a row that each start with an operator: an expression chained
#: over many lines (`not` / `-` / `+ 1` / `.attr` / `\`-continued), never seen
#: in real code. The pattern starts with a literal so that it scans fast.
_OPERATOR_LINE = r"\n[ \t]*(?:(?:not|and|or|is|in|if|else)\b|[-+~*/%@&|^.<>=!])[^\n]{0,80}"
_CHAINED_LINES = re.compile(_OPERATOR_LINE * 2 + f"(?:{_OPERATOR_LINE}){{48}}")
_CONTINUED_LINES = re.compile(r"(?:\\\r?\n[^\n]{0,80}){50}")
_OPENING_RUN = re.compile(r"[(\[{](?:[^()\[\]{}]*[(\[{]){%d}" % _SUSPICIOUS_DEPTH)
_DEPTH_ERRORS = ("too many nested parentheses", "too many levels of indentation",
                 "too many statically nested blocks")
LIBCST_POSITION = re.compile(r"error at (\d+):(\d+)")


def nested_too_deeply(source: str) -> tuple[int, int, str] | None:
    """(line, column, reason) when the file is nested beyond what CPython accepts;
    checked only for files whose brackets, line lengths or chains make that possible."""
    if not _looks_deep(source):
        return None
    try:
        tree = parse_quietly(source)
    except (RecursionError, MemoryError):
        line = _where_deep(source)
        return line, 1, (f"cannot parse the file: an expression from line {line} is nested or "
                         f"chained too deeply (Python refuses it too)")
    except SyntaxError as error:
        if error.msg.startswith(_DEPTH_ERRORS):
            return error.lineno or 1, error.offset or 1, f"cannot parse the file: {error.msg}"
        return None
    except ValueError:  # source code string cannot contain null bytes
        return None
    # Python 3.10 accepts chains (`a.b.b...`, `1+1+...`) that later versions
    # refuse and that libcst takes minutes on, so measure the depth itself
    deepest = _deepest_node(tree)
    if deepest is not None:
        depth, line, column = deepest
        return line, column, (f"cannot parse the file: expressions nested {depth} deep "
                              f"(libcst handles up to {_LIBCST_MAX_DEPTH})")
    return None


_LIBCST_MAX_DEPTH = 1000


def _deepest_node(tree: ast.AST) -> tuple[int, int, int] | None:
    """(depth, line, column) of the first node nested deeper than libcst copes with."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > _LIBCST_MAX_DEPTH:
            return depth, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


def _looks_deep(source: str) -> bool:
    if max(map(len, source.split("\n")), default=0) > _SUSPICIOUS_LINE_LENGTH:
        return True
    if _CHAINED_LINES.search(source) or (source.count("\\\n") >= 50
                                         and _CONTINUED_LINES.search(source)):
        return True
    return _bracket_depth(source) > _SUSPICIOUS_DEPTH


_BRACKET_STEP = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def _bracket_depth(source: str) -> int:
    """How deep the brackets nest, counting each bracket (in strings and
    comments too), a closing one with none open left uncounted.

    The running depth without that floor at 0 is `levels` (summed in C by
    `accumulate`, 3x faster than a Python loop per bracket); with it, the depth
    at each point is `levels` less the lowest of `levels` so far when that is
    negative."""
    levels = list(accumulate(map(_BRACKET_STEP.__getitem__, _BRACKETS.findall(source))))
    if not levels:
        return 0
    deepest = max(levels)
    if min(levels) < 0:  # a closing bracket with none open: the floor matters
        deepest = max(deepest, max(map(int.__sub__, levels, accumulate(levels, min))))
    return deepest


def _where_deep(source: str) -> int:
    """The line where a deep chain or bracket run starts (1 if none is found), for
    a file CPython refused without saying where."""
    starts = [m.start() + 1 for p in (_CHAINED_LINES, _CONTINUED_LINES, _OPENING_RUN)
              if (m := p.search(source))]
    return source.count("\n", 0, min(starts)) + 1 if starts else 1


def syntax_error(path: str, line: int, column: int, message: str) -> Finding:
    return Finding(path=path, line=line, column=column, code=SYNTAX_ERROR_CODE,
                   end_line=line, end_column=column, name=NAMES_BY_CODE[SYNTAX_ERROR_CODE],
                   message=message, severity="error")


