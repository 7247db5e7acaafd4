"""`memlint server`: a Language Server, so that editors show memlint's findings
as you work (VS Code, Neovim, Helix, Emacs, any LSP client).

Speaks LSP over stdin/stdout through pygls (the optional extra `server`).
Diagnostics are published when a Python file is opened or saved, from the
editor's text (saved or not), checked as `memlint check FILE` checks it: the
nearest pyproject.toml's `[tool.memlint]`, the file's project around it, a
supervised worker process so that a file that crashes libcst costs one MEM000
diagnostic, never the server. Code actions: each finding's fix (safe ones
preferred, unsafe ones marked), `# noqa: CODE` on its line, and
`source.fixAll.memlint` for every safe fix at once.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from urllib.parse import unquote, urlparse

from memlint.version import __version__
from memlint.engine.config import ConfigError, find_pyproject, load_settings
from memlint.engine import Source, check_source
from memlint.engine.fixes import fix_text, wanted
from memlint.engine.paths import check_sources
from memlint.engine.settings import Settings
from memlint.finding import SAFE, Finding

try:
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
except ImportError:  # pragma: no cover - reported by main()
    types = None
    LanguageServer = object

FIX_ALL = "source.fixAll.memlint"
_SEVERITY = {"error": 1, "warning": 2, "note": 3}  # LSP DiagnosticSeverity
_NOQA_CODES = re.compile(r"#\s*noqa:\s*[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*", re.IGNORECASE)


def settings_for(path: str) -> tuple[Settings, str | None]:
    """`memlint check`'s settings for `path`, and the configuration error that
    made them the defaults, if any (shown once, never fatal in an editor)."""
    try:
        return load_settings(find_pyproject(os.path.dirname(os.path.abspath(path)))), None
    except ConfigError as error:
        return Settings(), str(error)


def findings_for(path: str, text: str, settings: Settings) -> list[Finding]:
    """The findings `memlint check` gives the file with `text` in it."""
    report = check_sources([Source(path, text.encode("utf-8"))], settings, jobs=1)
    return [f for f in report.findings if f.path == path]


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


def code_actions(uri: str, text: str, findings: list[Finding], settings: Settings,
                 start_line: int, end_line: int) -> list:
    """The quick fixes for the findings on lines `start_line`..`end_line`
    (0-based, as the client asks), then the fix-all action if any safe fix exists."""
    lines = text.splitlines(keepends=True)
    plain = [line.rstrip("\r\n") for line in lines]
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
    fixed = fixed_text(uri_to_path(uri), text, findings, settings)
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
        ast.parse("".join(lines[:row] + [changed] + lines[row + 1:]))
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
    lines = before.split("\n")
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
    """Keeps each open document's last findings and the text they were found
    in, for its code actions."""

    def __init__(self) -> None:
        super().__init__("memlint", __version__)
        self.findings: dict[str, tuple[str, list[Finding]]] = {}
        self.told: set[str] = set()  # configuration errors already shown


def build_server() -> MemlintServer:
    server = MemlintServer()

    def publish(ls: MemlintServer, uri: str) -> None:
        document = ls.workspace.get_text_document(uri)
        path = uri_to_path(uri)
        if not path.endswith((".py", ".pyi")):
            return
        settings, problem = settings_for(path)
        if problem is not None and problem not in ls.told:
            ls.told.add(problem)
            ls.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning, message=f"memlint: {problem}; using defaults"))
        text = document.source
        findings = findings_for(path, text, settings)
        ls.findings[uri] = (text, findings)
        lines = text.splitlines()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=document.version,
            diagnostics=[diagnostic(f, lines) for f in findings]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MemlintServer, params: types.DidOpenTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: MemlintServer, params: types.DidSaveTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.findings.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=params.text_document.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]))
    def code_action(ls: MemlintServer, params: types.CodeActionParams) -> list:
        uri = params.text_document.uri
        if uri not in ls.findings:
            return []
        checked, findings = ls.findings[uri]
        text = ls.workspace.get_text_document(uri).source
        settings, _ = settings_for(uri_to_path(uri))
        if text != checked:  # edited since the last save: positions have moved
            findings = findings_for(uri_to_path(uri), text, settings)
            ls.findings[uri] = (text, findings)
        actions = code_actions(uri, text, findings, settings, params.range.start.line,
                               params.range.end.line)
        only = params.context.only
        return [a for a in actions if not only or any(a.kind.startswith(k) for k in only)]

    return server


def main() -> int:
    if types is None:
        print("memlint server: needs pygls (pip install 'pygls>=2,<3' where memlint is installed)",
              file=sys.stderr)
        return 2
    build_server().start_io()
    return 0
