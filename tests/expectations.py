"""Read the `# expect: MEMxxx` annotations that fixtures carry on flagged lines."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
FIXTURES = CHECKOUT / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>MEM[0-9]{3}(?:\s*,\s*MEM[0-9]{3})*)"
                     r"(?P<preview>\s*\(preview\))?")


def expected_findings(source: str, preview: bool = False) -> set[tuple[int, str]]:
    """(line, code) for every `# expect:` comment (real comments only, not strings);
    `# expect: MEM007 (preview)` only when findings in preview are shown too."""
    expected = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            match = _EXPECT.search(token.string)
            if match and (preview or not match.group("preview")):
                for code in re.split(r"\s*,\s*", match.group("codes")):
                    expected.add((token.start[0], code))
    return expected


def fixture_files(suffix: str = ".py") -> list[Path]:
    return sorted(p for p in FIXTURES.rglob(f"*{suffix}") if "__pycache__" not in p.parts)


def page_path(code: str) -> Path:
    """The checkout's reference page of `code`, in its rule package."""
    from memlint.rules.catalogue import PACKAGES_BY_CODE
    return CHECKOUT.joinpath(*PACKAGES_BY_CODE[code].split("."), "page.md")
