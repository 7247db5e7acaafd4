"""`--fix`: the findings' fixes applied to a file's text, and written back
without ever leaving a broken or half-written file.

A fix's edits are applied together or not at all; a fix that overlaps one
already taken waits for the next pass, which re-checks the fixed text (at
most `MAX_PASSES`). The result must still parse, or the file keeps its last
good text. Writing keeps the file's encoding, byte order mark, line endings
and mode, goes through a temporary file in the same folder and
`os.replace`, and refuses a file that changed on disk since it was read.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memlint.analysis.source_lines import LINE_BREAK
from memlint.finding import SAFE, Finding, Fix

MAX_PASSES = 8


class FileChanged(Exception):
    """The file on disk is no longer the one that was checked."""


@dataclass
class FixResult:
    """A file's text after fixing, and the findings whose fixes made it."""

    text: str
    fixed: list[Finding] = field(default_factory=list)
    refused: str | None = None  #: why the file was left as it was, if it had to be

    @property
    def changed(self) -> bool:
        return bool(self.fixed)


def wanted(finding: Finding, unsafe: bool) -> bool:
    """Whether `--fix` (with `--unsafe-fixes` or not) applies this finding's fix."""
    return finding.fix is not None and (unsafe or finding.fix.applicability == SAFE)


def fix_text(text: str, findings: Iterable[Finding], unsafe: bool,
             recheck: Callable[[str], list[Finding]]) -> FixResult:
    """Apply the fixes of `findings` (as the whole project judged them) to
    `text`; fixes left out for overlapping are taken on later passes, from
    `recheck` of the fixed text, as long as a finding of the same code and
    message on the same code is still there (a re-check of one file alone
    must not add fixes that the project had ruled out)."""
    result = FixResult(text)
    pending = [f for f in findings if wanted(f, unsafe)]
    for _ in range(MAX_PASSES):
        if not pending:
            break
        fixed_text, applied, waiting = apply_fixes(result.text, pending)
        if not applied or not parses(fixed_text):
            break
        # the waiting findings' positions are in the text before this pass
        waited = _identities(waiting, result.text)
        result.text = fixed_text
        result.fixed.extend(applied)
        if not waiting:
            break
        rechecked = [f for f in recheck(result.text) if wanted(f, unsafe)]
        pending = [f for f, identity in zip(rechecked, _identities(rechecked, result.text))
                   if identity in waited]
    return result


def _identities(findings: list[Finding], text: str) -> list[tuple[str, str, str]]:
    """Each finding as it reads, not where it is (edits above move it): its
    code, its message and the code it flags in `text`, the text its
    positions refer to."""
    starts = line_starts(text)
    identities = []
    for finding in findings:
        try:
            start = starts[finding.line - 1] + finding.column - 1
            end = starts[finding.end_line - 1] + finding.end_column - 1
        except IndexError:
            start = end = 0
        identities.append((finding.code, finding.message, text[start:end]))
    return identities


def apply_fixes(text: str, findings: list[Finding]) -> tuple[str, list[Finding], list[Finding]]:
    """The text with every fix that does not overlap one taken before it
    (in the order of the file), the findings fixed, and those left waiting."""
    starts = line_starts(text)

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    spans = []
    for finding in findings:
        fix: Fix = finding.fix  # type: ignore[assignment]
        edits = [(offset(e.line, e.column), offset(e.end_line, e.end_column), e.content)
                 for e in fix.edits]
        spans.append((min(s for s, _, _ in edits), max(e for _, e, _ in edits), edits, finding))
    spans.sort(key=lambda span: (span[0], span[1]))
    taken, applied, waiting, end = [], [], [], -1
    for start, stop, edits, finding in spans:
        if start < end or (start == end and taken and taken[-1][0] == start == stop):
            waiting.append(finding)
            continue
        taken.extend((s, e, content) for s, e, content in edits)
        applied.append(finding)
        end = max(end, stop)
    pieces, position = [], 0
    for start, stop, content in sorted(taken, key=lambda edit: (edit[0], edit[1])):
        pieces.append(text[position:start])
        pieces.append(content)
        position = stop
    pieces.append(text[position:])
    return "".join(pieces), applied, waiting


def line_starts(text: str) -> list[int]:
    """The offset of each line's first character, lines split as libcst and
    Python split them (`\\r\\n`, `\\r`, `\\n`)."""
    starts = [0]
    starts.extend(match.end() for match in LINE_BREAK.finditer(text))
    return starts


def parses(text: str) -> bool:
    import libcst as cst  # only once there is a fix to check

    try:
        cst.parse_module(text)
    except Exception:
        return False
    return True


def encode_like(original: bytes, text: str) -> bytes:
    """`text` in the encoding `original` was in: its coding cookie or UTF-8,
    its byte order mark kept."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    return text.encode(encoding)


def write_fixed(path: str, original: bytes, text: str) -> None:
    """Write `text` over `path` in the encoding the file had (its byte order
    mark included), atomically, keeping its mode; `FileChanged` if the file
    is no longer `original`."""
    data = encode_like(original, text)
    if not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        # (checked on the mode, not with os.access, which lets root write anything)
        raise PermissionError(errno.EACCES, "the file is read-only")
    with open(path, "rb") as handle:
        if handle.read() != original:
            raise FileChanged(path)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    folder = os.path.dirname(os.path.abspath(path))
    import tempfile  # start-up: only --fix writes files
    handle, temporary = tempfile.mkstemp(prefix=".memlint-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
