"""`memlint server`: a Language Server, so that editors show memlint's findings
as you work (VS Code, Neovim, Helix, Emacs, any LSP client).

Speaks LSP over stdin/stdout through pygls (the optional extra `server`).
Diagnostics are published when a Python file is opened, and after a pause
in its edits and saves (`DEBOUNCE_S`: a burst of keystrokes or queued saves
is one analysis, of its last version), from the editor's text (saved or
not), checked as `memlint check FILE` checks it: the
nearest pyproject.toml's `[tool.memlint]`, the file's project around it, a
supervised worker process so that a file that crashes libcst costs one MEM000
diagnostic, never the server. The worker is kept from one analysis to the
next: it parses only the statements an edit changed (`engine/chunks.py`).
Code actions: each finding's fix (safe ones preferred, unsafe ones
marked), `# noqa: CODE` on its line, and
`source.fixAll.memlint` for every safe fix at once; they come from the last
analysis, never a new one, and only while the text is still the one it
analysed (positions on another text would corrupt it).

Positions are counted on the editor's text as LSP counts them: lines split
at `\r\n`, `\r` and `\n` only (not at form feeds), columns in UTF-16 units,
the text handed to the checker in the encoding its coding cookie declares,
so that what is checked is exactly what the editor shows.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
from urllib.parse import unquote, urlparse

from memlint.version import __version__
from memlint.engine.config import ConfigError, find_pyproject, load_settings
from memlint.rules.catalogue import PACKAGES_BY_CODE
from memlint.engine import check_source
from memlint.engine.fixes import fix_text, wanted
from memlint.engine.isolation import Workers
from memlint.engine.paths import check_in_project, check_keeping_pieces
from memlint.engine.source import source_bytes
from memlint.analysis.source_lines import LINE_BREAK, split_lines
from memlint.engine.settings import Settings
from memlint.finding import SAFE, Finding
from memlint.analysis.source_lines import parse_quietly

try:
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
except ImportError:  # pragma: no cover - reported by main()
    types = None  # type: ignore[assignment]  # main() says what to install
    LanguageServer = object  # type: ignore[assignment,misc]  # (the class below is never made)

FIX_ALL = "source.fixAll.memlint"
_SEVERITY = {"error": 1, "warning": 2, "note": 3}  # LSP DiagnosticSeverity
_NOQA_CODES = re.compile(r"#\s*noqa:\s*[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*", re.IGNORECASE)
#: how long edits and saves must pause before the document is analysed again:
#: a burst of typing (keys well under this apart) is one analysis; the
#: analysis runs beside the server's loop, so a later edit never waits on it
DEBOUNCE_S = 0.15


def page_uri(code: str) -> str:
    """The rule's reference page, where this install keeps it (an editor opens
    it from the diagnostic's code)."""
    from importlib import resources

    return path_to_uri(str(resources.files(PACKAGES_BY_CODE[code]).joinpath("page.md")))


def settings_for(path: str) -> tuple[Settings, str | None]:
    """`memlint check`'s settings for `path`, and the configuration error that
    made them the defaults, if any (shown once, never fatal in an editor)."""
    try:
        return load_settings(find_pyproject(os.path.dirname(os.path.abspath(path)))), None
    except ConfigError as error:
        return Settings(), str(error)


#: the server's worker, kept across versions: it keeps the top-level
#: statements it parsed, so an edit parses only the ones it changed
#: (`engine/chunks.py`), and no process is forked per analysis
WORKERS = Workers(check_keeping_pieces)
#: one analysis at a time: the kept worker takes one task at a time
_ANALYSING = threading.Lock()


def findings_for(path: str, text: str, settings: Settings) -> list[Finding]:
    """The findings `memlint check` gives the file with `text` in it."""
    with _ANALYSING:
        return check_in_project(path, source_bytes(text), settings, kept=WORKERS)


def plain_lines(text: str) -> list[str]:
    """The lines as LSP counts them, without their ends."""
    return LINE_BREAK.split(text)


def utf16_column(line: str, column: int) -> int:
    """LSP counts columns in UTF-16 code units; memlint in characters (0-based here)."""
    return len(line[:column].encode("utf-16-le")) // 2


def lsp_range(lines: list[str], line: int, column: int, end_line: int, end_column: int):
    """1-based, end-exclusive character positions to an LSP Range."""
    def position(row: int, col: int):
        text = lines[row - 1] if 0 < row <= len(lines) else ""
        return types.Position(line=max(row - 1, 0), character=utf16_column(text, col - 1))
    return types.Range(start=position(line, column), end=position(end_line, end_column))


def diagnostic(finding: Finding, lines: list[str]):
    return types.Diagnostic(
        range=lsp_range(lines, finding.line, finding.column, finding.end_line,
                        finding.end_column),
        severity=types.DiagnosticSeverity(_SEVERITY.get(finding.severity, 2)),
        code=finding.code, source="memlint",
        code_description=types.CodeDescription(href=page_uri(finding.code)),
        message=finding.summary + (f"\n{finding.help}" if finding.help else ""),
        related_information=[
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=path_to_uri(r.path),
                                        range=lsp_range(lines, r.line, r.column, r.line, r.column)),
                message=r.message)
            for r in finding.related if r.cell is None])


def noqa_line(line: str, code: str) -> str | None:
    """`line` with `code` added to its `# noqa: ...` (or a new one), None where
    a comment cannot go at its end (a backslash continuation)."""
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    if body.rstrip().endswith("\\"):
        return None
    existing = _NOQA_CODES.search(body)
    if existing is not None:
        return body[:existing.end()] + f", {code}" + body[existing.end():] + ending
    return body.rstrip() + f"  # noqa: {code}" + ending


def code_actions(uri: str, text: str, findings: list[Finding], fixed: str | None,
                 start_line: int, end_line: int) -> list:
    """The quick fixes for the findings on lines `start_line`..`end_line`
    (0-based, as the client asks), then the fix-all action to `fixed`, the
    text with every safe fix, if there is one."""
    lines = split_lines(text)
    plain = plain_lines(text)
    actions = []
    for finding in findings:
        if not (start_line <= finding.line - 1 <= end_line or
                finding.line - 1 <= start_line <= finding.end_line - 1):
            continue
        diagnostics = [diagnostic(finding, plain)]
        if finding.fix is not None:
            unsafe = finding.fix.applicability != SAFE
            edits = [types.TextEdit(range=lsp_range(plain, e.line, e.column, e.end_line,
                                                    e.end_column), new_text=e.content)
                     for e in finding.fix.edits]
            actions.append(types.CodeAction(
                title=f"memlint: {finding.fix.message}" + (" (unsafe: review it)" if unsafe
                                                           else ""),
                kind=types.CodeActionKind.QuickFix, diagnostics=diagnostics,
                is_preferred=not unsafe,
                edit=types.WorkspaceEdit(changes={uri: edits})))
        suppressed = _suppressed_text(lines, finding)
        if suppressed is not None:
            row = finding.line - 1
            actions.append(types.CodeAction(
                title=f"memlint: suppress {finding.code} on this line (# noqa: {finding.code})",
                kind=types.CodeActionKind.QuickFix, diagnostics=diagnostics,
                edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(
                    range=lsp_range(plain, finding.line, 1, finding.line,
                                    len(plain[row]) + 1),
                    new_text=suppressed.rstrip("\r\n"))]})))
    if fixed is not None:
        actions.append(types.CodeAction(
            title="memlint: apply every safe fix", kind=FIX_ALL,
            edit=types.WorkspaceEdit(changes={uri: [whole_document_edit(text, fixed)]})))
    return actions


def _suppressed_text(lines: list[str], finding: Finding) -> str | None:
    """The finding's line with its `# noqa`, if the file still parses so."""
    row = finding.line - 1
    if finding.cell is not None or not 0 <= row < len(lines):
        return None
    changed = noqa_line(lines[row], finding.code)
    if changed is None:
        return None
    try:
        parse_quietly("".join(lines[:row] + [changed] + lines[row + 1:]))
    except (SyntaxError, ValueError):
        return None  # the line ends inside a string
    return changed


def fixed_text(path: str, text: str, findings: list[Finding], settings: Settings) -> str | None:
    """The text with every safe fix applied as `memlint check --fix` applies
    them, or None when there is nothing to fix."""
    if not any(wanted(f, unsafe=False) for f in findings):
        return None
    result = fix_text(text, findings, False, lambda fixed: check_source(fixed, path, settings))
    return result.text if result.changed else None


def whole_document_edit(before: str, after: str):
    lines = plain_lines(before)
    end = types.Position(line=len(lines) - 1, character=utf16_column(lines[-1], len(lines[-1])))
    return types.TextEdit(range=types.Range(start=types.Position(line=0, character=0), end=end),
                          new_text=after)


def uri_to_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def path_to_uri(path: str) -> str:
    from pathlib import Path
    return Path(os.path.abspath(path)).as_uri()


class MemlintServer(LanguageServer):
    """Keeps each open document's last analysis (the text, its findings, and
    the text with every safe fix once asked), for its code actions."""

    def __init__(self) -> None:
        super().__init__("memlint", __version__)
        self.findings: dict[str, tuple[str, list[Finding]]] = {}
        self.fixed_all: dict[str, str | None] = {}  #: every safe fix of the last text
        self.pending: dict[str, object] = {}  #: the latest analysis waiting for a pause
        self.told: set[str] = set()  # configuration errors already shown


def build_server() -> MemlintServer:
    server = MemlintServer()

    def to_analyse(ls: MemlintServer, uri: str) -> tuple[str, str, Settings] | None:
        """(path, text, settings) of a Python document, None for another."""
        path = uri_to_path(uri)
        if not path.endswith((".py", ".pyi")):
            return None
        settings, problem = settings_for(path)
        if problem is not None and problem not in ls.told:
            ls.told.add(problem)
            ls.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning, message=f"memlint: {problem}; using defaults"))
        return path, ls.workspace.get_text_document(uri).source, settings

    def publish(ls: MemlintServer, uri: str, version: int | None, text: str,
                findings: list[Finding]) -> None:
        ls.findings[uri] = (text, findings)
        ls.fixed_all.pop(uri, None)
        lines = plain_lines(text)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=version, diagnostics=[diagnostic(f, lines) for f in findings]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MemlintServer, params: types.DidOpenTextDocumentParams) -> None:
        """Analysed before the next message is read: a code action asked right
        after opening finds the findings."""
        uri = params.text_document.uri
        job = to_analyse(ls, uri)
        if job is not None:
            publish(ls, uri, params.text_document.version, job[1], findings_for(*job))

    async def publish_after_a_pause(ls: MemlintServer, uri: str) -> None:
        """Analyse once the edits or saves stop: a later one replaces this one.
        The analysis runs in a thread, so edits keep arriving meanwhile; its
        findings are shown only if the text is still the one analysed."""
        version = ls.workspace.get_text_document(uri).version
        pending = ls.pending[uri] = object()
        await asyncio.sleep(DEBOUNCE_S)
        if ls.pending.get(uri) is not pending or uri not in ls.findings \
                or ls.workspace.get_text_document(uri).version != version:
            return
        del ls.pending[uri]
        job = to_analyse(ls, uri)
        if job is None:
            return
        findings = await asyncio.get_running_loop().run_in_executor(None, findings_for, *job)
        if uri in ls.findings and ls.workspace.get_text_document(uri).version == version:
            publish(ls, uri, version, job[1], findings)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: MemlintServer, params: types.DidChangeTextDocumentParams) -> None:
        await publish_after_a_pause(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: MemlintServer, params: types.DidSaveTextDocumentParams) -> None:
        await publish_after_a_pause(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.findings.pop(params.text_document.uri, None)
        ls.fixed_all.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: MemlintServer, params: types.CodeActionParams) -> list:
        uri = params.text_document.uri
        text = ls.workspace.get_text_document(uri).source
        checked, findings = ls.findings.get(uri, (None, []))
        if text != checked:  # edited since: the next analysis brings its actions
            return []
        if uri not in ls.fixed_all:
            settings, _ = settings_for(uri_to_path(uri))
            ls.fixed_all[uri] = fixed_text(uri_to_path(uri), text, findings, settings)
        actions = code_actions(uri, text, findings, ls.fixed_all[uri],
                               params.range.start.line, params.range.end.line)
        only = params.context.only
        return [a for a in actions if not only or any(a.kind.startswith(k) for k in only)]

    return server


def main() -> int:
    if types is None:
        print("memlint server: needs pygls (pip install 'pygls>=2,<3' where memlint is installed)",
              file=sys.stderr)
        return 2
    messages = sys.stdin.buffer
    # a forked worker closes sys.stdin first thing; it must not wait on the
    # lock of the buffer the server's reader thread is blocked reading
    sys.stdin = None
    try:
        build_server().start_io(stdin=messages, stdout=sys.stdout.buffer)
    finally:
        WORKERS.close()
    return 0
