"""`--baseline FILE`: the findings a project already has are not reported, so
a large codebase can adopt memlint and fail only on new ones.

The file is what `memlint check --format json -o FILE` writes. A finding is
known when the file holds one with the same path, code and message, each
entry matching once: lines may move, a second copy of a known mistake is new.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import replace

from memlint.engine.config import ConfigError
from memlint.engine import Report


def load_baseline(path: str) -> Counter:
    """(path, code, message) of every finding the file holds, with its count."""
    try:
        with open(path, encoding="utf-8") as handle:
            records = json.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"--baseline {path}: no such file (write one with: memlint check "
                          f"--format json -o {path})") from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"--baseline {path}: not a findings file memlint wrote "
                          f"({getattr(error, 'strerror', None) or error})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ConfigError(f"--baseline {path}: expected the JSON array that --format json "
                          f"writes")
    return Counter(_key(r.get("path", ""), r.get("code"), r.get("message"))
                   for r in records if r.get("code"))


def without_known(report: Report, known: Counter) -> Report:
    """The report less the findings the baseline holds."""
    left, new = Counter(known), []
    for finding in report.findings:
        key = _key(finding.path, finding.code, finding.message)
        if left[key]:
            left[key] -= 1
        else:
            new.append(finding)
    return replace(report, findings=new)


def _key(path: str, code, message) -> tuple:
    return os.path.normpath(path), code, message
