"""A file's findings never depend on what is selected or ignored for another
file: rules that tell other files what a file does walk it whatever the
selection (`RuleEntry.gives_facts`)."""

from __future__ import annotations

import functools
import textwrap

import pytest

from memlint import Settings, check_paths
from memlint.rules.catalogue import CATALOGUE
from tests.expectations import FIXTURES

TRAIN = textwrap.dedent("""\
    import torch
    model = torch.nn.Linear(8, 2).cuda()
    for step in range(10):
        loss = model(torch.randn(4, 8, device="cuda")).sum()
        loss.backward()
    model.cpu()
    torch.save(model.state_dict(), "weights.pt")
""")
EVALUATE = textwrap.dedent("""\
    import torch
    model = torch.nn.Linear(8, 2).cuda()
    model.load_state_dict(torch.load("weights.pt"))
""")


def _found(tree, settings: Settings) -> set[tuple[str, int, str]]:
    report = check_paths([str(tree)], settings, jobs=1)
    return {(f.path.rsplit("/", 1)[-1], f.line, f.code) for f in report.findings}


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "evaluate.py").write_text(EVALUATE)
    return tmp_path


def test_ignoring_a_rule_in_one_file_changes_no_other_files_findings(project):
    everything = _found(project, Settings(root=str(project)))
    ignored = _found(project, Settings(root=str(project),
                                       per_file_ignores={"train.py": ("MEM007",)}))
    assert {f for f in ignored if f[0] == "evaluate.py"} == \
        {f for f in everything if f[0] == "evaluate.py"}


def test_selecting_another_rule_changes_no_findings_of_this_one(project):
    everything = _found(project, Settings(root=str(project)))
    mem007 = _found(project, Settings(root=str(project), select=("MEM007",)))
    assert mem007 == {f for f in everything if f[2] == "MEM007"}


@functools.cache
def _all_fixture_findings() -> frozenset[tuple[str, int, str]]:
    return frozenset(_found(FIXTURES, Settings(root=str(FIXTURES), preview=True)))


@pytest.mark.slow
@pytest.mark.parametrize("code", [entry.code for entry in CATALOGUE])
def test_each_rule_alone_finds_what_it_finds_among_all(code):
    """Over every fixture: `--select CODE` gives exactly CODE's findings of a full
    run (with preview on: selecting a code by name shows its preview findings)."""
    everything = _all_fixture_findings()
    alone = _found(FIXTURES, Settings(root=str(FIXTURES), select=(code,), preview=True))
    assert alone == {f for f in everything if f[2] == code}


@pytest.mark.parametrize("settings", [
    {},
    {"per_file_ignores": {"train.py": ("MEM007",)}},
    {"per_file_ignores": {"train.py": ("MEM",)}},
    {"select": ("MEM007",)},
    {"ignore": ("MEM005", "MEM008")},
], ids=["defaults", "train-ignores-MEM007", "train-ignores-all", "select-MEM007",
        "ignore-others"])
def test_a_file_checked_alone_gets_its_findings_of_a_whole_tree_check(project, settings):
    """`check evaluate.py` (a hook, an editor) reads `train.py`, which saves
    the weights from the CPU, as `check .` does, whatever is chosen for it."""
    chosen = Settings(root=str(project), **settings)
    whole = {f for f in _found(project, Settings(root=str(project)))
             if f[0] == "evaluate.py" and f[2] in chosen.selected_codes("evaluate.py")}
    alone = _found(project / "evaluate.py", chosen)
    assert alone == whole
    assert {f for f in _found(project, chosen) if f[0] == "evaluate.py"} == whole


def _walked_rules(monkeypatch, settings: Settings, source: str) -> list[str]:
    """The rules `analyse_source` parses the file for (selected or informing)."""
    from memlint.engine import parsed

    walked: list[str] = []
    real = parsed.check_parsed

    def recording(source, path, settings, noqa, codes, facts, informants=None):
        walked.extend([*codes, *(informants or [])])
        return real(source, path, settings, noqa, codes, facts, informants)

    monkeypatch.setattr(parsed, "check_parsed", recording)
    from memlint.engine.source import analyse_source
    analyse_source(source, "train.py", settings)
    return walked


def test_a_rule_selected_nowhere_is_not_walked_for_its_facts(monkeypatch):
    """MEM003's facts (what functions return, what callers pass) are read only
    by MEM003's findings: in a run that selects it for no file, walking it
    would cost a fifth of the rules' walk and tell nobody anything."""
    elsewhere = _walked_rules(monkeypatch, Settings(ignore=("MEM003",)), TRAIN)
    assert "MEM007" in elsewhere and "MEM003" not in elsewhere
    assert "MEM003" in _walked_rules(monkeypatch, Settings(), TRAIN)


def test_a_rule_ignored_for_one_file_still_informs_from_it(monkeypatch):
    """Ignored for this file only, MEM003 still tells the others what it does."""
    ignored_here = Settings(per_file_ignores={"train.py": ("MEM003",)})
    assert "MEM003" in _walked_rules(monkeypatch, ignored_here, TRAIN)
