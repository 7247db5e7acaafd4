"""memlint as a flake8 plugin, so editors that run flake8 show memlint's findings.

A thin adapter over `memlint.check_source`: the same engine, rules and `# noqa`
handling as `memlint check`, fed the lines flake8 already read (flake8 also
checks stdin, where there is no file to re-read). Selection (`--select`,
`--extend-select`, `--ignore`, `--per-file-ignores`) is flake8's own; every
rule runs and flake8 filters the codes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from memlint import __version__
from memlint.engine import check_source
from memlint.settings import Settings

_Result = tuple[int, int, str, type]


class MemlintChecker:
    """flake8's "tree" plugin type; the tree is unused (memlint parses with libcst)."""

    name = "memlint"
    version = __version__

    #: set from flake8's options once per run, in `parse_options`
    honour_memlint_noqa = True

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.lines = lines
        self.filename = filename

    @classmethod
    def parse_options(cls, options) -> None:
        # With `--disable-noqa` flake8 shows what `# noqa` hides; memlint must not
        # hide those findings first.
        cls.honour_memlint_noqa = not getattr(options, "disable_noqa", False)

    def run(self) -> Iterator[_Result]:
        findings = check_source("".join(self.lines), self.filename, Settings(),
                                noqa=self.honour_memlint_noqa)
        for finding in findings:
            # flake8 wants a 0-based column and adds 1 when it prints
            yield (finding.line, finding.column - 1,
                   f"{finding.code} {finding.message}", type(self))
