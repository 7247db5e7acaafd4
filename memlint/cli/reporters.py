"""Output formats of `memlint check`: text, json, github, sarif, gitlab, junit; and --statistics.

Every reporter gets the whole Report at once, so the json and SARIF documents
are written in one piece (valid even when empty) and memlint's own internal
errors can be placed where each format has room for them.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import PurePath
from urllib.parse import quote

from memlint.engine import Report
from memlint.finding import SAFE, Finding, Related
from memlint.cli.pages import page, summary
from memlint.rules import NAMES_BY_CODE, SEVERITY_BY_CODE, SYNTAX_ERROR_CODE

SARIF_SCHEMA = ("https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
                "sarif-schema-2.1.0.json")


def display_path(path: str) -> str:
    """The path as valid UTF-8 text on one line: bytes of a file name that are not
    UTF-8 (which Python keeps as surrogate escapes) are shown as `\\xff`, and
    control characters (a newline, a terminal's escape) as `\\n` and `\\x1b`,
    as `ls -b` would."""
    if not path.isascii():
        path = _path_bytes(path).decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode(), path)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _path_bytes(path: str) -> bytes:
    """The file name's own bytes (what the file system holds)."""
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no file name decodes to
        return path.encode("utf-8", "backslashreplace")


def location(finding: Finding) -> str:
    """`path:line:col`, or `notebook.ipynb:cell 4:2:9` inside a notebook (as ruff writes it)."""
    path = display_path(finding.path)
    if finding.cell is not None:
        return f"{path}:cell {finding.cell}:{finding.cell_line}:{finding.column}"
    return f"{path}:{finding.line}:{finding.column}"


def text(report: Report, version: str, color: bool = False) -> str:
    """One line per finding, its short message (what is wrong; the cost and the
    advice are in the full view, the JSON and the rule's page); `[*]` marks
    one that `--fix` fixes (as ruff marks them)."""
    paint = _painter(color)
    return "".join(_finding_line(f, paint) for f in report.findings)


def _finding_line(finding: Finding, paint) -> str:
    return (f"{paint('bold', location(finding))}: {paint(finding.severity, finding.code)} "
            f"{_fix_mark(finding)}{_short(finding)}\n")


def _short(finding: Finding) -> str:
    """A rule's finding: what is wrong. MEM000 (a file memlint could not check)
    is shown whole: its reason is the point."""
    return finding.message if finding.code == SYNTAX_ERROR_CODE else finding.summary


_STYLES = {"error": "\033[1;31m", "warning": "\033[1;33m", "note": "\033[1;36m",
           "bold": "\033[1m", "dim": "\033[2m", "reset": "\033[0m"}


def _painter(color: bool) -> Callable[[str, str], str]:
    """`paint(style, text)`: the text in a style of `_STYLES`, or as it is."""
    def paint(style: str, value: str) -> str:
        return f"{_STYLES[style]}{value}{_STYLES['reset']}" if color else value
    return paint


def full_text(report: Report, lines_of: Callable[[Finding], list[str] | None],
              color: bool = False) -> str:
    """`text` with the flagged code under each finding, a caret under the
    flagged span (as ruff shows it), and the severity's colour on a terminal.
    `lines_of` gives the finding's file (or notebook cell) as lines, or None."""
    paint = _painter(color)
    out = []
    for f in report.findings:
        out.append(_finding_line(f, paint))
        frame = _frame(f, lines_of(f), paint)
        out.extend(frame)
        width = len(str(f.end_line if f.cell_line is None else f.cell_line + f.end_line - f.line))
        margin = " " * (width + 1) if frame else "  "
        for label, value in (("why", f.why), ("help", f.help)):
            if value and f.code != SYNTAX_ERROR_CODE:
                out.append(f"{margin}{paint('dim', '=')} {paint('bold', label)}: {value}\n")
        out.append("\n")
    return "".join(out)


def _frame(finding: Finding, lines: list[str] | None, paint) -> list[str]:
    """The flagged line(s), at most 3, numbered, with carets under the span."""
    if not lines:
        return []
    first = finding.cell_line if finding.cell_line is not None else finding.line
    last = first + (finding.end_line - finding.line)
    shown = list(range(first, min(last, first + 2) + 1))
    if not shown or shown[-1] > len(lines):
        return []
    width = len(str(shown[-1]))
    gutter = paint("dim", f"{' ' * width} |")
    rows = [gutter + "\n"]
    for number in shown:
        code = lines[number - 1].rstrip("\r\n").expandtabs(4)
        rows.append(f"{paint('dim', f'{number:>{width}} |')} {code}\n")
        start = finding.column - 1 if number == first else len(code) - len(code.lstrip())
        end = finding.end_column - 1 if number == last else len(code)
        if end > start:
            rows.append(f"{gutter} {' ' * start}{paint(finding.severity, '^' * (end - start))}\n")
    return rows


def _fix_mark(finding: Finding) -> str:
    return "[*] " if finding.fix is not None and finding.fix.applicability == SAFE else ""


def closing_line(report: Report, fixed: int, unsafe: bool) -> str:
    """The text format's last line, as ruff ends: what is left, or that all passed."""
    if report.findings:
        return fix_summary(report, fixed, unsafe)
    if fixed:
        return f"Fixed {fixed} finding{'s' * (fixed != 1)}; none left.\n"
    return "All checks passed!\n"


def fix_summary(report: Report, fixed: int, unsafe: bool) -> str:
    """How many findings, and how many fixes wait."""
    findings = report.findings
    safe = sum(1 for f in findings if f.fix is not None and f.fix.applicability == SAFE)
    unsafe_only = sum(1 for f in findings if f.fix is not None and f.fix.applicability != SAFE)
    parts = [f"{fixed} fixed"] if fixed else []
    if safe:
        parts.append(f"{safe} fixable with --fix")
    if unsafe_only and not unsafe:
        parts.append(f"{unsafe_only} more with --fix --unsafe-fixes")
    count = f"Found {len(findings)} finding{'s' * (len(findings) != 1)}"
    return f"{count} ({', '.join(parts)}).\n" if parts else f"{count}.\n"


def json_format(report: Report, version: str) -> str:
    """An array of findings; internal errors become objects with code null, so a
    consumer that reads only `code`-carrying records still sees a valid array."""
    records = [{**f.to_dict(), "path": display_path(f.path),
                "related": [{**r.to_dict(), "path": display_path(r.path)} for r in f.related]}
               for f in report.findings]
    records += [{"path": display_path(e.path), "line": None, "column": None, "end_line": None,
                 "end_column": None, "code": None, "name": "internal-error",
                 "message": f"internal error: {e.message}", "related": []}
                for e in report.errors]
    return json.dumps(records, indent=2, ensure_ascii=False) + "\n"


def github(report: Report, version: str) -> str:
    """GitHub workflow commands: one `::warning` annotation per finding."""
    lines = []
    for f in report.findings:
        properties = {"file": display_path(f.path), "line": f.line, "col": f.column,
                      "endLine": f.end_line, "endColumn": f.end_column,
                      "title": f"{f.code} {f.name}"}
        level = _GITHUB_LEVELS[f.severity]
        lines.append(f"::{level} {_github_properties(properties)}::"
                     f"{_escape_data(_with_cell(f))}")
    for error in report.errors:
        where = _github_properties({"file": display_path(error.path), "title": "memlint"})
        lines.append(f"::error {where}::{_escape_data('internal error: ' + error.message)}")
    return "".join(line + "\n" for line in lines)


_GITHUB_LEVELS = {"error": "error", "warning": "warning", "note": "notice"}


def _with_cell(finding: Finding | Related) -> str:
    if finding.cell is None:
        return finding.message
    return f"cell {finding.cell}, line {finding.cell_line}: {finding.message}"


def _escape_data(value: str) -> str:
    """The message part of a workflow command (GitHub's toolkit: escapeData)."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: object) -> str:
    """A property value additionally escapes its delimiters ':' and ','."""
    return _escape_data(str(value)).replace(":", "%3A").replace(",", "%2C")


def _github_properties(properties: dict) -> str:
    return ",".join(f"{key}={_escape_property(value)}" for key, value in properties.items())


def sarif(report: Report, version: str) -> str:
    """A SARIF 2.1.0 log with one run; internal errors are tool execution notifications."""
    from memlint.rules import ALL_RULES  # their docstrings describe them

    rules = [{"id": SYNTAX_ERROR_CODE, "name": NAMES_BY_CODE[SYNTAX_ERROR_CODE],
              "shortDescription": {"text": summary(SYNTAX_ERROR_CODE)},
              "help": _help(SYNTAX_ERROR_CODE),
              "defaultConfiguration": {"level": SEVERITY_BY_CODE[SYNTAX_ERROR_CODE]}}]
    rules += [{"id": rule.code, "name": rule.name,
               "shortDescription": {"text": summary(rule.code)},
               "fullDescription": {"text": " ".join((rule.__doc__ or "").split())},
               "help": _help(rule.code),
               "defaultConfiguration": {"level": rule.severity}} for rule in ALL_RULES]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = [{
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": f.severity,
        "message": {"text": _with_cell(f)},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(f.path), "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": f.line, "startColumn": f.column,
                       "endLine": f.end_line, "endColumn": f.end_column},
        }}],
        **_related_locations(f),
        **_fixes(f),
    } for f in report.findings]
    invocation = {
        "executionSuccessful": not report.errors,
        "toolExecutionNotifications": [{
            "level": "error",
            "message": {"text": f"internal error: {e.message}"},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(e.path), "uriBaseId": "%SRCROOT%"}}}],
        } for e in report.errors],
    }
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "memlint", "version": version,
                                "semanticVersion": version,
                                "rules": rules}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": _directory_uri(os.getcwd())}},
            "invocations": [invocation],
            "results": results,
        }],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _fixes(finding: Finding) -> dict:
    """The fix as SARIF `fixes`: one change of the finding's file, each edit a
    replacement of a region by new text (safe or unsafe said in its text)."""
    fix = finding.fix
    if fix is None:
        return {}
    return {"fixes": [{
        "description": {"text": f"{fix.message} ({fix.applicability} fix)"},
        "artifactChanges": [{
            "artifactLocation": {"uri": _uri(finding.path), "uriBaseId": "%SRCROOT%"},
            "replacements": [{
                "deletedRegion": {"startLine": e.line, "startColumn": e.column,
                                  "endLine": e.end_line, "endColumn": e.end_column},
                "insertedContent": {"text": e.content},
            } for e in fix.edits],
        }],
    }]}


def _related_locations(finding: Finding) -> dict:
    """The evidence as SARIF `relatedLocations`, numbered from 1 in the order given."""
    if not finding.related:
        return {}
    return {"relatedLocations": [{
        "id": number,
        "physicalLocation": {
            "artifactLocation": {"uri": _uri(r.path), "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": r.line, "startColumn": r.column},
        },
        "message": {"text": _with_cell(r)},
    } for number, r in enumerate(finding.related, start=1)]}


def _help(code: str) -> dict:
    """The rule's page itself (code scanning shows it beside the alert): no
    project URL is known to link to instead, and none is made up."""
    text = page(code)
    return {"text": text, "markdown": text}


def _uri(path: str) -> str:
    """A relative URI against %SRCROOT% (the working directory) where the file lies
    under it, else an absolute file: URI; GitHub code scanning wants relative ones."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if relative.startswith(os.pardir) or os.path.isabs(relative):
        return _file_uri(absolute)
    # a ':' stays encoded here: in a relative URI's first segment it would read as a scheme
    return quote(_path_bytes(PurePath(relative).as_posix()), safe="/")


def _file_uri(absolute: str) -> str:
    """`file:` URI of an absolute path, its bytes percent-encoded (RFC 8089)."""
    posix = PurePath(absolute).as_posix()
    drive = "/" if not posix.startswith("/") else ""  # C:/x -> file:///C:/x
    return f"file://{drive}{quote(_path_bytes(posix), safe='/:')}"


def _directory_uri(path: str) -> str:
    return _file_uri(os.path.abspath(path)).rstrip("/") + "/"


_GITLAB_SEVERITIES = {"error": "critical", "warning": "major", "note": "minor"}


def gitlab(report: Report, version: str) -> str:
    """GitLab's code-quality report (a subset of Code Climate's): one issue per
    finding, with a fingerprint that stays while the finding does (its path,
    code and message, and which copy of them it is), so merge requests show
    what is new."""
    import hashlib

    seen: Counter = Counter()
    issues = []
    records = [(f.path, f.code, _with_cell(f), f.line, _GITLAB_SEVERITIES[f.severity])
               for f in report.findings]
    records += [(e.path, "internal-error", f"internal error: {e.message}", 1, "blocker")
                for e in report.errors]
    for path, code, message, line, severity in records:
        shown = PurePath(display_path(os.path.relpath(path))).as_posix()
        seen[shown, code, message] += 1
        identity = f"{shown}\0{code}\0{message}\0{seen[shown, code, message]}"
        issues.append({"description": f"{code} {message}", "check_name": code,
                       "fingerprint": hashlib.sha256(identity.encode()).hexdigest(),
                       "severity": severity,
                       "location": {"path": shown, "lines": {"begin": line}}})
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"


def junit(report: Report, version: str) -> str:
    """JUnit XML, as CI systems show test results: one suite per file, one
    failed test case per finding (one passing case when there is none)."""
    from xml.etree import ElementTree

    root = ElementTree.Element("testsuites", name="memlint",
                               tests=str(max(len(report.findings) + len(report.errors), 1)),
                               failures=str(len(report.findings)), errors=str(len(report.errors)))
    by_path: dict[str, list[Finding]] = {}
    for finding in report.findings:
        by_path.setdefault(display_path(finding.path), []).append(finding)
    for path, findings in by_path.items():
        suite = ElementTree.SubElement(root, "testsuite", name=path, tests=str(len(findings)),
                                       failures=str(len(findings)), errors="0")
        for f in findings:
            case = ElementTree.SubElement(suite, "testcase", name=f"{f.code} {f.name}",
                                          classname=path, file=path, line=str(f.line))
            failure = ElementTree.SubElement(case, "failure", message=_with_cell(f),
                                             type=f.severity)
            failure.text = f"{location(f)}: {f.code} {f.message}"
    for error in report.errors:
        suite = ElementTree.SubElement(root, "testsuite", name=display_path(error.path),
                                       tests="1", failures="0", errors="1")
        case = ElementTree.SubElement(suite, "testcase", name="memlint",
                                      classname=display_path(error.path))
        ElementTree.SubElement(case, "error", message=f"internal error: {error.message}")
    if not report.findings and not report.errors:
        suite = ElementTree.SubElement(root, "testsuite", name="memlint", tests="1",
                                       failures="0", errors="0")
        ElementTree.SubElement(suite, "testcase", name="No findings", classname="memlint")
    ElementTree.indent(root)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + ElementTree.tostring(root, encoding="unicode") + "\n")


FORMATS: dict[str, Callable[[Report, str], str]] = {
    "text": text, "json": json_format, "github": github, "sarif": sarif, "gitlab": gitlab,
    "junit": junit,
}


def statistics(report: Report) -> str:
    """Per-code counts, most frequent first, as `ruff --statistics` prints them."""
    counts = Counter(f.code for f in report.findings)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "".join(f"{count:>5}  {code}  {NAMES_BY_CODE.get(code, '')}\n"
                   for code, count in ordered)
