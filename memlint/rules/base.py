"""The base class every rule derives from.

A rule module reads top to bottom: docstring (the rule's summary), `code`
(its name, severity and keywords are the `ENTRY` of its package), the
`VALID` / `INVALID` examples (collected by one generic test), then
`visit_<Node>` / `leave_<Node>` methods that call `self.report`.
Suppression, positions and selection are the engine's business; no rule looks
at comments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, NamedTuple

import libcst as cst

from memlint.analysis.context import Context
from memlint.analysis.project import Condition, ModuleFacts
from memlint.rules.catalogue import ENTRIES_BY_CODE
from memlint.rules.entry import RuleEntry


#: a rule's options from the configuration, checked against its `OPTIONS`
RuleOptions = Mapping[str, object]


class FixPlan(NamedTuple):
    """A rule's fix in tree terms: each `(old, new)` replaces the code of the
    node `old` with the code of `new` (libcst keeps everything else as
    written); `insertions` put text right before a node (a decorator before
    its `def`). The engine turns it into a `Fix` with positions."""

    applicability: str  # memlint.finding.SAFE or UNSAFE
    message: str
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode], ...] = ()
    insertions: tuple[tuple[cst.CSTNode, str], ...] = ()


class Report(NamedTuple):
    """What `Rule.report` was told, turned into a `Finding` by the engine."""

    node: cst.CSTNode
    statement: cst.CSTNode | None
    message: str
    unless: Condition | None
    related: tuple[tuple[cst.CSTNode, str], ...]
    fix: FixPlan | None
    severity: str | None = None  # None: the rule's
    preview: bool = False


class Rule:
    code: ClassVar[str]
    #: name, default severity and text screen: from its package's `ENTRY`,
    #: which the engine reads without importing the rules
    name: ClassVar[str]
    severity: ClassVar[str]
    keywords: ClassVar[tuple[str, ...]]
    entry: ClassVar[RuleEntry]
    #: Code snippets the rule must leave alone / must flag.
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.entry = ENTRIES_BY_CODE[cls.code]
        cls.name, cls.severity, cls.keywords = cls.entry.name, cls.entry.severity, \
            cls.entry.keywords

    def __init__(self, ctx: Context, options: RuleOptions | None = None) -> None:
        self.ctx = ctx
        self.options: RuleOptions = options or {}
        self.reports: list[Report] = []
        #: False for a rule walked only for the facts it gives other files (not
        #: selected here): its `finish` may skip judging what nobody will see
        self.reporting = True

    def report(self, node: cst.CSTNode, message: str,
               statement: cst.CSTNode | None = None, unless: Condition | None = None,
               related: Iterable[tuple[cst.CSTNode, str]] = (),
               fix: FixPlan | None = None, severity: str | None = None,
               preview: bool = False) -> None:
        """Flag `node`; the finding is placed on the first line of its statement
        (pass `statement`, kept from the visit, when reporting from `finish()`).
        `unless` names what, known once the whole project is walked, drops it.
        `related` is the evidence, `(node, message)` pairs in this file (the copy
        to CUDA, the `.eval()` call), placed by the engine with the finding.
        `fix` is the rewrite that removes it, where a sound one exists.
        `severity` overrides the rule's for this one finding (a variant whose
        cost is smaller); `preview` keeps it out of the default set (shown with
        `--preview` or when its code is selected by name), as a whole rule in
        preview is."""
        self.reports.append(Report(node, statement or self.statement(), message, unless,
                                   tuple(related), fix, severity, preview))

    @property
    def facts(self) -> ModuleFacts:
        """What this file tells the rest of the project (`ctx.facts`): always
        there for a rule, which the engine walks together with the collector."""
        facts = self.ctx.facts
        assert facts is not None, "rules are walked with a FactCollector"
        return facts

    def statement(self) -> cst.CSTNode | None:
        """The innermost statement enclosing the current node."""
        for ancestor in reversed(self.ctx.ancestors):
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
        return None

    def finish(self) -> None:
        """Called once after the whole module was walked: rules that need
        facts from the whole file (call sites, loaders vs device moves) report here."""

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]
