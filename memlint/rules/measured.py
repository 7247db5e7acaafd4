"""How often each rule is right on code nobody tuned it for, and which rules
run by default because of it.

The figures are the verdicts of held-out review sets (public repositories
chosen after the code was frozen and judged by someone who did not write it,
`bench/review/RESULTS.md`) and how often the rule fires on the review corpus.
They are data, written by `python scripts/write_measured.py` from the
committed verdicts (a test checks they are current), and they decide one
thing: a rule whose findings a maintainer could not trust runs in *preview*,
only when asked for (`--preview`, `preview = true`, or its exact code in
`select`), as ruff does with its new rules.
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: below this precision on held-out code a rule is not trusted by default
TRUSTED_PRECISION = 0.90
#: above this share of findings a maintainer would shrug at, neither
TRUSTED_DEBATABLE_SHARE = 0.20
#: fewer judged findings than this say nothing either way ...
ENOUGH_JUDGED = 10
#: ... unless they already rule out TRUSTED_PRECISION at this confidence
#: (0 TRUE of 3 decided does: a rule right 90 % of the time does that once in 1,000)
CONFIDENCE = 0.95


def precision_upper_bound(true: int, decided: int, confidence: float = CONFIDENCE) -> float:
    """The highest precision still consistent with `true` of `decided` at
    `confidence` (exact one-sided Clopper-Pearson bound, found by bisection)."""
    if true >= decided:
        return 1.0

    def at_most_true(p: float) -> float:  # P(X <= true) for X ~ Binomial(decided, p)
        return sum(math.comb(decided, k) * p ** k * (1 - p) ** (decided - k)
                   for k in range(true + 1))

    low, high = true / decided, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if at_most_true(middle) > 1 - confidence else (low, middle)
    return high


class Measured(NamedTuple):
    true: int
    false: int
    debatable: int
    #: findings per 1,000 Python files of the review corpus
    per_thousand_files: float

    @property
    def judged(self) -> int:
        return self.true + self.false + self.debatable

    @property
    def decided(self) -> int:
        """The verdicts that were TRUE or FALSE: what precision is counted on."""
        return self.true + self.false

    @property
    def precision(self) -> float | None:
        return self.true / self.decided if self.decided else None

    @property
    def debatable_share(self) -> float | None:
        return self.debatable / self.judged if self.judged else None

    @property
    def trusted(self) -> bool:
        """Too few verdicts to tell keep a rule on by default, unless even they
        rule out the trusted precision (`CONFIDENCE`) or shrug at so many that
        the share could not fall to `TRUSTED_DEBATABLE_SHARE` were the sample
        made up to `ENOUGH_JUDGED` with findings nobody shrugs at."""
        if self.judged < ENOUGH_JUDGED:
            if self.debatable > TRUSTED_DEBATABLE_SHARE * ENOUGH_JUDGED:
                return False
            return not self.decided or \
                precision_upper_bound(self.true, self.decided) >= TRUSTED_PRECISION
        precision, shrugged = self.precision, self.debatable_share
        return (precision is None or precision >= TRUSTED_PRECISION) \
            and shrugged is not None and shrugged <= TRUSTED_DEBATABLE_SHARE

    def verdict(self) -> str:
        """The figures as a reader needs them: precision, of how many, and the shrugs."""
        if not self.judged:
            return "not judged yet"
        shown = f"{self.precision:.2f} of {self.decided}" if self.decided else "none decided"
        shown += f", {self.debatable_share:.0%} debatable"
        if self.judged >= ENOUGH_JUDGED:
            return shown
        if self.trusted:
            return shown + " (too few to tell)"
        if self.debatable > TRUSTED_DEBATABLE_SHARE * ENOUGH_JUDGED:
            return shown + f" (few, yet too many shrugged at for {ENOUGH_JUDGED} to fall to " \
                           f"{TRUSTED_DEBATABLE_SHARE:.0%})"
        return shown + f" (few, yet below {TRUSTED_PRECISION:.2f} at {CONFIDENCE:.0%} confidence)"


def verdict_of(code: str) -> str:
    figures = MEASURED.get(code)
    return figures.verdict() if figures is not None else "not judged yet"


def frequency_of(code: str) -> str:
    """Findings per 1,000 files of the review corpus, as printed."""
    figures = MEASURED.get(code)
    return f"{figures.per_thousand_files:g}" if figures is not None else "0"


def preview_codes() -> frozenset[str]:
    """The codes that run only when asked for (a preview variant's own figures,
    `MEM007 (preview variant)`, decide nothing: it is in preview already)."""
    return frozenset(code for code, figures in MEASURED.items()
                     if " " not in code and not figures.trusted)


# -- the figures: written by `python scripts/write_measured.py`, never by hand --
#: the held-out listings (`bench/review/repos/<glob>.csv`) whose verdicts count
HELDOUT_LISTINGS: tuple[str, ...] = (
    'heldout11_*',
    'heldout12_*',
    'heldout13_*',
    'heldout14_*',
    'heldout15_*',
    'heldout16_*',
    'heldout17_*',
    'heldout18_*',
    'heldout19_*',
    'heldout20_*',
    'heldout21_*',
    'heldout22_*',
    'heldout23_*',
    'heldout24_*',
    'heldout25_*',
    'heldout26_*',
    'heldout27_*',
    'heldout28_*',
    'heldout29_*',
    'heldout30_*',
    'heldout31_*',
    'heldout32_*',
    'heldout33_*',
    'heldout34_*',
)
#: rules measured on some of those listings only (changed since the others)
RULE_LISTINGS: dict[str, tuple[str, ...]] = {
    'MEM001': (
        'heldout20_*',
        'heldout21_*',
        'heldout22_*',
        'heldout23_*',
        'heldout24_*',
        'heldout25_*',
        'heldout26_*',
        'heldout27_*',
        'heldout28_*',
        'heldout29_*',
        'heldout30_*',
        'heldout31_*',
        'heldout32_*',
        'heldout33_*',
        'heldout34_*',
    ),
    'MEM002': (
        'heldout27_*',
        'heldout28_*',
        'heldout29_*',
        'heldout30_*',
        'heldout31_*',
        'heldout32_*',
        'heldout33_*',
        'heldout34_*',
    ),
    'MEM003': (
        'heldout26_*',
        'heldout27_*',
        'heldout28_*',
        'heldout29_*',
        'heldout30_*',
        'heldout31_*',
        'heldout32_*',
        'heldout33_*',
        'heldout34_*',
    ),
    'MEM004': ('heldout33_*', 'heldout34_*'),
    'MEM005': ('heldout33_*', 'heldout34_*'),
    'MEM007': ('heldout30_*', 'heldout31_*', 'heldout32_*', 'heldout33_*', 'heldout34_*'),
    'MEM009': (
        'heldout26_*',
        'heldout27_*',
        'heldout28_*',
        'heldout29_*',
        'heldout30_*',
        'heldout31_*',
        'heldout32_*',
        'heldout33_*',
        'heldout34_*',
    ),
    'MEM010': (
        'heldout26_*',
        'heldout27_*',
        'heldout28_*',
        'heldout29_*',
        'heldout30_*',
        'heldout31_*',
        'heldout32_*',
        'heldout33_*',
        'heldout34_*',
    ),
}
#: what the figures are: which sets, judged at which commit, when; which corpus
SOURCE = ('745 held-out repositories (heldout11_*, heldout12_*, heldout13_*, heldout14_*, '
          'heldout15_*, heldout16_*, heldout17_*, heldout18_*, heldout19_*, heldout20_*, '
          'heldout21_*, heldout22_*, heldout23_*, heldout24_*, heldout25_*, heldout26_*, '
          'heldout27_*, heldout28_*, heldout29_*, heldout30_*, heldout31_*, heldout32_*, '
          'heldout33_*, heldout34_*) judged at 912cbe8 and d923155 and 52aba62 and 7c8e542 '
          'and 1e559f3 and ccea863 and 7be17bf and 32277c2 and eac6b24 and 496161f and '
          'aef53df and aef53df and e181171 and a64f186 and a64f186 and 6fae751 and cce8379 '
          'and f559b09 and 86b8ff4 and dd79e4d and 58ca69b and 58ca69b and fe86d09 and '
          'fe86d09, 2026-11-28; frequency on the review corpus (561 repositories, 28972 '
          'files), 2026-11-27 (kept: the corpus was not run again); MEM001 on heldout20_* '
          'and heldout21_* and heldout22_* and heldout23_* and heldout24_* and heldout25_* '
          'and heldout26_* and heldout27_* and heldout28_* and heldout29_* and heldout30_* '
          'and heldout31_* and heldout32_* and heldout33_* and heldout34_* only, MEM002 on '
          'heldout27_* and heldout28_* and heldout29_* and heldout30_* and heldout31_* and '
          'heldout32_* and heldout33_* and heldout34_* only, MEM003 on heldout26_* and '
          'heldout27_* and heldout28_* and heldout29_* and heldout30_* and heldout31_* and '
          'heldout32_* and heldout33_* and heldout34_* only, MEM004 on heldout33_* and '
          'heldout34_* only, MEM005 on heldout33_* and heldout34_* only, MEM007 on '
          'heldout30_* and heldout31_* and heldout32_* and heldout33_* and heldout34_* '
          'only, MEM009 on heldout26_* and heldout27_* and heldout28_* and heldout29_* and '
          'heldout30_* and heldout31_* and heldout32_* and heldout33_* and heldout34_* '
          'only, MEM010 on heldout26_* and heldout27_* and heldout28_* and heldout29_* and '
          'heldout30_* and heldout31_* and heldout32_* and heldout33_* and heldout34_* only')
MEASURED: dict[str, Measured] = {
    "MEM000": Measured(true=72, false=8, debatable=0,
                      per_thousand_files=4.42),
    "MEM001": Measured(true=8, false=122, debatable=45,
                      per_thousand_files=5.70),
    "MEM002": Measured(true=0, false=6, debatable=0,
                      per_thousand_files=0.48),
    "MEM003": Measured(true=5, false=34, debatable=19,
                      per_thousand_files=1.97),
    "MEM004": Measured(true=20, false=9, debatable=4,
                      per_thousand_files=17.15),
    "MEM004 (preview variant)": Measured(true=0, false=1, debatable=0,
                      per_thousand_files=0.00),
    "MEM005": Measured(true=25, false=0, debatable=1,
                      per_thousand_files=46.84),
    "MEM005 (preview variant)": Measured(true=67, false=7, debatable=54,
                      per_thousand_files=0.00),
    "MEM007": Measured(true=32, false=3, debatable=5,
                      per_thousand_files=42.49),
    "MEM007 (preview variant)": Measured(true=156, false=47, debatable=95,
                      per_thousand_files=0.00),
    "MEM008": Measured(true=5, false=45, debatable=4,
                      per_thousand_files=0.59),
    "MEM009": Measured(true=0, false=3, debatable=0,
                      per_thousand_files=0.03),
    "MEM010": Measured(true=0, false=2, debatable=17,
                      per_thousand_files=0.86),
}
