"""The one record every surface of memlint (CLI, flake8, pre-commit, verify) shares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    #: a `memlint.analysis.project.Condition` still to be decided once every
    #: file of the project is known (None: the finding stands)
    unless: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        """The JSON shape: the fields of DESIGN.md, plus the cell for notebooks."""
        data = asdict(self)
        del data["unless"]
        if self.cell is None:
            del data["cell"], data["cell_line"]
        return data


@dataclass(frozen=True)
class InternalError:
    """memlint itself failed on a file; the run goes on and exits 2 at the end."""

    path: str
    message: str
