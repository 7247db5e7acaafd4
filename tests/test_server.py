"""`memlint server` in a real LSP session: pygls's client starts the console
script over stdio, then initialize, didOpen, diagnostics received, codeAction
(the fix, the `# noqa`, fix-all), didSave after an edit, shutdown."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from memlint.cli.server import noqa_line, utf16_column  # noqa: E402

SOURCE = '''import torch

model = torch.nn.Linear(2, 2).cuda()

def resume(path):
    model.load_state_dict(torch.load(path))
'''
LOAD_LINE = 5  # 0-based, as LSP counts
BROKEN = "def broken(:\n    pass\n"


def _memlint_command() -> list[str]:
    script = shutil.which("memlint", path=os.path.dirname(sys.executable))
    return [script, "server"] if script else [sys.executable, "-m", "memlint", "server"]


async def _session(tmp_path: Path, steps):
    """Start the server, initialize, run `steps(client, diagnostics)`, shut down."""
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\n")
    client = LanguageClient("memlint-test", "1")
    diagnostics: dict[str, asyncio.Queue] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def received(params: types.PublishDiagnosticsParams) -> None:
        diagnostics.setdefault(params.uri, asyncio.Queue()).put_nowait(params)

    await client.start_io(*_memlint_command(), cwd=str(tmp_path))
    try:
        result = await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=tmp_path.as_uri())), 30)
        assert result.server_info.name == "memlint"
        client.initialized(types.InitializedParams())

        async def next_diagnostics(uri: str) -> types.PublishDiagnosticsParams:
            queue = diagnostics.setdefault(uri, asyncio.Queue())
            return await asyncio.wait_for(queue.get(), 60)

        await steps(client, next_diagnostics)
        await asyncio.wait_for(client.shutdown_async(None), 30)
        client.exit(None)
    finally:
        server = client._server  # a failed step leaves the server running: end it
        if server is not None and server.returncode is None:
            try:
                await asyncio.wait_for(server.wait(), 10)
            except asyncio.TimeoutError:
                server.kill()
        await asyncio.wait_for(client.stop(), 30)


def _open(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version,
                                             text=text)))


def _actions(client, uri, line):
    return client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=line, character=0),
                          end=types.Position(line=line, character=0)),
        context=types.CodeActionContext(diagnostics=[])))


def _apply(text: str, edit: types.TextEdit) -> str:
    lines = text.split("\n")
    start = sum(len(line) + 1 for line in lines[:edit.range.start.line]) + edit.range.start.character
    end = sum(len(line) + 1 for line in lines[:edit.range.end.line]) + edit.range.end.character
    return text[:start] + edit.new_text + text[end:]


def test_diagnostics_on_open_and_quick_fixes_in_a_client_session(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    uri = path.as_uri()

    async def steps(client, next_diagnostics):
        _open(client, uri, SOURCE)
        published = await next_diagnostics(uri)
        column = SOURCE.splitlines()[LOAD_LINE].index("torch.load")
        assert [(d.code, d.range.start.line, d.range.start.character, d.source)
                for d in published.diagnostics] == [("MEM007", LOAD_LINE, column, "memlint")]
        # a one-process reload straight into the model: MEM007's note, shown as information
        assert published.diagnostics[0].severity == types.DiagnosticSeverity.Information
        assert "map_location" in published.diagnostics[0].message
        page = published.diagnostics[0].code_description.href
        assert page.startswith("file://") and page.endswith("mem007_load_without_map_location/page.md")

        actions = await asyncio.wait_for(_actions(client, uri, LOAD_LINE), 30)
        titles = [a.title for a in actions]
        fix = next(a for a in actions if a.kind == types.CodeActionKind.QuickFix and "noqa" not in a.title)
        assert fix.is_preferred and "map_location" in fix.title
        fixed = SOURCE
        for edit in fix.edit.changes[uri]:
            fixed = _apply(fixed, edit)
        assert 'torch.load(path, map_location="cpu")' in fixed, fixed

        noqa = next(a for a in actions if "noqa" in a.title)
        [edit] = noqa.edit.changes[uri]
        assert _apply(SOURCE, edit).splitlines()[LOAD_LINE] == \
            "    model.load_state_dict(torch.load(path))  # noqa: MEM007"
        [fix_all] = [a for a in actions if a.kind == "source.fixAll.memlint"]
        [whole] = fix_all.edit.changes[uri]
        assert _apply(SOURCE, whole) == fixed, titles

        # the file is edited to the fix and saved: the diagnostic goes away
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)]))
        path.write_text(fixed)
        client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        assert list((await next_diagnostics(uri)).diagnostics) == []

    asyncio.run(_session(tmp_path, steps))


def test_a_file_that_does_not_parse_is_one_diagnostic_and_the_server_lives_on(tmp_path):
    broken, good = tmp_path / "broken.py", tmp_path / "good.py"
    broken.write_text(BROKEN)
    good.write_text(SOURCE)

    async def steps(client, next_diagnostics):
        _open(client, broken.as_uri(), BROKEN)
        [error] = (await next_diagnostics(broken.as_uri())).diagnostics
        assert error.code == "MEM000" and error.severity == types.DiagnosticSeverity.Error
        _open(client, good.as_uri(), SOURCE)
        assert [d.code for d in (await next_diagnostics(good.as_uri())).diagnostics] == ["MEM007"]

    asyncio.run(_session(tmp_path, steps))


def test_noqa_joins_an_existing_list_and_refuses_a_continued_line():
    assert noqa_line("x = f()  # noqa: MEM001\n", "MEM007") == "x = f()  # noqa: MEM001, MEM007\n"
    assert noqa_line("x = f()\n", "MEM007") == "x = f()  # noqa: MEM007\n"
    assert noqa_line("x = f() + \\\n", "MEM007") is None


def test_columns_are_counted_in_utf16_units_as_lsp_asks():
    assert utf16_column("s = '😀'; torch.load(p)", 10) == 11
    assert utf16_column("abc", 2) == 2


# -- positions on the editor's text, whatever its encoding or line ends (issue 29) ----

def _offset(text: str, position: types.Position) -> int:
    """An LSP position (lines split at \\r\\n, \\r, \\n; UTF-16 columns) as an
    index; a column past the line's end is its end, as clients take it."""
    import re
    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    index, units = starts[position.line], 0
    while units < position.character and index < len(text) and text[index] not in "\r\n":
        units += 2 if ord(text[index]) > 0xFFFF else 1
        index += 1
    return index


def _apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character),
                       reverse=True):
        text = text[:_offset(text, edit.range.start)] + edit.new_text + \
            text[_offset(text, edit.range.end):]
    return text


FORM_FEEDS = ("import torch.cuda\n\x0c\nstate = torch.load('ckpt.pt')\n"
              "\x0cother = torch.load('b.pt')\n")
LATIN_1 = "# -*- coding: latin-1 -*-\nimport torch.cuda\n\nstate = torch.load('café_ünï.pt')\n"
CP1252 = "# -*- coding: cp1252 -*-\nimport torch.cuda\n\nstate = torch.load('€‚ƒ.pt')\n"


@pytest.mark.parametrize("text, line, flagged", [
    (FORM_FEEDS, 3, "\x0cother = torch.load('b.pt', map_location=\"cpu\")"),
    (LATIN_1, 3, "state = torch.load('café_ünï.pt', map_location=\"cpu\")"),
    (CP1252, 3, "state = torch.load('€‚ƒ.pt', map_location=\"cpu\")"),
])
def test_quick_fixes_edit_the_editors_text_exactly(tmp_path, text, line, flagged):
    """After a form feed, or in a latin-1 / cp1252 file with non-ASCII text,
    the fix and the `# noqa` must change the flagged line, and only it."""
    path = tmp_path / "train.py"
    uri = path.as_uri()

    async def steps(client, next_diagnostics):
        _open(client, uri, text)
        published = await next_diagnostics(uri)
        assert [d.code for d in published.diagnostics if d.range.start.line == line] == ["MEM007"]
        actions = await asyncio.wait_for(_actions(client, uri, line), 30)
        fix = next(a for a in actions if "map_location" in a.title)
        fixed = _apply_edits(text, fix.edit.changes[uri]).split("\n")
        assert fixed[line] == flagged
        noqa = next(a for a in actions if "noqa" in a.title)
        suppressed = _apply_edits(text, noqa.edit.changes[uri]).split("\n")
        assert suppressed[line] == text.split("\n")[line] + "  # noqa: MEM007"
        assert suppressed[:line] + suppressed[line + 1:] == \
            text.split("\n")[:line] + text.split("\n")[line + 1:]

    asyncio.run(_session(tmp_path, steps))


def test_fix_all_with_cr_only_line_ends_replaces_the_document_once(tmp_path):
    text = SOURCE.replace("\n", "\r")
    path = tmp_path / "train.py"
    path.write_bytes(text.encode())
    uri = path.as_uri()

    async def steps(client, next_diagnostics):
        _open(client, uri, text)
        [published] = (await next_diagnostics(uri)).diagnostics
        assert published.range.start.line == LOAD_LINE
        actions = await asyncio.wait_for(_actions(client, uri, LOAD_LINE), 30)
        [fix_all] = [a for a in actions if a.kind == "source.fixAll.memlint"]
        [whole] = fix_all.edit.changes[uri]
        assert whole.range.end == types.Position(line=text.count("\r"), character=0)
        fixed = _apply_edits(text, [whole])
        assert fixed.count("import torch") == 1 and "\n" not in fixed
        assert 'torch.load(path, map_location="cpu")' in fixed

    asyncio.run(_session(tmp_path, steps))


def test_a_burst_of_edits_is_analysed_once_at_its_last_version(tmp_path):
    """Every keystroke must not cost an analysis; the last text is the one analysed."""
    path = tmp_path / "train.py"
    uri = path.as_uri()

    async def steps(client, next_diagnostics):
        _open(client, uri, SOURCE)
        await next_diagnostics(uri)
        for version in range(2, 22):
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(
                    text="\n" * version + SOURCE)]))
        published = [await next_diagnostics(uri)]
        while published[-1].version != 21:
            published.append(await next_diagnostics(uri))
        assert len(published) < 20
        assert [d.range.start.line for d in published[-1].diagnostics] == [21 + LOAD_LINE]

    asyncio.run(_session(tmp_path, steps))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_fifo_in_the_project_never_blocks_the_server(tmp_path):
    """The server reads the project's other files (does it use CUDA?): a named
    pipe fed by a running job must not be opened."""
    (tmp_path / "logs").mkdir()
    os.mkfifo(tmp_path / "logs" / "progress.json")
    text = "import torch\n\nstate = torch.load('ckpt.pt')\n"
    path = tmp_path / "train.py"
    path.write_text(text)
    uri = path.as_uri()

    async def steps(client, next_diagnostics):
        _open(client, uri, text)
        await next_diagnostics(uri)

    asyncio.run(_session(tmp_path, steps))
