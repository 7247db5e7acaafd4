"""Findings for the verify test programs, read from their `# probe: CODE`
markers, so the probe machinery is tested apart from the rules."""

from __future__ import annotations

import re
from pathlib import Path

from memlint.finding import Finding

DATA = Path(__file__).resolve().parent / "data" / "verify"
_PROBE = re.compile(r"#\s*probe:\s*(MEM[0-9]{3})")


def probe_findings(path) -> list[Finding]:
    findings = []
    for number, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        match = _PROBE.search(text)
        if match:
            findings.append(Finding(str(path), number, 1, match.group(1), number, 1,
                                    "probe", "a probe marker"))
    return findings
