"""Every fixture yields exactly its `# expect:` annotations, no more, no fewer."""

from __future__ import annotations

import pytest

from memlint import Settings, check_source
from tests.expectations import FIXTURES, expected_findings, fixture_files

FILES = fixture_files(".py")


#: fixtures mark a rule's preview variant `(preview)`; whole rules in preview
#: stay on (conftest), so that a fixture does not move with the measured figures
pytestmark = pytest.mark.usefixtures("preview_filtered_as_shipped")


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_fixture_yields_exactly_its_annotations(path):
    source = path.read_text(encoding="utf-8")
    found = {(f.line, f.code) for f in check_source(source, str(path))}
    assert found == expected_findings(source)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_fixture_with_preview_yields_its_preview_annotations_too(path):
    source = path.read_text(encoding="utf-8")
    found = {(f.line, f.code) for f in check_source(source, str(path), Settings(preview=True))}
    assert found == expected_findings(source, preview=True)


def test_there_are_fixtures_for_every_rule():
    from memlint.rules import ALL_RULES

    annotated = set()
    for path in FILES:
        annotated |= {code for _, code in expected_findings(path.read_text(encoding="utf-8"))}
    assert {r.code for r in ALL_RULES} <= annotated
