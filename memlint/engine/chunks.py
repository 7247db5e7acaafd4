"""A file's tree from its top-level statements parsed one by one, reused by
their text: an editor's keystroke changes one statement, so the server
parses that one again, not the 300 KB around it (issue 29).

`TopLevelTrees.prepare(source)` cuts the text at its top-level statements
(Python's own parser says where they end, in C, a twentieth of libcst's
time), parses the pieces it has not seen, and keeps them; `assemble(source)`
then builds the libcst Module of that exact text from the pieces, with each
top-level statement's first line (the positions of reported nodes need code
generated for their own statement only). The editor server's worker,
kept across analyses (`paths.check_keeping_pieces`), prepares each text it
is given, so it keeps the pieces from one version to the next. A text
that cannot be cut so that the pieces make the same code (mixed
indentation or line endings, a statement libcst reads differently)
is parsed whole, as `memlint check` always does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import libcst as cst

from memlint.engine.positions import KnownPositions
from memlint.analysis.source_lines import parse_quietly


class Piece(NamedTuple):
    """One top-level statement (or `a; b` line) parsed alone."""

    module: cst.Module
    has_blocks: bool  #: an indented block, whose indentation follows the module's default
    lines: int  #: how many lines its text spans


class Assembled(NamedTuple):
    module: cst.Module
    #: id of each top-level statement -> the line its code starts on (its
    #: leading comments and blank lines included), one-based
    first_lines: dict[int, int]
    #: id of a top-level statement -> the text of its piece, for those whose
    #: nodes are the piece's own (not the first: its header is the module's;
    #: not a copy of a piece whose text comes twice)
    texts: dict[int, str]


#: how many prepared texts keep their pieces (an editor with a few files open)
KEPT_TEXTS = 4


class TopLevelTrees:
    """Pieces by their text, for the last `KEPT_TEXTS` texts prepared."""

    def __init__(self) -> None:
        self._pieces: dict[str, Piece] = {}
        self._prepared: list[tuple[str, list[str]]] = []  # (text, its pieces' texts), newest last
        #: where the reported nodes of the kept pieces are (`engine/positions.py`)
        self.positions = KnownPositions()

    def prepare(self, source: str) -> bool:
        """Cut and parse `source` so that `assemble` can build its tree; False
        when it cannot be cut (the caller parses it whole)."""
        if any(text == source for text, _ in self._prepared):
            return True
        texts = self._cut_again(source) if self._prepared else None
        if texts is None:
            texts = cut_at_statements(source)
        if texts is None:
            return False
        for text in texts:
            if text not in self._pieces:
                try:
                    module = cst.parse_module(text)
                except Exception:  # libcst reads it otherwise than Python: parse whole
                    return False
                self._pieces[text] = Piece(module, _has_blocks(module), text.count("\n"))
        self._prepared.append((source, texts))
        del self._prepared[:-KEPT_TEXTS]
        live = {text for _, kept in self._prepared for text in kept}
        for text in [t for t in self._pieces if t not in live]:
            del self._pieces[text]
        self.positions.keep_only(live)
        return True

    def _cut_again(self, source: str) -> list[str] | None:
        """The cut of `source`, an edit of the text prepared last: its pieces
        before and after the edit are kept, the stretch between them, with
        one whole piece on each side (whose edges are statement edges in both
        texts), cut anew. Whole top-level statements around a stretch that
        Python parses alone parse the same way around it, so the pieces are
        those `cut_at_statements(source)` gives, for a fraction of its time.
        None when the stretch does not parse alone."""
        _, old = self._prepared[-1]
        before, at = 0, 0
        while before < len(old) and source.startswith(old[before], at):
            at += len(old[before])
            before += 1
        after, end = 0, len(source)
        while after < len(old) - before and source.endswith(old[-1 - after], at, end):
            end -= len(old[-1 - after])
            after += 1
        before, after = max(before - 1, 0), max(after - 1, 0)
        start = sum(map(len, old[:before]))
        stop = len(source) - sum(len(text) for text in old[len(old) - after:])
        middle = cut_at_statements(source[start:stop]) if stop > start else []
        if middle is None or (not middle and not (before or after)):
            return None
        return [*old[:before], *middle, *old[len(old) - after:]]

    def assemble(self, source: str) -> Assembled | None:
        """The tree of a prepared `source`, built from its pieces; None when
        it was not prepared or its pieces would generate other code."""
        texts = next((kept for text, kept in self._prepared if text == source), None)
        if texts is None:
            return None
        return join_pieces([self._pieces[text] for text in texts], texts)


def cut_at_statements(source: str) -> list[str] | None:
    """`source` cut before each top-level statement's leading comments and
    blank lines, and after its last line (so the pieces join to `source`);
    `a; b` on one line stays one piece, as in libcst. None when Python cannot
    parse it or there is nothing to cut."""
    if "\r" in source or "\f" in source or "\v" in source:
        return None  # other line breaks: Python's lines are not str.splitlines's
    try:
        tree = parse_quietly(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not tree.body:
        return None
    ends: list[int] = []  # last line of each piece
    simple_before = False
    for statement in tree.body:
        simple = not hasattr(statement, "body")
        start = min([statement.lineno, *(d.lineno for d in
                                         getattr(statement, "decorator_list", ()))])
        end = statement.end_lineno or start
        if ends and simple and simple_before and start == ends[-1]:
            ends[-1] = end  # `a = 1; b = 2`: one statement line for libcst
        else:
            ends.append(end)
        simple_before = simple
    lines = source.split("\n")
    lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    pieces, done = [], 0
    for index, end in enumerate(ends):
        last = len(lines) if index == len(ends) - 1 else end
        pieces.append("".join(lines[done:last]))
        done = last
    return pieces if all(pieces) else None


def join_pieces(pieces: Sequence[Piece], texts: Sequence[str]) -> Assembled | None:
    """One Module of the pieces' statements: the first piece's header, the
    last one's footer; a later piece's header (its leading comments) goes to
    its statement's leading lines, where a whole parse puts them. None when
    the pieces' code would differ from the text's: a piece libcst reads as
    several statements, or with other line endings or (around an indented
    block) another indentation than the first piece's. `texts`: the pieces'
    texts, for `Assembled.texts`."""
    first, last = pieces[0].module, pieces[-1].module
    indent, newline = first.default_indent, first.default_newline
    body: list[cst.BaseStatement] = []
    first_lines: dict[int, int] = {}
    by_text: dict[int, str] = {}
    line = 1
    used: set[int] = set()
    for index, piece in enumerate(pieces):
        module = piece.module
        if len(module.body) != 1 or module.default_newline != newline \
                or (piece.has_blocks and module.default_indent != indent) \
                or (module is not last and module.footer):
            return None
        statement = module.body[0]
        copied = id(statement) in used
        if copied:  # the same text twice: the analyses tell nodes apart by id
            statement = statement.deep_clone()
        used.add(id(module.body[0]))
        if index:
            statement = statement.with_changes(
                leading_lines=(*module.header, *statement.leading_lines))
            first_lines[id(statement)] = line
            if not copied:
                by_text[id(statement)] = texts[index]
        else:
            first_lines[id(statement)] = line + len(module.header)
        body.append(statement)
        line += piece.lines
    module = first.with_changes(body=body, footer=last.footer,
                                has_trailing_newline=last.has_trailing_newline)
    return Assembled(module, first_lines, by_text)


def _has_blocks(module: cst.Module) -> bool:
    return any(not isinstance(statement, cst.SimpleStatementLine) for statement in module.body)


#: the pieces of the texts the editor server prepared (empty elsewhere:
#: `memlint check` parses every file whole)
PIECES = TopLevelTrees()
