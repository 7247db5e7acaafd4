"""`--fix`: the findings' fixes applied to a file's text, and written back
without ever leaving a broken or half-written file.

A fix's edits are applied together or not at all; a fix that overlaps one
already taken waits for the next pass, which re-checks the fixed text (at
most `MAX_PASSES`). The result must still parse, or the file keeps its last
good text. Writing changes only the bytes of what was fixed (the file's
encoding, byte order mark and line endings kept), keeps the file itself (its
links, mode and owner), goes through a temporary file in the same folder
and `os.replace` where it can, and refuses a file that changed on disk since
it was read.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from memlint.analysis.source_lines import LINE_BREAK, declared_encoding, split_lines
from memlint.analysis.files import read_regular
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
    taken: list[tuple[int, int, str]] = []
    applied, waiting, end = [], [], -1
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


def fixed_bytes(original: bytes, text: str) -> bytes:
    """`text` in the encoding `original` was in (its coding cookie or UTF-8,
    its byte order mark kept), every byte outside what changed as it was: in
    an encoding that spells a character in several ways (cp932) or carries
    state (utf-7, iso-2022-jp), encoding the whole text again would change
    bytes no fix touched."""
    encoding = declared_encoding(original)
    if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig"):  # one spelling per character
        return text.encode(encoding)
    before = original.decode(encoding)
    for trimmed in (True, False):
        spliced = _splice(original, before, text, encoding, trimmed)
        if spliced is not None:
            return spliced
    return text.encode(encoding)


def _splice(original: bytes, before: str, after: str, encoding: str,
            trimmed: bool) -> bytes | None:
    """`original` with only the lines that differ between `before` and `after`
    encoded anew (`trimmed`: only the characters that differ in them); None
    when that would not read back as `after`."""
    import difflib  # only --fix of a file in such an encoding gets here

    old_bytes = _LINE_BYTES.findall(original)
    old_lines, new_lines = split_lines(before), split_lines(after)
    if len(old_bytes) != len(old_lines):
        return None
    pieces = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, start, end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            pieces.extend(old_bytes[start:end])
            continue
        old = b"".join(old_bytes[start:end])
        new = "".join(new_lines[new_start:new_end])
        pieces.append(_respelled(old, "".join(old_lines[start:end]), new, encoding) if trimmed
                      else new.encode(encoding))
    result = b"".join(pieces)
    try:
        return result if result.decode(encoding) == after else None
    except UnicodeDecodeError:
        return None


#: a line with its end, as Python splits lines (in the ASCII-compatible encodings
#: a coding cookie can name, CR and LF are never part of another character)
_LINE_BYTES = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _respelled(old_bytes: bytes, old: str, new: str, encoding: str) -> bytes:
    """`old_bytes` (which read as `old`) with only the characters that differ
    from `new` encoded anew."""
    prefix = len(os.path.commonprefix([old, new]))
    suffix = len(os.path.commonprefix([old[prefix:][::-1], new[prefix:][::-1]]))
    start = _byte_offset(old_bytes, prefix, encoding)
    end = _byte_offset(old_bytes, len(old) - suffix, encoding)
    return old_bytes[:start] + new[prefix:len(new) - suffix].encode(encoding) + old_bytes[end:]


def _byte_offset(data: bytes, characters: int, encoding: str) -> int:
    """Where the first `characters` characters of `data` end."""
    if characters == 0:
        return 0
    decoder = codecs.getincrementaldecoder(encoding)()
    produced = 0
    for index in range(len(data)):
        produced += len(decoder.decode(data[index:index + 1]))
        if produced >= characters:
            return index + 1
    return len(data)


def write_fixed(path: str, original: bytes, text: str) -> None:
    """Write `text` over the file `path` names in the encoding it had,
    changing no byte the fixes did not (`fixed_bytes`); `FileChanged` if the
    file is no longer `original`. The file stays what it was: a symbolic link
    is written through to its target; the new text replaces the file
    atomically, with its mode, owner and group, unless it has other hard links
    or its owner cannot be kept, when it is rewritten in place."""
    data = fixed_bytes(original, text)
    target = os.path.realpath(path)
    status = os.stat(target)
    if not status.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        # (checked on the mode, not with os.access, which lets root write anything)
        raise PermissionError(errno.EACCES, "the file is read-only")
    if read_regular(target) != original:
        raise FileChanged(path)
    if status.st_nlink > 1 or not _replaced(target, data, status):
        _rewrite_in_place(target, original, data)


def _replaced(target: str, data: bytes, status: os.stat_result) -> bool:
    """Replace `target` by a new file of `data` with its mode, owner and
    group; False (nothing done) when the owner cannot be kept."""
    import tempfile  # start-up: only --fix writes files
    handle, temporary = tempfile.mkstemp(prefix=".memlint-", suffix=".tmp",
                                         dir=os.path.dirname(target))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), stat.S_IMODE(status.st_mode))
            made = os.fstat(out.fileno())
            if (made.st_uid, made.st_gid) != (status.st_uid, status.st_gid):
                try:
                    os.fchown(out.fileno(), status.st_uid, status.st_gid)
                except PermissionError:
                    os.unlink(temporary)
                    return False
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return True


def _rewrite_in_place(target: str, original: bytes, data: bytes) -> None:
    """The same inode, so every hard link and the owner see the fix."""
    with open(target, "r+b") as handle:  # (a regular file: `write_fixed` read it)
        if handle.read() != original:
            raise FileChanged(target)
        handle.seek(0)
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())
