"""What every test shares.

Which rules run by default is decided by measured figures
(`memlint/rules/measured.py`) that change whenever a held-out set is judged;
a test of what a rule finds must not change with them. So in-process tests
run with no rule in preview and see the findings a rule marks as preview
too; the tests of preview itself (`test_preview.py`) put back what they need, and `test_the_default_set_is_the_measured_one`
checks the real set. Tests that start memlint in another process ask for the
rules they test: `MEMLINT_PREVIEW=1` is set for them here."""

from __future__ import annotations

import pytest

import memlint.rules as rules
import memlint.engine.settings as settings_module


#: the rules in preview as shipped, before the fixtures below turn preview off
SHIPPED_PREVIEW_CODES = rules.PREVIEW_CODES
#: how a finding marked as preview is filtered, for the tests that test it
SHOWS_PREVIEW = settings_module.Settings.shows_preview


@pytest.fixture(autouse=True)
def no_rule_in_preview(monkeypatch):
    monkeypatch.setenv("MEMLINT_PREVIEW", "1")
    monkeypatch.setattr(settings_module.Settings, "shows_preview", lambda self, code: True)
    monkeypatch.setattr(settings_module, "PREVIEW_CODES", frozenset())
    monkeypatch.setattr(rules, "PREVIEW_CODES", frozenset())


@pytest.fixture
def preview_filtered_as_shipped(monkeypatch):
    """For the tests of preview itself: a finding a rule marks as preview is
    filtered as `memlint` filters it, not shown as above."""
    monkeypatch.setattr(settings_module.Settings, "shows_preview", SHOWS_PREVIEW)
