"""The editor server splits a file's rules over its kept workers, each
walking its share at the same time (`paths.KEPT_SHARES`): what the shares
report, joined, is what one walk of every rule reports, finding for finding
(fixes, evidence and conditions included), and so are the facts the file
gives the rest of its project."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from memlint import Settings
from memlint.analysis.project import joined_facts
from memlint.engine.isolation import Workers
from memlint.engine.paths import (KEPT_SHARES, FileResult, Source, _joined, analyse_file,
                                  check_in_project, check_keeping_pieces)
from memlint.rules.catalogue import CATALOGUE, walk_shares
from tests.expectations import FIXTURES

TRAIN = b"""\
import torch
from torch.utils.data import DataLoader

def train(dataset, model):
    loader = DataLoader(dataset, batch_size=64, num_workers=4)
    total = 0
    for images, labels in loader:
        loss = model(images.cuda()).sum()
        loss.backward()
        total += loss
"""
FILES = sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".py", ".ipynb"))


def _whole(finding) -> tuple:
    """Everything a finding carries, not only what identifies it."""
    return (finding, finding.fix, finding.related, finding.severity, finding.preview,
            repr(finding.unless))


def _all(findings) -> list[tuple]:
    """In the order a run reports them (a share's come in its rules' order)."""
    return [_whole(f) for f in sorted(findings)]


def test_every_rule_is_in_exactly_one_share():
    for count in (1, 2, 3):
        shares = walk_shares(count)
        assert len(shares) == count
        assert sorted(code for share in shares for code in share) == \
            sorted(entry.code for entry in CATALOGUE)
    costs = [sum(e.walk_cost for e in CATALOGUE if e.code in share) for share in walk_shares(2)]
    assert max(costs) - min(costs) <= max(e.walk_cost for e in CATALOGUE)


@pytest.mark.parametrize("count", [2, 3])
def test_shares_joined_give_the_whole_walk_on_every_fixture(count):
    settings = Settings(preview=True, root=str(FIXTURES))
    differ = []
    for path in FILES:
        source = Source(str(path), project=str(FIXTURES))
        whole = analyse_file(source, settings)
        joined = _joined([analyse_file(source, replace(settings, walked=share))
                          for share in walk_shares(count)])
        assert isinstance(joined, FileResult)
        if _all(joined.findings) != _all(whole.findings) \
                or joined.facts != whole.facts or joined.error != whole.error:
            differ.append(path.relative_to(FIXTURES))
    assert differ == []


def test_a_share_walks_only_its_rules():
    path = FIXTURES / "tensor_history_kept"
    source = Source(str(next(path.glob("*.py"))), project=str(FIXTURES))
    whole = analyse_file(source, Settings())
    assert any(f.code == "MEM003" for f in whole.findings)
    elsewhere = next(share for share in walk_shares(2) if "MEM003" not in share)
    alone = analyse_file(source, replace(Settings(), walked=elsewhere))
    assert not any(f.code == "MEM003" for f in alone.findings)
    assert alone.facts is not None and alone.facts.returns == {}  # MEM003 tells them


def test_facts_that_differ_where_no_share_can_differ_are_refused():
    first = analyse_file(Source(str(FILES[0])), Settings()).facts
    assert first is not None
    assert joined_facts([first, replace(first)]) == first
    assert joined_facts([None, first]) == first and joined_facts([None]) is None
    with pytest.raises(ValueError, match="module"):
        joined_facts([first, replace(first, module="elsewhere")])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked here")
def test_the_server_path_splits_over_kept_workers_and_agrees(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\n")
    path = tmp_path / "train.py"
    path.write_bytes(TRAIN)
    settings = Settings(root=str(tmp_path), preview=True)
    kept = Workers(check_keeping_pieces)
    try:
        served = check_in_project(str(path), TRAIN, settings, kept=kept)
        expected_workers = min(KEPT_SHARES, len(os.sched_getaffinity(0)))
        assert len(kept.pool) == expected_workers
    finally:
        kept.close()
    # the costliest rules of each share report here
    assert {f.code for f in served} == {"MEM003", "MEM005"}
    assert _all(served) == _all(check_in_project(str(path), TRAIN, settings))
