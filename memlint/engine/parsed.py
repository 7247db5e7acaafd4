"""The half of `check_source` that needs libcst: one parse, one walk of the
analyses and the rules whose text screen passed, positions and fixes for
what they reported. Imported only when a file has to be parsed, so that a
file no rule wants (and a run answered from the cache) never loads libcst."""

from __future__ import annotations

import gc
import io
import tokenize
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import libcst as cst
from libcst._position import CodePosition, CodeRange

from memlint.analysis.source_lines import LINE_BREAK
from memlint.analysis.context import Context
from memlint.analysis.fact_collector import FactCollector
from memlint.analysis.flows import ValueFlows
from memlint.analysis.names import ImportTable
from memlint.analysis.project import ModuleFacts
from memlint.analysis.walker import handlers_for, walk
from memlint.engine.chunks import PIECES, Assembled
from memlint.engine.positions import positions_of
from memlint.engine.settings import Settings
from memlint.engine.syntax import LIBCST_POSITION, RuleCrash, nested_too_deeply, syntax_error
from memlint.engine.suppression import is_suppressed
from memlint.finding import Edit, Finding, Fix, Related
from memlint.rules import RULES_BY_CODE, SEVERITY_BY_CODE
from memlint.rules.base import FixPlan, Report, Rule
from memlint.analysis.source_lines import parse_quietly


def check_parsed(source: str, path: str, settings: Settings, noqa: bool,
                 codes: list[str], facts: ModuleFacts,
                 informants: list[str] | None = None) -> list[Finding]:
    """The findings of the rules `codes` (those whose screen passed), from one
    parse and one walk; `facts` is filled in as the walk goes, also by the rules
    `informants` (not selected here, walked for what they tell other files only)."""
    with collector_paused():
        return _check_parsed(source, path, settings, noqa, codes, facts, informants or [])


def _check_parsed(source: str, path: str, settings: Settings, noqa: bool,
                  codes: list[str], facts: ModuleFacts, informants: list[str]) -> list[Finding]:
    rule_types = [RULES_BY_CODE[code] for code in [*codes, *informants]]
    assembled = PIECES.assemble(source)  # prepared by the editor server, else None
    module = parse(source, path) if assembled is None else assembled.module
    tabs_expanded = reparsed = async_renamed = False
    if isinstance(module, Finding):
        renamed = _with_async_keyword_renamed(source)
        retried = _with_tabs_expanded(source) if renamed is None else renamed
        if retried is None:
            return [module]
        original, source, module, reparsed = source, retried.code, retried, True
        tabs_expanded, async_renamed = renamed is None, renamed is not None
    ctx = Context(ImportTable(), path)
    if assembled is not None:
        ctx.top_statements = {}
    ctx.analyses[FactCollector] = FactCollector(ctx, facts, source)
    if facts.copies_to_device:  # what its functions do with their parameters, for other files
        ValueFlows.of(ctx)
    rules = [r(ctx, settings.rule_options.get(r.code)) for r in rule_types]
    for rule in rules:
        rule.reporting = rule.code in codes
    walkers = [*ctx.analyses.values(), *rules]  # shared analyses first
    try:
        walk(module, ctx, handlers_for(walkers, "visit_"), handlers_for(walkers, "leave_"))
        for rule in rules:
            rule.finish()
        flows = ctx.analyses.get(ValueFlows)
        if isinstance(flows, ValueFlows):
            facts.parameter_flows = flows.parameter_facts()
            facts.parameter_names = flows.parameter_names()
            facts.batch_movers = flows.batch_movers()
    except RecursionError as error:
        raise RuleCrash(f"recursion limit reached while checking: {error}") from error
    except Exception as error:
        raise RuleCrash(f"{type(error).__name__}: {error}") from error
    finally:
        ctx.close()
    # reparsed, no edit computed on the text memlint changed may reach the file
    reports = [(rule, report._replace(fix=None) if reparsed else report)
               for rule in rules if rule.code in codes for report in rule.reports
               if not report.preview or settings.shows_preview(rule.code)]
    if async_renamed:  # messages quote the code as the file writes it
        reports = [(rule, report._replace(message=report.message.replace(
            f"{_ASYNC_STAND_IN}=", "async="))) for rule, report in reports]
    if not reports:
        return []
    try:
        placed = _place(module, source, path, reports, noqa, settings.severity_of,
                        ctx.top_statements, assembled)
        return _original_columns(placed, original) if tabs_expanded else placed
    except RecursionError:  # libcst's code generation recurses in Python
        return [syntax_error(path, 1, 1, "cannot analyse the file: nested too deeply for "
                                         "memlint to place its findings")]


@contextmanager
def collector_paused() -> Iterator[None]:
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
    # setattr: assigning to a method is what this does, on purpose
    setattr(cst.CSTNode, "__post_init__", _no_validation)
    try:
        yield
    finally:
        setattr(cst.CSTNode, "__post_init__", validating)


def _no_validation(node: cst.CSTNode) -> None:
    pass


def parse(source: str, path: str) -> cst.Module | Finding:
    """The libcst tree, or the MEM000 finding that says why there is none."""
    too_deep = nested_too_deeply(source)
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


def _with_tabs_expanded(source: str) -> cst.Module | None:
    """The tree of a file Python compiles but libcst's tokenizer rejects for
    its indentation (a tab and then spaces, `\t    return x`): parsed with
    the indentation's tabs expanded as Python reads them (to the next
    multiple of 8). Columns on those lines are the expanded ones, and the
    findings carry no fix. None when Python rejects the file too."""
    if "\t" not in source:
        return None
    try:
        parse_quietly(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = source.splitlines(keepends=True)
    expanded = "".join(_expand_indent(line) for line in lines)
    try:
        with _nodes_unvalidated():
            return cst.parse_module(expanded)
    except Exception:  # noqa: BLE001 - still unparsable: the MEM000 stands
        return None


#: what `async=` is renamed to for the parse: as long, so every column stays
_ASYNC_STAND_IN = "asyn_"


def _with_async_keyword_renamed(source: str) -> cst.Module | None:
    """The tree of a file written for PyTorch before 0.4 and Python before
    3.7, whose `x.cuda(async=True)` (what `non_blocking=True` was called) no
    later Python parses: parsed with the keyword argument renamed `asyn_`,
    the same length, so every column stays; the findings carry no fix (an
    edit made on the renamed text must never reach the file). None when the
    file has no such argument or is still unparsable."""
    if "async" not in source:
        return None
    lines = io.StringIO(source).readlines()  # the lines as the tokenizer numbers them
    renamed = False
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE)]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    for before, token, after in zip(tokens, tokens[1:], tokens[2:]):
        if token.type == tokenize.NAME and token.string == "async" \
                and before.string in ("(", ",") and after.string == "=" \
                and token.start[0] == token.end[0]:
            row, col = token.start
            line = lines[row - 1]
            lines[row - 1] = line[:col] + _ASYNC_STAND_IN + line[col + len("async"):]
            renamed = True
    if not renamed:
        return None
    try:
        with _nodes_unvalidated():
            return cst.parse_module("".join(lines))
    except Exception:  # noqa: BLE001 - still unparsable: the MEM000 stands
        return None


def _original_columns(findings: list[Finding], original: str) -> list[Finding]:
    """Columns on the lines whose indentation was expanded, counted again in
    the file's own characters (a tab is one)."""
    lines = LINE_BREAK.split(original)

    def shift(line: int) -> int:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        return len(_expand_indent(text)) - len(text)

    return [replace(f, column=max(1, f.column - shift(f.line)),
                    end_column=max(1, f.end_column - shift(f.end_line)))
            for f in findings]


def _expand_indent(line: str) -> str:
    body = line.lstrip(" \t")
    return line[:len(line) - len(body)].expandtabs(8) + body


def _rule_severity(code: str, reported: str | None = None) -> str:
    return reported or SEVERITY_BY_CODE.get(code, "warning")


def _place(module: cst.Module, source: str, path: str, reports: list[tuple[Rule, Report]],
           noqa: bool = True, severity_of=_rule_severity,
           tops: dict[int, cst.CSTNode] | None = None,
           assembled: Assembled | None = None) -> list[Finding]:
    """Turn reported nodes into positioned, unsuppressed, de-duplicated findings
    (`tops` and the `assembled` pieces' lines and texts: see `positions_of`)."""
    wanted = [n for _, (node, stmt, _, _, related, fix, *_) in reports
              for n in (node, stmt, *(evidence for evidence, _ in related), *_fixed_nodes(fix))
              if n is not None]
    lines = LINE_BREAK.split(source)
    positions = positions_of(module, wanted, tops) if assembled is None else \
        positions_of(module, wanted, tops, assembled.first_lines, assembled.texts,
                     PIECES.positions)
    if "\f" in source:
        positions = _form_feeds_counted(positions, lines)
    findings = set()
    for rule, (node, stmt, message, unless, related, plan, severity, preview) in reports:
        span = positions[id(node)]
        statement = positions.get(id(stmt))
        line, column = span.start.line, span.start.column
        if statement is not None and statement.start.line < line:
            # reported on the statement's first line, where a user writes a noqa comment
            line, column = statement.start.line, statement.start.column
        # a noqa comment on any line of a simple statement counts, as in flake8
        last = statement.end.line if statement is not None and \
            isinstance(stmt, cst.SimpleStatementLine) else line
        if noqa and any(is_suppressed(text, rule.code)
                        for text in lines[line - 1:max(line, last)]):
            continue
        findings.add(Finding(path=path, line=line, column=column + 1, code=rule.code,
                             end_line=span.end.line, end_column=span.end.column + 1,
                             name=rule.name, message=message, unless=unless,
                             related=tuple(_related(path, positions, related)),
                             fix=_fix(module, positions, plan, lines),
                             severity=severity_of(rule.code, severity), preview=preview))
    return sorted(findings)


def _form_feeds_counted(positions: dict, lines: list[str]) -> dict:
    """Columns counted on the file's own lines: libcst drops the indentation
    up to a line's last leading form feed (Python restarts counting it there),
    so its columns on such a line are short by that much."""
    def dropped(line: int) -> int:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        indentation = text[:len(text) - len(text.lstrip(" \t\f"))]
        return indentation.rfind("\f") + 1

    def moved(position: CodePosition) -> CodePosition:
        return CodePosition(position.line, position.column + dropped(position.line))

    return {key: CodeRange(moved(span.start), moved(span.end)) for key, span in positions.items()}


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


def _parse_failure(source: str, error: cst.ParserSyntaxError) -> tuple[int, int, str]:
    """Where and why the file does not parse. CPython's message is the one users
    know ("Missing parentheses in call to 'print'"), so it is preferred; libcst's
    is the fallback for syntax newer than the running Python."""
    try:
        parse_quietly(source)
    except SyntaxError as python_error:
        if python_error.lineno:
            return (python_error.lineno, max(python_error.offset or 1, 1),
                    f"cannot parse the file: {python_error.msg}")
    except (ValueError, RecursionError, MemoryError):
        pass
    line, column = error.raw_line, error.raw_column + 1
    position = LIBCST_POSITION.search(error.message)
    if position:  # the native parser's raw_column is 0; its message has the real one
        line, column = int(position.group(1)), int(position.group(2)) + 1
    return line, column, f"cannot parse the file: {error.message.removeprefix('parser error: ')}"
