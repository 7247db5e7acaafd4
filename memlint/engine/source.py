"""check_source: one file's text to its findings, the step every surface shares.

Per file: a text pre-filter picks the rules that could fire (`Rule.wants`) (a file no
selected rule can fire on is never parsed), one libcst parse, one walk for all
of them, positions computed only when something was reported.
"""

from __future__ import annotations

import ast
import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.flows import ValueFlows
from memlint.analysis.names import ImportTable
from memlint.analysis.project import (FactCollector, ModuleFacts, Project, cpu_default_options,
                                      imported_modules, mentions_cuda, module_name,
                                      runs_distributed, top_level_functions)
from memlint.analysis.walker import handlers_for, walk
from memlint.engine.positions import positions_of
from memlint.engine.settings import Settings
from memlint.engine.suppression import is_suppressed, skips_file
from memlint.finding import Edit, Finding, Fix, Related
from memlint.rules import ALL_RULES, NAMES_BY_CODE, SEVERITY_BY_CODE, SYNTAX_ERROR_CODE
from memlint.rules.base import FixPlan

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
    rule_types = [r for r in ALL_RULES
                  if r.code in selected and r.wants(source, lowered)]
    if not rule_types and not FactCollector.needs_walk(source):
        return _syntax_check_only(source, path), facts
    with _collector_paused():
        return _check_parsed(source, path, settings, noqa, rule_types, facts), facts


def _check_parsed(source: str, path: str, settings: Settings, noqa: bool,
                  rule_types: list, facts: ModuleFacts) -> list[Finding]:
    module = _parse(source, path)
    if isinstance(module, Finding):
        return [module]
    ctx = Context(ImportTable(), path)
    ctx.analyses[FactCollector] = FactCollector(ctx, facts)
    if facts.copies_to_device:  # what its functions do with their parameters, for other files
        ValueFlows.of(ctx)
    rules = [r(ctx, settings.rule_options.get(r.code)) for r in rule_types]
    walkers = [*ctx.analyses.values(), *rules]  # shared analyses first
    try:
        walk(module, ctx, handlers_for(walkers, "visit_"), handlers_for(walkers, "leave_"))
        for rule in rules:
            rule.finish()
        flows = ctx.analyses.get(ValueFlows)
        if flows is not None:
            facts.parameter_flows = flows.parameter_facts()
    except RecursionError as error:
        raise RuleCrash(f"recursion limit reached while checking: {error}") from error
    except Exception as error:
        raise RuleCrash(f"{type(error).__name__}: {error}") from error
    finally:
        ctx.close()
    reports = [(rule, *report) for rule in rules for report in rule.reports]
    if not reports:
        return []
    try:
        return _place(module, source, path, reports, noqa, settings.severity_of)
    except RecursionError:  # libcst's code generation recurses in Python
        return [syntax_error(path, 1, 1, "cannot analyse the file: nested too deeply for "
                                         "memlint to place its findings")]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """libcst builds hundreds of thousands of acyclic nodes per file; the cyclic
    garbage collector scanning them as they are made costs ~10% of the parse
    and frees nothing (reference counting does)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def _nodes_unvalidated() -> Iterator[None]:
    """Each libcst node checks its own fields as it is made (`_validate`, from
    `cst.CSTNode.__post_init__`): a guard for trees built by hand, ~13% of the parse
    of a tree the parser has just built from valid source (libcst's own comment
    there says validation belongs elsewhere for that reason). Nodes built while
    parsing skip it; nodes built afterwards (the fixes) are still checked."""
    validating = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _no_validation
    try:
        yield
    finally:
        cst.CSTNode.__post_init__ = validating


def _no_validation(node: cst.CSTNode) -> None:
    pass


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
    module = _parse(source, path)
    return [module] if isinstance(module, Finding) else []


def _parse(source: str, path: str) -> cst.Module | Finding:
    """The libcst tree, or the MEM000 finding that says why there is none."""
    too_deep = _nested_too_deeply(source)
    if too_deep is not None:
        return syntax_error(path, *too_deep)
    try:
        with _nodes_unvalidated():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return syntax_error(path, *_parse_failure(source, error))
    except (RecursionError, MemoryError):
        return syntax_error(path, 1, 1, "cannot parse the file: nested too deeply for libcst")
    except Exception as error:  # libcst raises a few non-ParserSyntaxError errors on odd input
        return syntax_error(path, 1, 1, f"cannot parse the file: {error}")


def _place(module: cst.Module, source: str, path: str, reports,
           noqa: bool = True, severity_of=SEVERITY_BY_CODE.get) -> list[Finding]:
    """Turn reported nodes into positioned, unsuppressed, de-duplicated findings."""
    wanted = [n for _, node, stmt, _, _, related, fix in reports
              for n in (node, stmt, *(evidence for evidence, _ in related), *_fixed_nodes(fix))
              if n is not None]
    positions = positions_of(module, wanted)
    lines = LINE_BREAK.split(source)
    findings = set()
    for rule, node, stmt, message, unless, related, plan in reports:
        span = positions[id(node)]
        statement = positions.get(id(stmt))
        line, column = span.start.line, span.start.column
        if statement is not None and statement.start.line < line:
            # reported on the statement's first line, where a user writes `# noqa`
            line, column = statement.start.line, statement.start.column
        # a `# noqa` on any line of a simple statement counts, as in flake8
        last = statement.end.line if isinstance(stmt, cst.SimpleStatementLine) else line
        if noqa and any(is_suppressed(text, rule.code)
                        for text in lines[line - 1:max(line, last)]):
            continue
        findings.add(Finding(path=path, line=line, column=column + 1, code=rule.code,
                             end_line=span.end.line, end_column=span.end.column + 1,
                             name=rule.name, message=message, unless=unless,
                             related=tuple(_related(path, positions, related)),
                             fix=_fix(module, positions, plan, lines),
                             severity=severity_of(rule.code)))
    return sorted(findings)


def _fixed_nodes(plan: FixPlan | None) -> list[cst.CSTNode]:
    if plan is None:
        return []
    return [old for old, _ in plan.replacements] + [node for node, _ in plan.insertions]


def _fix(module: cst.Module, positions, plan: FixPlan | None, lines: list[str]) -> Fix | None:
    """A rule's fix plan with positions: the new code of each replaced node
    (libcst renders it as written, but for the change); each inserted line
    goes above its node's first line, at its indentation, with the file's
    own line ending."""
    if plan is None:
        return None
    edits = []
    for old, new in plan.replacements:
        span = positions[id(old)]
        edits.append(Edit(span.start.line, span.start.column + 1, span.end.line,
                          span.end.column + 1,
                          _code_at(module, new, _indentation(lines[span.start.line - 1]))))
    for node, text in plan.insertions:
        start = positions[id(node)].start
        edits.append(Edit(start.line, start.column + 1, start.line, start.column + 1,
                          text + module.default_newline + _indentation(lines[start.line - 1])))
    return Fix(plan.applicability, plan.message, tuple(sorted(edits, key=_edit_start)))


def _indentation(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _code_at(module: cst.Module, node: cst.CSTNode, indent: str) -> str:
    """The code of `node` as it reads where it stands: the continuation lines
    of a bracketed expression carry their block's indentation, which libcst
    adds from the enclosing blocks (`Module.code_for_node` has none)."""
    from libcst._nodes.internal import CodegenState  # the state code_for_node uses

    state = CodegenState(default_indent=module.default_indent,
                         default_newline=module.default_newline)
    state.indent_tokens = [indent] if indent else []
    node._codegen(state)
    return "".join(state.tokens)


def _edit_start(edit: Edit) -> tuple[int, int]:
    return edit.line, edit.column


def _related(path: str, positions, related) -> list[Related]:
    """The evidence of one finding, where the rule reported it."""
    placed = []
    for node, message in related:
        start = positions[id(node)].start
        placed.append(Related(path=path, line=start.line, column=start.column + 1,
                              message=message))
    return placed


#: libcst's native parser recurses on the machine stack: about 2,000 nested
#: brackets or 10,000 chained operators kill the process (SIGSEGV), and chains
#: in the low thousands already take it seconds to minutes (the time grows with
#: the cube of the length). CPython's own parser refuses such code cleanly, so a
#: file that looks deep is first given to it. The supervisor in `isolation`
#: catches what these cheap looks miss, at the cost of a crash or a timeout.
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


def _parse_failure(source: str, error: cst.ParserSyntaxError) -> tuple[int, int, str]:
    """Where and why the file does not parse. CPython's message is the one users
    know ("Missing parentheses in call to 'print'"), so it is preferred; libcst's
    is the fallback for syntax newer than the running Python."""
    try:
        ast.parse(source)
    except SyntaxError as python_error:
        if python_error.lineno:
            return (python_error.lineno, max(python_error.offset or 1, 1),
                    f"cannot parse the file: {python_error.msg}")
    except (ValueError, RecursionError, MemoryError):
        pass
    line, column = error.raw_line, error.raw_column + 1
    position = _LIBCST_POSITION.search(error.message)
    if position:  # the native parser's raw_column is 0; its message has the real one
        line, column = int(position.group(1)), int(position.group(2)) + 1
    return line, column, f"cannot parse the file: {error.message.removeprefix('parser error: ')}"


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
