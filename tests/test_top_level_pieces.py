"""A tree built from top-level statements parsed one by one (what the editor
server analyses after an edit) gives the findings, positions and fixes of the
file parsed whole, and generates the same code."""

from __future__ import annotations

import libcst as cst
import pytest

from memlint import Settings, check_source
from memlint.engine import chunks
from memlint.engine.chunks import TopLevelTrees, cut_at_statements
from tests.expectations import FIXTURES, fixture_files

FILES = fixture_files(".py")


def findings_of(source: str, path: str) -> list[tuple]:
    return [(f.line, f.column, f.end_line, f.end_column, f.code, f.message, f.preview,
             f.related, f.fix) for f in check_source(source, path, Settings(preview=True))]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_pieces_give_the_findings_of_the_whole_parse(path, monkeypatch):
    source = path.read_text(encoding="utf-8")
    whole = findings_of(source, str(path))
    pieces = TopLevelTrees()
    monkeypatch.setattr(chunks, "PIECES", pieces)
    monkeypatch.setattr("memlint.engine.parsed.PIECES", pieces)
    if not pieces.prepare(source):
        pytest.skip("not cut: parsed whole, as before")
    assert pieces.assemble(source).module.code == source
    assert findings_of(source, str(path)) == whole


SHAPES = {
    "decorated, commented, `a; b`": (
        "# header\n\nimport torch\n\n\n# about f\n@torch.no_grad()\n# between\n@staticmethod\n"
        "def f(x):\n    return x\n    # a trailing comment in the block\n\na = 1; b = (2,\n 3)\n"
        "if a:\n    pass\nelse:\n    pass\n# the end\n"),
    "no newline at the end": "import torch\nx = torch.zeros(3)",
    "only one statement": "x = 1\n",
}


@pytest.mark.parametrize("source", SHAPES.values(), ids=SHAPES.keys())
def test_pieces_join_to_the_text_and_to_its_tree(source):
    pieces = TopLevelTrees()
    assert pieces.prepare(source)
    assembled = pieces.assemble(source)
    assert assembled.module.code == source
    assert assembled.module.deep_equals(cst.parse_module(source)) or "trailing" in source
    lines = source.split("\n")
    for statement in assembled.module.body:  # each statement's first line is where its code is
        start = assembled.first_lines[id(statement)]
        code = cst.Module(body=[statement]).code.split("\n")
        assert lines[start - 1:start - 1 + len(code) - 1] == code[:-1] or code[-1]


@pytest.mark.parametrize("source", [
    "def f(x):\n\treturn x\ndef g(y):\n    return y\n",  # indentation differs between pieces
    "x = 1\r\ny = 2\r\n",  # line endings Python splits otherwise
    "x = (\n",  # not Python
    "# only a comment\n",
])
def test_text_that_cannot_be_cut_is_parsed_whole(source):
    pieces = TopLevelTrees()
    assert not pieces.prepare(source) or pieces.assemble(source) is None


def test_an_edit_parses_only_the_statement_it_changed(monkeypatch):
    source = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(50))
    pieces = TopLevelTrees()
    assert pieces.prepare(source)
    parsed: list[str] = []
    real = cst.parse_module
    monkeypatch.setattr(cst, "parse_module", lambda text: parsed.append(text) or real(text))
    edited = source.replace("x + 7\n", "x * 7\n")
    assert pieces.prepare(edited)
    assert parsed == ["\ndef f7(x):\n    return x * 7\n"]  # its blank line before it too
    assert pieces.assemble(edited).module.code == edited


def test_pieces_of_texts_no_longer_prepared_are_let_go():
    pieces = TopLevelTrees()
    for i in range(chunks.KEPT_TEXTS + 3):
        pieces.prepare(f"x = {i}\n")
    assert pieces.assemble("x = 0\n") is None
    assert len(pieces._pieces) == chunks.KEPT_TEXTS
    assert cut_at_statements("x = 1\ny = 2\n") == ["x = 1\n", "y = 2\n"]


def test_an_edit_is_cut_as_the_whole_text_would_be():
    """Random edits of a real-looking text (insertions and deletions of
    characters, lines, comments, brackets): the cut kept from the last text
    is the cut of the new text made from scratch, or none when that is none."""
    import random

    source = "".join(path.read_text(encoding="utf-8") for path in FILES[:12])
    pieces, rng = TopLevelTrees(), random.Random(7)
    snippets = ["#", "\n", "x = 1\n", "(", ")", "    ", "def g():\n    pass\n", "@d\n", "'''"]
    checked = 0
    for _ in range(300):
        at = rng.randrange(len(source) + 1)
        if rng.random() < 0.5:
            source = source[:at] + rng.choice(snippets) + source[at:]
        else:
            source = source[:at] + source[at + rng.randrange(1, 40):]
        expected = cut_at_statements(source)
        prepared = pieces.prepare(source)
        assert prepared == (expected is not None) or not prepared
        if prepared:
            assert pieces._prepared[-1][1] == expected
            checked += 1
        if expected is None:  # back to a text that parses, as an editor's user does
            source = "".join(path.read_text(encoding="utf-8") for path in FILES[:12])
    assert checked > 100


def _project_of_fixtures(count: int) -> str:
    """Fixtures, each wrapped in its own function (as the server soak does)."""
    parts = ["import torch\n"]
    for index, path in enumerate(FILES[:count]):
        body = "".join(f"    {line}" if line.strip() else line
                       for line in path.read_text(encoding="utf-8").splitlines(keepends=True))
        block = f"\n# {path.name}\ndef fixture_{index}():\n{body}\n    return None\n"
        try:
            compile(block, "block", "exec")
        except SyntaxError:
            continue
        parts.append(block)
    return "".join(parts)


def test_findings_placed_again_after_an_edit_are_where_a_whole_parse_puts_them(monkeypatch):
    """The server places the findings of statements an edit did not touch
    from the ranges of its last analysis, moved by the lines the edit added
    or removed above them; they must be where parsing the new text whole
    puts them, and no code is generated for those statements."""
    from memlint.engine import positions

    source = _project_of_fixtures(60)
    pieces = TopLevelTrees()
    monkeypatch.setattr(chunks, "PIECES", pieces)
    monkeypatch.setattr("memlint.engine.parsed.PIECES", pieces)
    assert pieces.prepare(source)
    first = findings_of(source, "big.py")
    assert len(first) > 20, "too few findings to test their placing"
    generated: list[str] = []
    real = positions._generated
    monkeypatch.setattr(positions, "_generated",
                        lambda module, statement, *rest: generated.append(
                            cst.Module([]).code_for_node(statement)) or real(module, statement, *rest))
    edits = [source.replace("import torch\n", "import torch\n\nA = 1\nB = (2,\n     3)\n", 1),
             source.replace("\n    return None\n", "\n    return None  # edited\n\n\n", 1)]
    for edited in edits:
        generated.clear()
        before = set(pieces._prepared[-1][1])
        assert pieces.prepare(edited)
        kept = findings_of(edited, "big.py")
        monkeypatch.setattr("memlint.engine.parsed.PIECES", TopLevelTrees())  # parsed whole
        assert kept == findings_of(edited, "big.py")
        monkeypatch.setattr("memlint.engine.parsed.PIECES", pieces)
        changed = set(pieces._prepared[-1][1]) - before
        assert all(code in changed for code in generated), "code generated for a kept statement"
