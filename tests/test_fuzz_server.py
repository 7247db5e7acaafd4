"""Fuzzing the server's edits: whatever the encoding, line ends and form feeds
of a document, every quick fix, `# noqa` action and fix-all edit, applied the
way an LSP client applies it (UTF-16 columns, `\\n`, `\\r\\n` and `\\r` all
ending a line), changes exactly what it says and nothing else.

Issue 29 item 4 found each of these by hand (form feeds shifting columns,
mojibake in latin-1 files, a CR-only document duplicated by fix-all); here
hypothesis draws the shapes. Bounded for CI: 15 documents, in-process, in the
slow stage (each document is checked once per action); MEMLINT_FUZZ_SCALE
scales it.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("pygls")

from memlint import Settings  # noqa: E402
from memlint.cli.server import code_actions, findings_for, fixed_text  # noqa: E402

SCALE = int(os.environ.get("MEMLINT_FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
#: text an editor holds, per coding cookie: beyond ASCII, and beyond UTF-16's BMP in UTF-8
ODD_TEXT = {"utf-8": "é😀𝔘", "latin-1": "café", "cp1252": "€‚ƒ", "cp932": "日本語ⅰ",
            "iso2022_jp": "日本語"}
FIXED = ', map_location="cpu"'
LINE_END = re.compile(r"\r\n|\r|\n")
URI = "file:///project/train.py"
PATH = "/project/train.py"


@st.composite
def documents(draw) -> tuple[str, int]:
    """An editor's text with loads to flag; how many."""
    encoding = draw(st.sampled_from(sorted(ODD_TEXT)))
    odd = ODD_TEXT[encoding]
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = [f"# -*- coding: {encoding} -*-", "import torch.cuda"]
    loads = draw(st.integers(1, 3))
    for number in range(loads):
        lead = draw(st.sampled_from(["", "\x0c", "  \x0c"]))
        before = draw(st.sampled_from(["", f"s = {odd!r}; "]))
        note = draw(st.sampled_from(["", f"  # {odd}", "  # noqa: MEM005"]))
        lines += [draw(st.sampled_from([f"# {odd}", "\x0c", ""])),
                  f"{lead}{before}state{number} = torch.load('{odd}.pt'){note}"]
    return end.join(lines) + end, loads


def lsp_lines(text: str) -> list[str]:
    """The document's lines, each with its end, as an LSP client splits them."""
    parts, start = [], 0
    for match in LINE_END.finditer(text):
        parts.append(text[start:match.end()])
        start = match.end()
    parts.append(text[start:])
    return parts


def offset(text: str, position) -> int:
    """An LSP position (line, UTF-16 column) as an index into `text`."""
    lines = lsp_lines(text)
    before = sum(len(line) for line in lines[:position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    units = 0
    for index, char in enumerate(line):
        if units >= position.character:
            return before + index
        units += len(char.encode("utf-16-le")) // 2
    return before + len(line.rstrip("\r\n")) if units >= position.character else before + len(line)


def apply(text: str, edits) -> str:
    """The edits applied as a client applies them: from the end backwards."""
    spans = sorted(((offset(text, e.range.start), offset(text, e.range.end), e.new_text)
                    for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


@pytest.mark.slow
@settings(FUZZ, max_examples=15 * SCALE)
@given(document=documents())
def test_every_server_edit_changes_exactly_what_it_says(document):
    text, loads = document
    every = Settings(select=("MEM007",))
    findings = findings_for(PATH, text, every)
    assert [f.code for f in findings] == ["MEM007"] * loads
    fixed = fixed_text(PATH, text, findings, every)
    actions = code_actions(URI, text, findings, fixed, 0, len(lsp_lines(text)))
    fixes = [a for a in actions if "map_location" in a.title]
    noqas = [a for a in actions if "# noqa" in a.title]
    assert len(fixes) == len(noqas) == loads
    for action in fixes:
        after = apply(text, action.edit.changes[URI])
        assert after.count(FIXED) == 1 and after.replace(FIXED, "") == text
    for action, finding in zip(noqas, findings):
        after = apply(text, action.edit.changes[URI])
        before_lines, after_lines = lsp_lines(text), lsp_lines(after)
        changed = [i for i, (a, b) in enumerate(zip(before_lines, after_lines)) if a != b]
        assert len(before_lines) == len(after_lines) and changed == [finding.line - 1]
        assert "MEM007" in after_lines[finding.line - 1].split("# noqa", 1)[1]
        assert finding.line not in {f.line for f in findings_for(PATH, after, every)}
    whole = [a for a in actions if a.title == "memlint: apply every safe fix"]
    if fixed is not None:
        assert apply(text, whole[0].edit.changes[URI]) == fixed
