"""Check Jupyter notebooks: the code cells, joined in order, through the same engine.

The code cells are checked as one module, so an `import torch` in the first
cell resolves a `torch.load` in the tenth. IPython syntax that is not Python
(`%matplotlib inline`, `!pip install ...`, `x = !ls`, `model?`, a `%%bash`
cell) is replaced line for line, so every line keeps its number.

Where a notebook finding points (fields of `memlint.Finding`):

- `cell`: 1-based position of the cell among ALL cells of the notebook,
  markdown included (`notebook["cells"][cell - 1]` is the flagged cell);
- `cell_line`: 1-based line inside that cell; `column` is a column of that line;
- `line` / `end_line`: lines of the code cells joined in order, which keeps
  findings sorted from the first cell to the last. Reporters show the cell:
  `nb.ipynb:cell 3:2:5: MEM003 ...`.

A notebook that is not valid JSON or not shaped like nbformat 4 is one MEM000
finding, never a traceback; so is a code cell that does not parse (its code is
left out, the other cells are still checked). Notebooks are parsed with the
json module only: `check` needs nothing but libcst.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, replace

from collections.abc import Callable

from memlint.analysis.source_lines import LINE_BREAK
from memlint.analysis.project import ModuleFacts, Project
from memlint.engine.fixes import MAX_PASSES, FixResult, apply_fixes, wanted
from memlint.engine.source import analyse_source
from memlint.engine.syntax import syntax_error
from memlint.analysis.files import read_regular
from memlint.finding import Finding, Fix, Related
from memlint.rules import SYNTAX_ERROR_CODE
from memlint.engine.settings import Settings
from memlint.analysis.source_lines import parse_quietly

#: Cell magics whose body is Python; any other cell magic (`%%bash`,
#: `%%writefile`, `%%html`, ...) makes the whole cell something else.
PYTHON_CELL_MAGICS = frozenset({
    "time", "timeit", "capture", "prun", "debug", "memit", "mprun", "snakeviz",
    "scalene", "pypy", "python", "python3", "cuda_memory",
})

_CELL_MAGIC = re.compile(r"\s*%%(?P<name>\w+)")
#: IPython's line magics and shell aliases (`%lsmagic`, IPython 8), which its
#: automagic (on by default) runs without the `%`: `cd ..`, `pip install x`,
#: `run train.py`
AUTOMAGICS = frozenset({
    "alias", "alias_magic", "autoawait", "autocall", "automagic", "autosave", "bookmark",
    "cat", "cd", "clear", "colors", "conda", "config", "cp", "debug", "dhist", "dirs",
    "doctest_mode", "ed", "edit", "env", "gui", "hist", "history", "killbgscripts", "ldir",
    "less", "lf", "lk", "ll", "load", "load_ext", "loadpy", "logoff", "logon", "logstart",
    "logstate", "logstop", "ls", "lsmagic", "lx", "macro", "magic", "mamba", "man",
    "matplotlib", "micromamba", "mkdir", "more", "mv", "notebook", "page", "pastebin", "pdb",
    "pdef", "pdoc", "pfile", "pinfo", "pinfo2", "pip", "popd", "pprint", "precision", "prun",
    "psearch", "psource", "pushd", "pwd", "pycat", "pylab", "quickref", "recall", "rehashx",
    "reload_ext", "rep", "rerun", "reset", "reset_selective", "rm", "rmdir", "run", "save",
    "sc", "set_env", "store", "sx", "system", "tb", "time", "timeit", "unalias", "unload_ext",
    "who", "who_ls", "whos", "xdel", "xmode",
})
# `%magic`, `!cmd`, `x = %magic`, `files = !ls`, `?obj`, `obj?`, `obj??`, and
# the wildcard search `torch.*Tensor?`, matched after the indentation (an
# indentation group overlapping `[...\s]+` takes quadratic time on a long run
# of spaces), and a magic called through automagic (`cd ..`, `ls -la`: a
# magic's name and a space, then anything but an assignment, as IPython's
# own AssignmentChecker tells them: `cd = 1`, `ls, x = 1, 2`)
_IPYTHON_LINE = re.compile(
    r"(?:(?:[\w.\[\]\s,]+=\s*)?[%!]|\?\??[\w.*]*\s*$|[\w.*]+\?\??\s*$|"
    rf"(?:{'|'.join(sorted(AUTOMAGICS))})(?:\s*$|\s+(?!\s|=(?!=)|,)))")


@dataclass(frozen=True)
class _CodeLine:
    cell: int
    cell_line: int


def check_notebook(path: str, settings: Settings | None = None) -> list[Finding]:
    """Findings for a notebook on disk. `OSError` is the caller's (the engine
    turns it into MEM000); a rule failure raises `RuleCrash`, as for a file."""
    return check_notebook_source(read_regular(path), path, settings)


def check_notebook_source(data: str | bytes, path: str,
                          settings: Settings | None = None) -> list[Finding]:
    """Findings for a notebook's JSON text, judged on what it shows (the
    project around it is not read: `check_paths` reads it)."""
    findings, facts = analyse_notebook_source(data, path, settings)
    return Project([facts], complete=False).settle(
        findings, (settings or Settings()).shows_preview)


def analyse_notebook_source(data: str | bytes, path: str, settings: Settings | None = None,
                            module: str | None = None,
                            ) -> tuple[list[Finding], ModuleFacts | None]:
    """A notebook's findings, some waiting on the project it sits in, and the
    facts its code cells give that project (`analyse_source` for notebooks)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            notebook = json.loads(data)
    except UnicodeDecodeError as error:
        return [syntax_error(path, 1, 1, f"cannot decode the notebook: {error.reason}")], None
    except json.JSONDecodeError as error:
        return [syntax_error(path, error.lineno, error.colno,
                             f"not a notebook: invalid JSON ({error.msg})")], None
    except RecursionError:  # `[[[[...]]]]`: the json module recurses per level
        return [syntax_error(path, 1, 1, "not a notebook: JSON nested too deeply")], None
    except ValueError:  # an integer of more digits than Python converts (4300)
        return [syntax_error(path, 1, 1, "not a notebook memlint can read: it holds a "
                                         "number too long to read")], None
    problem = _shape_problem(notebook)
    if problem:
        return [syntax_error(path, 1, 1, f"not a notebook memlint can read: {problem}")], None
    if not _is_python(notebook):
        return [], None

    code_lines: list[str] = []
    origins: list[_CodeLine] = []
    as_written: list[str] = []  # each joined line as its cell has it
    findings: list[Finding] = []
    for cell_number, cell in enumerate(notebook["cells"], start=1):
        if cell["cell_type"] != "code":
            continue
        lines = LINE_BREAK.split(cell_text(cell))
        as_written.extend(lines)
        if _parse_error(lines) is not None:
            lines = python_lines(lines)
            unparsable = _parse_error(lines)
            if unparsable is not None:
                line, column, message = unparsable
                mem000 = syntax_error(path, len(code_lines) + line, column, message)
                findings.append(replace(mem000, cell=cell_number, cell_line=line))
                lines = [""] * len(lines)
        code_lines.extend(lines)
        origins.extend(_CodeLine(cell_number, n) for n in range(1, len(lines) + 1))

    found, facts = analyse_source("\n".join(code_lines) + "\n", path, settings, module=module)
    for finding in found:
        origin = origins[min(finding.line, len(origins)) - 1]
        if finding.code == SYNTAX_ERROR_CODE:
            # the cells parsed one by one but not together: say which cell
            finding = replace(finding, message=f"{finding.message} (the code cells joined)")
        related = tuple(_in_cell(r, origins) for r in finding.related)
        fix = _fix_in_cell(finding.fix, origin.cell, origins, code_lines, as_written) \
            if finding.fix is not None else None
        findings.append(replace(finding, cell=origin.cell, cell_line=origin.cell_line,
                                related=related, fix=fix))
    return sorted(findings), facts


def cell_text(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def _fix_in_cell(fix: Fix, cell: int, origins: list[_CodeLine], code_lines: list[str],
                 as_written: list[str]) -> Fix | None:
    """The fix with its edits in the lines of the finding's cell (a notebook
    is fixed cell by cell), or None where an edit leaves that cell or touches
    a line the checker read differently from the cell (IPython syntax, a
    cell indented as a whole): there its columns would not be the cell's."""
    edits = []
    for edit in fix.edits:
        lines = range(edit.line, edit.end_line + 1)
        if edit.end_line > len(origins) or any(
                origins[n - 1].cell != cell or code_lines[n - 1] != as_written[n - 1]
                for n in lines):
            return None
        edits.append(replace(edit, line=origins[edit.line - 1].cell_line,
                             end_line=origins[edit.end_line - 1].cell_line))
    return replace(fix, edits=tuple(edits))


def _in_cell(related: Related, origins: list[_CodeLine]) -> Related:
    """Evidence in the same notebook, placed in its cell like the finding."""
    origin = origins[min(related.line, len(origins)) - 1]
    return replace(related, cell=origin.cell, cell_line=origin.cell_line)


def python_lines(lines: list[str]) -> list[str]:
    """The cell's lines with IPython-only syntax replaced, one line for one line.
    Only used on a cell that does not parse as it is, so `% b` continuing an
    expression in valid Python is never mistaken for a magic."""
    magic = _CELL_MAGIC.match(lines[0]) if lines else None
    if magic:
        if magic.group("name") not in PYTHON_CELL_MAGICS:
            return [""] * len(lines)
        lines = ["", *lines[1:]]
    replaced, continued = [], False
    for line in _without_leading_indent(lines):
        # `!wget url \` then `    -O file`: IPython joins a magic's continuation lines
        replaced.append("" if continued else _without_ipython_syntax(line))
        ipython = continued or replaced[-1] != line
        continued = ipython and line.rstrip().endswith("\\")
    return replaced


def _without_leading_indent(lines: list[str]) -> list[str]:
    """IPython runs a cell whose first line is indented as if it were not: the
    first line's indentation is taken off every line that starts with it
    (its `leading_indent` transformer). Columns in such a cell shift by it."""
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip(" \t"))] if lines else ""
    if not indent or not lines[0].strip():
        return lines
    return [line[len(indent):] if line.startswith(indent) else line for line in lines]


def _without_ipython_syntax(line: str) -> str:
    code = line.lstrip()
    if _IPYTHON_LINE.match(code) is None:
        return line
    # `pass` keeps a block valid where the magic was its only statement
    return f"{line[:len(line) - len(code)]}pass"


def _parse_error(lines: list[str]) -> tuple[int, int, str] | None:
    """(line, column, message) if the cell is not Python, else None."""
    try:
        parse_quietly("\n".join(lines) + "\n")
    except SyntaxError as error:
        return (error.lineno or 1, error.offset or 1,
                f"cannot parse this cell, its code was not checked: {error.msg}")
    except (RecursionError, MemoryError):
        return 1, 1, ("cannot parse this cell, its code was not checked: an expression is "
                      "nested or chained too deeply (Python refuses it too)")
    except ValueError as error:  # null bytes
        return 1, 1, f"cannot parse this cell, its code was not checked: {error}"
    return None


def _shape_problem(notebook: object) -> str | None:
    """What keeps this JSON from being an nbformat-4 notebook, if anything."""
    if not isinstance(notebook, dict):
        return "the top level is not a JSON object"
    major = notebook.get("nbformat", 4)
    if isinstance(major, int) and major < 4:
        return (f"nbformat {major} is not supported; convert it with "
                "`jupyter nbconvert --to notebook --nbformat 4`")
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        return "it has no \"cells\" list"
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            return f"cell {number} has no \"cell_type\""
        source = cell.get("source")
        if not (isinstance(source, str)
                or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            return f"cell {number} has no \"source\" text"
    return None


def _is_python(notebook: dict) -> bool:
    """False for notebooks of another kernel language (R, Julia, ...)."""
    metadata = notebook.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for key in ("language_info", "kernelspec"):
        section = metadata.get(key)
        language = section.get("language" if key == "kernelspec" else "name") \
            if isinstance(section, dict) else None
        if isinstance(language, str) and language:
            return language.lower() == "python"
    return True


def fix_notebook(text: str, findings: list[Finding], unsafe: bool,
                 recheck: Callable[[str], list[Finding]]) -> FixResult:
    """A notebook's JSON text with its findings' fixes applied cell by cell:
    only the fixed cells' sources change, outputs, metadata and the JSON
    layout are kept byte for byte. A notebook whose layout `json` cannot
    write back unchanged is left alone (`FixResult.refused` says why); a
    fixed cell that no longer parses keeps its code. Fixes that overlap wait
    for the next pass, as in a file."""
    result = FixResult(text)
    notebook = json.loads(text)
    dump = _dumper_like(text, notebook)
    if dump is None:
        result.refused = ("its JSON layout is not one memlint can write back unchanged "
                          "(save it from Jupyter first)")
        return result
    pending = [f for f in findings if wanted(f, unsafe) and f.cell]
    for _ in range(MAX_PASSES):
        waited: set[tuple] = set()
        for cell_number, cell_findings in _by_cell(pending).items():
            cell = notebook["cells"][cell_number - 1]
            before = cell_text(cell)
            fixed, applied, waiting = apply_fixes(before, cell_findings)
            if applied and _cell_parses(fixed):
                _set_cell_text(cell, fixed)
                result.fixed.extend(applied)
                waited |= {_identity(f, before) for f in waiting}
        if not waited:
            break
        result.text = dump(notebook)
        pending = [f for f in recheck(result.text) if wanted(f, unsafe) and f.cell
                   and _identity(f, cell_text(notebook["cells"][f.cell - 1])) in waited]
    result.text = dump(notebook) if result.fixed else text
    return result


def _dumper_like(text: str, notebook: object) -> Callable[[object], str] | None:
    """`json.dumps` with the settings that write `notebook` back as `text` (the
    indentation and escaping Jupyter or another tool used), or None."""
    body = text.rstrip()
    tail = text[len(body):]
    for indent in (1, 2, 4, None, 3, 8, "\t"):
        for ensure_ascii in (False, True):
            def dump(value: object, indent=indent, ensure_ascii=ensure_ascii) -> str:
                return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii) + tail
            if dump(notebook) == text:
                return dump
    return None


def _by_cell(findings: list[Finding]) -> dict[int, list[Finding]]:
    cells: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.cell is not None:  # every finding of a notebook names its cell
            cells.setdefault(finding.cell, []).append(finding)
    return cells


def _identity(finding: Finding, text: str) -> tuple:
    """A finding as it reads in its cell (code, message, flagged code), not where it is."""
    lines = text.splitlines(keepends=True) or [""]
    first = finding.cell_line or finding.line  # set on every finding of a notebook
    last = first + finding.end_line - finding.line
    flagged = "".join(lines[first - 1:last])
    return finding.code, finding.message, finding.cell, flagged


def _cell_parses(text: str) -> bool:
    lines = LINE_BREAK.split(text)
    return _parse_error(lines) is None or _parse_error(python_lines(lines)) is None


def _set_cell_text(cell: dict, text: str) -> None:
    """Keep the cell's own form: a list of lines (each with its line break) or one string."""
    if isinstance(cell["source"], list):
        lines = [line + "\n" for line in text.split("\n")]
        lines[-1] = lines[-1][:-1]
        cell["source"] = lines if lines[-1] else lines[:-1]
    else:
        cell["source"] = text
