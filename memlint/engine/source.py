"""check_source: one file's text to its findings, the step every surface shares.

Per file: a text pre-filter picks the rules that could fire (`RuleEntry.wants`:
a file no selected rule can fire on is never parsed, and libcst is not even
imported for it), then `engine/parsed.py`: one libcst parse, one walk for all
of them, positions computed only when something was reported.
"""

from __future__ import annotations

import ast
import re
from itertools import accumulate

from memlint.analysis.project import (ModuleFacts, Project, cpu_default_options,
                                      imported_modules, mentions_cuda, module_name,
                                      runs_distributed, top_level_functions)
from memlint.analysis.screens import gives_facts_maybe
from memlint.engine.settings import Settings
from memlint.engine.suppression import skips_file
from memlint.finding import Finding
from memlint.rules import NAMES_BY_CODE, SYNTAX_ERROR_CODE
from memlint.rules.catalogue import CATALOGUE

#: Python's line ends; str.splitlines() also splits on form feeds and others.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


class RuleCrash(Exception):
    """A rule raised on this file: memlint's bug, not the user's."""


def check_source(source: str | bytes, path: str = "<stdin>",
                 settings: Settings | None = None, noqa: bool = True) -> list[Finding]:
    """Findings for one file's text, judged on what that file shows. Raises
    `RuleCrash` if a rule fails.

    `noqa=False` reports findings that `# noqa` comments would hide (flake8's
    `--disable-noqa`)."""
    findings, facts = analyse_source(source, path, settings, noqa)
    return Project([facts]).settle(findings)


def analyse_source(source: str | bytes, path: str, settings: Settings | None = None,
                   noqa: bool = True, module: str | None = None,
                   ) -> tuple[list[Finding], ModuleFacts | None]:
    """One file's findings, some still waiting on the rest of the project
    (`Finding.unless`), and the facts this file gives the project (None when
    it could not be read). `module` is its dotted name in the project."""
    settings = settings or Settings()
    selected = settings.selected_codes(path)
    if isinstance(source, bytes):
        try:
            source = decode(source)
        except Undecodable as error:
            return [syntax_error(path, error.line, error.column,
                                 f"cannot decode the file{error.reason}")], None
    if skips_file(source):
        return [], None
    lowered = source.lower()
    facts = ModuleFacts(path, module_name(path) if module is None else module,
                        mentions_cuda(source, lowered), runs_distributed(source, lowered),
                        imported_modules(source), ".cuda(" in source or ".to(" in source,
                        cpu_default_options=cpu_default_options(source),
                        defines=top_level_functions(source))
    wanted = [entry.code for entry in CATALOGUE
              if entry.code in selected and entry.wants(source, lowered)]
    if not wanted and not gives_facts_maybe(source):
        return _syntax_check_only(source, path), facts
    from memlint.engine.parsed import check_parsed  # libcst and the rules: only now

    return check_parsed(source, path, settings, noqa, wanted, facts), facts


def _syntax_check_only(source: str, path: str) -> list[Finding]:
    """A file no selected rule can fire on still owes its MEM000.

    CPython's parser costs a fraction of libcst's, so it screens the file; only
    when it refuses is libcst asked too, so that syntax newer than the running
    Python (libcst knows it) is not mistaken for an error."""
    try:
        ast.parse(source)
        return []
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    from memlint.engine.parsed import parse  # libcst only for a file CPython refused

    module = parse(source, path)
    return [module] if isinstance(module, Finding) else []


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
_LIBCST_POSITION = re.compile(r"error at (\d+):(\d+)")


def _nested_too_deeply(source: str) -> tuple[int, int, str] | None:
    """(line, column, reason) when the file is nested beyond what CPython accepts;
    checked only for files whose brackets, line lengths or chains make that possible."""
    if not _looks_deep(source):
        return None
    try:
        tree = ast.parse(source)
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


class Undecodable(ValueError):
    """Why the bytes are not Python source text, and where. `reason` follows
    "cannot decode the file"."""

    def __init__(self, line: int, column: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.column, self.reason = line, column, reason


#: byte order marks of encodings that are not ASCII-compatible, so no coding
#: cookie can name them and CPython reads NUL bytes instead
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def decode(data: bytes) -> str:
    """Python's own rules: a BOM or a coding cookie, else UTF-8; what CPython
    refuses (an unknown or non-text codec, a BOM that contradicts the cookie)
    raises `Undecodable` with CPython's reason."""
    import codecs
    import io
    import tokenize

    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise Undecodable(1, 1, f": it is {name} (it starts with a {name} byte order "
                                    f"mark); Python reads only ASCII-compatible encodings, "
                                    f"save it as UTF-8")
    if b"\0" in data:
        raise Undecodable(*_line_and_column(data, data.index(b"\0")),
                          ": it contains NUL bytes (is it a binary file?)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if data.startswith(codecs.BOM_UTF8):
            reason = "its UTF-8 byte order mark contradicts its coding cookie"
        elif error.msg.startswith("invalid or missing encoding declaration"):
            reason = None  # not UTF-8 on its first lines: decoding names the byte
        else:
            reason = error.msg  # `unknown encoding: nosuchcodec`
        if reason is not None:
            raise Undecodable(_cookie_line(data), 1,
                              f": {reason} (Python refuses it too)") from None
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except LookupError as error:  # `# coding: hex`: a codec, but not of text
        raise Undecodable(_cookie_line(data), 1, f": {error} (Python refuses it too)") from None
    except UnicodeDecodeError as error:
        raise Undecodable(*_line_and_column(data, error.start),
                          f" as {error.encoding}: {error.reason} "
                          f"(byte 0x{data[error.start:error.start + 1].hex()}); save it as "
                          f"UTF-8 or declare its encoding in a '# -*- coding: ... -*-' "
                          f"comment") from None
    return text[1:] if text.startswith("\ufeff") else text


def _line_and_column(data: bytes, offset: int) -> tuple[int, int]:
    before = data[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


def _cookie_line(data: bytes) -> int:
    """Where the coding cookie is: a cookie counts on line 1 or 2 only."""
    first, _, rest = data.partition(b"\n")
    return 2 if b"coding" not in first and b"coding" in rest.partition(b"\n")[0] else 1
