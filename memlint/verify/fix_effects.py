"""`memlint verify --fix`: what each fix saves, measured rather than claimed.

The program runs twice with the same arguments, seed and timeout: as it is,
then with the fixes applied to a copy of its text that runs in the file's
place (the file on disk is never written). Each fixed finding's line is
probed in both runs with its rule's meter, and the quantity the rule is
about is compared: bytes a statement put on the GPU (MEM001), bytes kept per
iteration (MEM003), activations saved for backward (MEM004), the copy of a
batch as the loader hands it over (MEM005), bytes a load put on the GPU
(MEM007); with the peak allocated and reserved bytes of each run.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace

from memlint.engine.fixes import fix_text
from memlint.engine.source import check_source
from memlint.finding import UNSAFE, Finding
from memlint.verify.judges import Quantity, human_bytes, rule_verify
from memlint.verify.runner import Options, ScriptRun, Verified, verify_script


@dataclass
class FixEffect:
    """One fixed finding: its quantity in the run as written and in the fixed run."""

    finding: Finding
    fixed_line: int  # the finding's line in the fixed text
    applicability: str
    what: str
    unit: str
    before: float | None
    after: float | None
    lower_is_better: bool = True

    @property
    def saved(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.before - self.after if self.lower_is_better else self.after - self.before

    def describe(self) -> str:
        if self.before is None and self.after is None:
            return f"{self.what}: not measured in either run (the line never ran)"
        text = f"{self.what}: {_amount(self.before, self.unit)} -> {_amount(self.after, self.unit)}"
        saved = self.saved  # None exactly when `before` or `after` is
        if saved is None or self.before is None or self.after is None:
            return text
        if self.unit == "GB/s":
            return text + (f" ({self.after / self.before:.1f}x faster)" if self.before else "")
        return text + f" (saved {_amount(self.saved, self.unit)})"

    def to_dict(self) -> dict:
        return {"code": self.finding.code, "line": self.finding.line,
                "fixed_line": self.fixed_line, "applicability": self.applicability,
                "quantity": self.what, "unit": self.unit, "before": self.before,
                "after": self.after, "improvement": self.saved}


@dataclass
class FixComparison:
    """A script's two runs and the effect of each fix."""

    path: str
    before: ScriptRun
    after: ScriptRun | None
    effects: list[FixEffect]
    not_fixed: str = ""  # why no fixed run was made, if none was

    def run_totals(self) -> list[tuple[str, int | None, int | None]]:
        """(what, before, after) of the runs' peak allocated and reserved bytes."""
        return [(name, (self.before.raw or {}).get(key), ((self.after and self.after.raw) or {})
                 .get(key)) for name, key in (("peak allocated", "peak_allocated"),
                                              ("peak reserved", "peak_reserved"))]


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "not measured"
    if unit == "bytes":
        return human_bytes(value)
    return f"{value:.1f} {unit}" if unit == "GB/s" else f"{value:.0f} {unit}"


def _quantities(code: str) -> tuple[Quantity, ...]:
    """What the rule's fix can change, from its `verify.py` (empty: no number to compare)."""
    quantities: tuple[Quantity, ...] = rule_verify(code).QUANTITIES
    return quantities


def _quantity(code: str, numbers: dict) -> Quantity | None:
    """The quantity the finding was confirmed on in the run as written."""
    return next((q for q in _quantities(code) if q.applies(numbers)), None)


def line_map(before: str, after: str) -> Callable[[int], int]:
    """Where each line of `before` is in `after` (1-based): unchanged lines
    by the diff, a rewritten line at the same place in its rewritten block."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(),
                                      autojunk=False)
    blocks = matcher.get_opcodes()

    def where(line: int) -> int:
        index = line - 1
        for _, i1, i2, j1, j2 in blocks:
            if i1 <= index < i2:
                return j1 + min(index - i1, max(j2 - j1 - 1, 0)) + 1
        return line
    return where


def compare_fixes(path: str, findings: list[Finding], options: Options,
                  unsafe: bool) -> FixComparison:
    """Run `path` as it is and with its fixes applied, and measure each fix."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    before = verify_script(path, findings, options)
    result = fix_text(text, findings, unsafe,
                      lambda fixed: check_source(fixed, path, options.settings))
    if not result.fixed:
        return FixComparison(path, before, None, [], "no fix applies to its findings" + (
            "" if unsafe else " (unsafe fixes need --unsafe-fixes)"))
    where = line_map(text, result.text)
    fixed = [f for f in result.fixed if _quantities(f.code)]
    moved = [replace(f, line=where(f.line), end_line=where(f.end_line), fix=None)
             for f in fixed]
    after = verify_script(path, moved, options, source=result.text)
    by_line = {(v.finding.code, v.finding.line): v for v in after.verified}
    effects = []
    for finding, moved_finding in zip(fixed, moved):
        assert finding.fix is not None  # only fixed findings are compared
        before_numbers = _numbers(before.verified, finding)
        quantity = _quantity(finding.code, before_numbers)
        if quantity is None:
            continue
        after_verified = by_line.get((finding.code, moved_finding.line))
        effects.append(FixEffect(
            finding, moved_finding.line, finding.fix.applicability, quantity.what,
            quantity.unit, quantity.read(before_numbers),
            quantity.read(after_verified.judgement.numbers) if after_verified else None,
            quantity.lower_is_better))
    return FixComparison(path, before, after, effects)


def _numbers(verified: list[Verified], finding: Finding) -> dict:
    for item in verified:
        if item.finding is finding:
            return item.judgement.numbers
    return {}


def format_text(comparisons: list[FixComparison]) -> str:
    rows = []
    for comparison in comparisons:
        if comparison.after is None:
            rows.append(f"{comparison.path}: not fixed: {comparison.not_fixed}")
            continue
        unsafe = sum(e.applicability == UNSAFE for e in comparison.effects)
        rows.append(f"{comparison.path}: {len(comparison.effects)} fix"
                    f"{'es' * (len(comparison.effects) != 1)} applied in a copy"
                    f"{f' ({unsafe} unsafe)' if unsafe else ''}, the file untouched")
        for name, before, after in comparison.run_totals():
            if before is not None and after is not None:
                rows.append(f"  run     {name}: {human_bytes(before)} -> {human_bytes(after)} "
                            f"(saved {human_bytes(before - after)})")
        for effect in comparison.effects:
            finding = effect.finding
            rows.append(f"  {finding.code}  {finding.path}:{finding.line:<6} {effect.describe()}")
    return "\n".join(rows)


def format_json(comparisons: list[FixComparison]) -> dict:
    return {"fixes": [{
        "path": c.path, "not_fixed": c.not_fixed or None,
        "runs": {name: {"peak_allocated": (run.raw or {}).get("peak_allocated"),
                        "peak_reserved": (run.raw or {}).get("peak_reserved"),
                        "outcome": run.outcome, "run_seconds": run.run_seconds}
                 for name, run in (("before", c.before), ("after", c.after)) if run},
        "effects": [e.to_dict() for e in c.effects]} for c in comparisons]}
