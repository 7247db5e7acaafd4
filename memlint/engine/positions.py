"""Line and column of the few nodes a file reports, without libcst's PositionProvider.

PositionProvider first runs a batched visit of the whole tree, then generates
the code recording a range for every node and splitting every token with a
regular expression; on a file with a finding that cost up to 4x its parse.
Generating the code once with a state that only counts characters, and
records ranges just for the nodes asked about, gives the same ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst._position import CodePosition, CodeRange


class _TargetedPositionState(CodegenState):
    """Counts lines and columns as tokens are written; keeps no text."""

    def __init__(self, module: cst.Module, wanted: set[int]) -> None:
        super().__init__(default_indent=module.default_indent,
                         default_newline=module.default_newline)
        self.wanted = wanted
        self.line = 1  # one-based, as PositionProvider
        self.column = 0  # zero-based
        self.ranges: dict[int, CodeRange] = {}
        self._starts: dict[int, CodePosition] = {}

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        if "\r" in value:
            value = value.replace("\r\n", "\n").replace("\r", "\n")
        breaks = value.count("\n")
        if breaks:
            self.line += breaks
            self.column = len(value) - value.rfind("\n") - 1
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.wanted:
            self._starts[id(node)] = CodePosition(self.line, self.column)

    def after_codegen(self, node: cst.CSTNode) -> None:
        """Nodes that record no syntactic range (whitespace, some end nodes) get
        the whole span they generated, as in PositionProvider."""
        start = self._starts.pop(id(node), None)
        if start is not None and id(node) not in self.ranges:
            self.ranges[id(node)] = CodeRange(start, CodePosition(self.line, self.column))

    def pop_trailing_newline(self) -> None:
        """Nothing to pop: no text is kept, and the end of the file moves nothing."""

    @contextmanager
    def record_syntactic_position(self, node: cst.CSTNode, *,
                                  start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> Iterator[None]:
        if id(node) not in self.wanted:
            yield
            return
        # a statement's range is hoisted from its first and last children
        for child in (start_node, end_node):
            if child is not None:
                self.wanted.add(id(child))
        start = CodePosition(self.line, self.column)
        yield
        end = CodePosition(self.line, self.column)
        if start_node is not None:
            start = self.ranges[id(start_node)].start
        if end_node is not None:
            end = self.ranges[id(end_node)].end
        self.ranges[id(node)] = CodeRange(start, end)


class KnownPositions:
    """Ranges found in earlier analyses, by the text of the top-level statement
    they are in, relative to its first line: an edit elsewhere moves that
    statement down or up but keeps its nodes (`engine/chunks.py` reuses them),
    so the editor server places its findings again without generating code.
    Kept by the owner of the pieces, which forgets a statement's ranges when
    it forgets the statement (a node's id may then be another node's)."""

    def __init__(self) -> None:
        self._by_text: dict[str, dict[int, CodeRange]] = {}

    def of(self, text: str) -> dict[int, CodeRange]:
        return self._by_text.setdefault(text, {})

    def keep_only(self, texts: set[str]) -> None:
        for text in [t for t in self._by_text if t not in texts]:
            del self._by_text[text]


#: the key of a top-level statement's own range among those of its nodes: the
#: statement is rebuilt with each assembly, its nodes are not
_ITSELF = 0


def positions_of(module: cst.Module, nodes: Iterable[cst.CSTNode],
                 tops: dict[int, cst.CSTNode] | None = None,
                 first_lines: dict[int, int] | None = None,
                 texts: dict[int, str] | None = None,
                 known: KnownPositions | None = None) -> dict[int, CodeRange]:
    """`id(node) -> CodeRange` for `nodes`, in PositionProvider's convention
    (lines one-based, columns zero-based, whitespace not included). The one
    difference: the Module's own end is not moved back over the file's last
    newline; a module is never reported.

    Given the top-level statement of each node (`tops`) and the line each
    top-level statement starts on (`first_lines`), only the statements that
    hold a node generate their code: a finding in a 300 KB file costs its
    own function's code, not the file's. Given each statement's text
    (`texts`) and the ranges of earlier analyses (`known`), a statement
    whose nodes all have a known range generates none."""
    nodes = list(nodes)
    holding = _statements_holding(nodes, tops, first_lines)
    if holding is None:
        state = _TargetedPositionState(module, {id(node) for node in nodes})
        module._codegen(state)
        return state.ranges
    assert tops is not None and first_lines is not None
    wanted: dict[int, set[int]] = {id(statement): set() for statement in holding}
    for node in nodes:
        top = tops[id(node)]
        wanted[id(top)].add(_ITSELF if node is top else id(node))
    ranges: dict[int, CodeRange] = {}
    for statement in holding:
        first = first_lines[id(statement)]
        text = texts.get(id(statement)) if texts is not None else None
        relative = known.of(text) if known is not None and text is not None else {}
        asked = wanted[id(statement)]
        if not asked <= relative.keys():
            relative.update(_generated(module, statement, asked, first))
        for key in asked:
            ranges[id(statement) if key == _ITSELF else key] = _moved(relative[key], first - 1)
    return ranges


def _generated(module: cst.Module, statement: cst.CSTNode, asked: set[int],
               first: int) -> dict[int, CodeRange]:
    """The ranges of the nodes `asked` (`_ITSELF`: the statement) relative to the
    statement's first line, from its code alone."""
    state = _TargetedPositionState(module, {id(statement) if key == _ITSELF else key
                                            for key in asked})
    state.line, state.column = 1, 0
    statement._codegen(state)
    return {key: state.ranges[id(statement) if key == _ITSELF else key] for key in asked}


def _moved(span: CodeRange, lines: int) -> CodeRange:
    if not lines:
        return span
    return CodeRange(CodePosition(span.start.line + lines, span.start.column),
                     CodePosition(span.end.line + lines, span.end.column))


def _statements_holding(nodes: list[cst.CSTNode], tops: dict[int, cst.CSTNode] | None,
                        first_lines: dict[int, int] | None) -> list[cst.CSTNode] | None:
    """The top-level statements the nodes are in, each once; None when one
    of them is not known (then the whole module generates its code)."""
    if tops is None or first_lines is None:
        return None
    holding: dict[int, cst.CSTNode] = {}
    for node in nodes:
        top = tops.get(id(node))
        if top is None or id(top) not in first_lines:
            return None
        holding[id(top)] = top
    return list(holding.values())
