"""check_source: one file's text to its findings, the step every surface shares.

Per file: a text pre-filter picks the rules that could fire (`RuleEntry.wants`:
a file no selected rule can fire on is never parsed, and libcst is not even
imported for it), then `engine/parsed.py`: one libcst parse, one walk for all
of them, positions computed only when something was reported.
"""

from __future__ import annotations


from memlint.analysis.project import (ModuleFacts, Project, imported_modules,
                                      mentions_cuda, module_name,
                                      runs_distributed, top_level_functions)
from memlint.analysis.screens import gives_facts_maybe
from memlint.analysis.source_lines import declared_encoding
from memlint.engine.settings import Settings
from memlint.engine.suppression import skips_file
from memlint.engine.syntax import syntax_error
from memlint.finding import Finding
from memlint.rules.catalogue import CATALOGUE
from memlint.analysis.source_lines import parse_quietly


def check_source(source: str | bytes, path: str = "<stdin>",
                 settings: Settings | None = None, noqa: bool = True) -> list[Finding]:
    """Findings for one file's text, judged on what that file shows (the
    project around it is not read: `check_paths` and the front ends read it,
    so that a file gets the findings `memlint check .` gives it). Raises
    `RuleCrash` if a rule fails.

    `noqa=False` reports findings that `# noqa` comments would hide (flake8's
    `--disable-noqa`)."""
    findings, facts = analyse_source(source, path, settings, noqa)
    return Project([facts], complete=False).settle(
        findings, (settings or Settings()).shows_preview)


def analyse_source(source: str | bytes, path: str, settings: Settings | None = None,
                   noqa: bool = True, module: str | None = None,
                   ) -> tuple[list[Finding], ModuleFacts | None]:
    """One file's findings, some still waiting on the rest of the project
    (`Finding.unless`), and the facts this file gives the project (None when
    it could not be read). `module` is its dotted name in the project."""
    settings = settings or Settings()
    selected = settings.selected_codes(path)
    if isinstance(source, bytes):
        try:
            source = decode(source)
        except Undecodable as error:
            return [syntax_error(path, error.line, error.column,
                                 f"cannot decode the file{error.reason}")], None
    if skips_file(source):
        return [], None
    lowered = source.lower()
    facts = ModuleFacts(path, module_name(path) if module is None else module,
                        mentions_cuda(source, lowered), runs_distributed(source, lowered),
                        imported_modules(source), ".cuda(" in source or ".to(" in source,
                        defines=top_level_functions(source))
    screened = [entry for entry in CATALOGUE
                if (entry.code in selected
                    or entry.gives_facts and entry.code in settings.selected_anywhere)
                and settings.walks(entry.code) and entry.wants(source, lowered)]
    wanted = [entry.code for entry in screened if entry.code in selected]
    informants = [entry.code for entry in screened
                  if entry.gives_facts and entry.code not in selected]
    if not wanted and not informants and not gives_facts_maybe(source):
        return _syntax_check_only(source, path), facts
    from memlint.engine.parsed import check_parsed  # libcst and the rules: only now

    return check_parsed(source, path, settings, noqa, wanted, facts, informants), facts


def _syntax_check_only(source: str, path: str) -> list[Finding]:
    """A file no selected rule can fire on still owes its MEM000.

    CPython's parser costs a fraction of libcst's, so it screens the file; only
    when it refuses is libcst asked too, so that syntax newer than the running
    Python (libcst knows it) is not mistaken for an error."""
    try:
        parse_quietly(source)
        return []
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    from memlint.engine.parsed import parse  # libcst only for a file CPython refused

    module = parse(source, path)
    return [module] if isinstance(module, Finding) else []


def source_bytes(text: str) -> bytes:
    """Text read by an editor or flake8 as bytes that read back as that very
    text: in the encoding its coding cookie declares (`# coding: latin-1`),
    else UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        encoding = declared_encoding(data)
        return data if encoding.startswith("utf-8") else text.encode(encoding)
    except (SyntaxError, LookupError, UnicodeEncodeError):  # the checker says why
        return data


class Undecodable(ValueError):
    """Why the bytes are not Python source text, and where. `reason` follows
    "cannot decode the file"."""

    def __init__(self, line: int, column: int, reason: str) -> None:
        super().__init__(reason)
        self.line, self.column, self.reason = line, column, reason


#: byte order marks of encodings that are not ASCII-compatible, so no coding
#: cookie can name them and CPython reads NUL bytes instead
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def decode(data: bytes) -> str:
    """Python's own rules: a BOM or a coding cookie, else UTF-8; what CPython
    refuses (a non-text codec, a BOM that contradicts the cookie) raises
    `Undecodable` with CPython's reason. A codec it does not know may be a
    package's, registered at start-up: UTF-8 text under it is read."""
    import codecs

    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise Undecodable(1, 1, f": it is {name} (it starts with a {name} byte order "
                                    f"mark); Python reads only ASCII-compatible encodings, "
                                    f"save it as UTF-8")
    if b"\0" in data:
        raise Undecodable(*_line_and_column(data, data.index(b"\0")),
                          ": it contains NUL bytes (is it a binary file?)")
    try:
        encoding = declared_encoding(data)
    except SyntaxError as error:
        if data.startswith(codecs.BOM_UTF8):
            reason = "its UTF-8 byte order mark contradicts its coding cookie"
        elif error.msg.startswith("invalid or missing encoding declaration"):
            reason = None  # not UTF-8 on its first lines: decoding names the byte
        else:
            reason = error.msg  # `unknown encoding: nosuchcodec`
        if reason is not None and reason.startswith("unknown encoding"):
            return _registered_codec_text(data, reason)
        if reason is not None:
            raise Undecodable(_cookie_line(data), 1,
                              f": {reason} (Python refuses it too)") from None
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except LookupError as error:  # `# coding: hex`: a codec, but not of text
        raise Undecodable(_cookie_line(data), 1, f": {error} (Python refuses it too)") from None
    except UnicodeDecodeError as error:
        raise Undecodable(*_line_and_column(data, error.start),
                          f" as {error.encoding}: {error.reason} "
                          f"(byte 0x{data[error.start:error.start + 1].hex()}); save it as "
                          f"UTF-8 or declare its encoding in a '# -*- coding: ... -*-' "
                          f"comment") from None
    return text[1:] if text.startswith("\ufeff") else text


def _registered_codec_text(data: bytes, reason: str) -> str:
    """A codec Python does not know may be one a package registers when the
    interpreter starts (`# -*- coding: future_fstrings -*-`, registered by
    future-fstrings, decodes UTF-8 and rewrites f-strings for old Pythons):
    the text is then read as UTF-8, which parses as the program runs. Not
    UTF-8 either: the codec's text cannot be read here."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Undecodable(_cookie_line(data), 1,
                          f": {reason} (Python knows it only if a package registers that "
                          f"codec) and the file is not UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def _line_and_column(data: bytes, offset: int) -> tuple[int, int]:
    before = data[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


def _cookie_line(data: bytes) -> int:
    """Where the coding cookie is: a cookie counts on line 1 or 2 only."""
    first, _, rest = data.partition(b"\n")
    return 2 if b"coding" not in first and b"coding" in rest.partition(b"\n")[0] else 1
