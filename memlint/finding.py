"""The one record every surface of memlint (CLI, flake8, pre-commit, verify) shares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Related:
    """Evidence for a finding, at another place: the copy to CUDA that makes a
    loader's batches go to the GPU, the caller in another file that runs with
    autograd on. Lines and columns are 1-based; in a notebook `line` counts the
    code cells joined, and `cell` / `cell_line` say where it is, as for a finding."""

    path: str
    line: int
    column: int
    message: str
    cell: int | None = None
    cell_line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.cell is None:
            del data["cell"], data["cell_line"]
        return data


@dataclass(frozen=True)
class Edit:
    """Replace the text from (`line`, `column`) up to (`end_line`,
    `end_column`), 1-based and end exclusive, with `content` (an insertion
    when the two positions are the same)."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str


#: A fix that cannot change what the program computes, only its memory or
#: speed: applied by `--fix`.
SAFE = "safe"
#: A fix that might change what the program does (the user must review it):
#: applied only with `--unsafe-fixes`.
UNSAFE = "unsafe"


@dataclass(frozen=True)
class Fix:
    """How to rewrite the flagged code, and whether that is safe."""

    applicability: str  # SAFE or UNSAFE
    message: str
    edits: tuple[Edit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [asdict(edit) for edit in self.edits]}


@dataclass(frozen=True, order=True)
class Finding:
    """A rule's verdict on one place in one file.

    Lines and columns are 1-based. The field order is the sort order of a run:
    path, line, column, code.
    """

    path: str
    line: int
    column: int
    code: str
    end_line: int
    end_column: int
    name: str
    message: str
    cell: int | None = None
    cell_line: int | None = None
    #: the evidence, where the rule has it; not part of a finding's identity
    #: (sorting and de-duplication ignore it)
    related: tuple[Related, ...] = field(default=(), compare=False)
    #: a `memlint.analysis.project.Condition` still to be decided once every
    #: file of the project is known (None: the finding stands); Any, as this
    #: module is below the analyses
    unless: Any = field(default=None, compare=False, repr=False)
    #: the rewrite that removes the finding, where a sound one exists
    fix: Fix | None = field(default=None, compare=False)
    #: "error", "warning" or "note": the rule's default or the project's setting
    severity: str = field(default="warning", compare=False)
    #: a variant of its rule kept out of the default set (`--preview` shows it)
    preview: bool = field(default=False, compare=False)

    @property
    def summary(self) -> str:
        """What is wrong, in one short clause: the message up to its first `: `."""
        return message_parts(self.message)[0]

    @property
    def why(self) -> str | None:
        """What it costs: the message between its `: ` and its last `; `."""
        return message_parts(self.message)[1]

    @property
    def help(self) -> str | None:
        """What to do instead: the message after its last `; `."""
        return message_parts(self.message)[2]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: the fields of DESIGN.md, `related` (always a list,
        often empty), `fix` (null when there is none), plus the cell for
        notebooks."""
        data = asdict(self)
        del data["unless"]
        if self.cell is None:
            del data["cell"], data["cell_line"]
        data["related"] = [r.to_dict() for r in self.related]
        data["fix"] = self.fix.to_dict() if self.fix is not None else None
        return data


def message_parts(message: str) -> tuple[str, str | None, str | None]:
    """(what, why, help) of a message written as every rule writes it,
    `<what is wrong>: <what it costs>; <what to do>`. Only separators outside
    quotes, backticks and brackets count (`'pad' ... (the DataLoader's
    collate_fn; num_workers=2): ...`); a message without both is all `what`
    (MEM000's "cannot parse the file: <why>" is shown whole)."""
    depth, quote, colon, semicolon = 0, None, None, None
    for i, char in enumerate(message):
        if quote is not None:
            if char == quote and (i + 1 == len(message) or not message[i + 1].isalnum()):
                quote = None
        elif char in "'\"`" and (i == 0 or not message[i - 1].isalnum()):
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and message.startswith(": ", i) and colon is None:
            colon = i
        elif depth == 0 and message.startswith("; ", i) and colon is not None:
            semicolon = i
    if colon is None or semicolon is None:
        return message, None, None  # a diagnostic (MEM000's "cannot parse the file: ..."): whole
    return message[:colon], message[colon + 2:semicolon], message[semicolon + 2:]


@dataclass(frozen=True)
class InternalError:
    """memlint itself failed on a file; the run goes on and exits 2 at the end."""

    path: str
    message: str
