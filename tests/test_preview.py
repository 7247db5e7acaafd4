"""Rules in preview: not trusted on unseen code, so they run only when asked for."""

from __future__ import annotations

import pytest

import memlint.cli.main as cli
import memlint.engine.settings as settings_module
import memlint.rules as rules_module
from memlint.engine.config import ConfigError, apply_overrides, settings_from_table
from memlint.engine.settings import Settings
from memlint import check_paths
from tests.conftest import SHIPPED_PREVIEW_CODES
from memlint.rules.measured import ENOUGH_JUDGED, Measured


@pytest.fixture(autouse=True)
def preview_as_shipped(monkeypatch, preview_filtered_as_shipped):
    """Undo conftest's "every finding shown" for the tests of preview itself."""
    monkeypatch.delenv("MEMLINT_PREVIEW")


@pytest.fixture
def mem005_in_preview(monkeypatch):
    monkeypatch.setattr(settings_module, "PREVIEW_CODES", frozenset({"MEM005"}))
    monkeypatch.setattr(rules_module, "PREVIEW_CODES", frozenset({"MEM005"}))


def test_a_rule_in_preview_is_off_by_default_and_on_when_asked(mem005_in_preview):
    assert "MEM005" not in Settings().selected_codes()
    assert "MEM003" in Settings().selected_codes()
    assert "MEM005" in Settings(preview=True).selected_codes()


@pytest.mark.parametrize("selectors, runs", [
    ({"select": ("MEM005",)}, True),          # its exact code asks for it
    ({"extend_select": ("MEM005",)}, True),
    ({"select": ("MEM00",)}, False),          # a prefix asks for the trusted rules only
    ({"select": ("MEM",)}, False),
    ({"select": ("MEM005",), "ignore": ("MEM005",)}, False),
])
def test_only_the_exact_code_selects_a_rule_in_preview(mem005_in_preview, selectors, runs):
    assert ("MEM005" in Settings(**selectors).selected_codes()) is runs


def test_preview_from_the_config_and_the_command_line(mem005_in_preview):
    assert settings_from_table({"preview": True}, "pyproject.toml").preview
    with pytest.raises(ConfigError, match="preview: expected true or false"):
        settings_from_table({"preview": "yes"}, "pyproject.toml")
    assert apply_overrides(Settings(), preview=True).preview
    assert not apply_overrides(Settings(preview=False)).preview


def test_check_runs_a_rule_in_preview_only_with_the_flag(mem005_in_preview, tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom torch.utils.data import DataLoader\n"
                      "model = torch.nn.Linear(4, 2).cuda()\n"
                      "loader = DataLoader(dataset, batch_size=64, num_workers=4)\n"
                      "for x, y in loader:\n"
                      "    out = model(x.cuda())\n", encoding="utf-8")
    assert cli.main(["check", "--no-cache", "--select", "MEM", str(script)]) == 0
    assert "MEM005" not in capsys.readouterr().out
    assert cli.main(["check", "--no-cache", "--preview", str(script)]) == 1
    assert "MEM005" in capsys.readouterr().out


def test_rules_lists_which_rules_run_by_default(mem005_in_preview, capsys):
    assert cli.main(["rules"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("MEM")}
    assert rows["MEM005"][2] == "preview"
    assert rows["MEM003"][2] == "default"


@pytest.mark.parametrize("figures, trusted", [
    (Measured(true=18, false=2, debatable=0, per_thousand_files=1.0), True),     # 0.90
    (Measured(true=17, false=3, debatable=0, per_thousand_files=1.0), False),    # 0.85
    (Measured(true=14, false=0, debatable=6, per_thousand_files=1.0), False),    # 30 % shrugged
    (Measured(true=16, false=0, debatable=4, per_thousand_files=1.0), True),     # 20 %
    # fewer than ENOUGH_JUDGED: kept unless they already rule 0.90 out, or
    # shrug at more than 20 % of ENOUGH_JUDGED (7 of 8 shrugged at on set 11)
    (Measured(true=2, false=1, debatable=0, per_thousand_files=1.0), True),
    (Measured(true=3, false=0, debatable=2, per_thousand_files=1.0), True),
    (Measured(true=0, false=1, debatable=7, per_thousand_files=1.0), False),
    (Measured(true=0, false=0, debatable=ENOUGH_JUDGED - 1, per_thousand_files=1.0), False),
    (Measured(true=0, false=3, debatable=3, per_thousand_files=1.0), False),
    (Measured(true=0, false=ENOUGH_JUDGED - 1, debatable=0, per_thousand_files=1.0), False),
])
def test_trusted_means_precise_and_rarely_shrugged_at(figures, trusted):
    assert figures.trusted is trusted


@pytest.mark.parametrize("true, decided, bound", [
    (0, 3, 0.6316), (12, 28, 0.6000), (5, 6, 0.9915), (3, 3, 1.0), (0, 1, 0.95)])
def test_the_precision_bound_is_the_exact_binomial_one(true, decided, bound):
    """Closed forms where there are: none of n TRUE gives 1 - 0.05 ** (1 / n),
    n - 1 of n gives 0.95 ** (1 / n); 12 of 28 lies between them."""
    from memlint.rules.measured import precision_upper_bound

    assert precision_upper_bound(true, decided) == pytest.approx(bound, abs=1e-4)


def _write_measured():
    """`scripts/write_measured.py` as a module (scripts/ is not a package)."""
    import importlib
    import sys
    from pathlib import Path

    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    sys.path.insert(0, scripts)
    try:
        return importlib.import_module("write_measured")
    finally:
        sys.path.remove(scripts)


def test_the_measured_verdicts_are_the_committed_ones():
    """The figures that put rules in preview recount from the committed verdicts."""
    from memlint.rules.measured import HELDOUT_LISTINGS, MEASURED, RULE_LISTINGS

    heldout_verdicts = _write_measured().heldout_verdicts
    counts = heldout_verdicts(HELDOUT_LISTINGS, RULE_LISTINGS) if HELDOUT_LISTINGS else {}
    recounted = {code: (c["TRUE"], c["FALSE"], c["DEBATABLE"]) for code, c in counts.items()}
    written = {code: (f.true, f.false, f.debatable) for code, f in MEASURED.items()
               if f.judged}
    assert written == recounted, "run python scripts/write_measured.py"


def test_the_default_set_is_the_measured_one(monkeypatch):
    """Outside the tests' own patch (conftest), the rules in preview are exactly
    those the measured figures do not trust, and a plain `check` leaves them out."""
    import memlint.rules as rules
    from memlint.rules.measured import MEASURED

    untrusted = {code for code, figures in MEASURED.items()
                 if code in rules.ALL_CODES and not figures.trusted} - {rules.SYNTAX_ERROR_CODE}
    assert SHIPPED_PREVIEW_CODES == untrusted
    monkeypatch.setattr(settings_module, "PREVIEW_CODES", SHIPPED_PREVIEW_CODES)
    assert not untrusted & set(Settings().selected_codes())
    assert untrusted <= set(Settings(preview=True).selected_codes())


def test_a_file_that_cannot_be_checked_is_always_reported(monkeypatch, tmp_path):
    """MEM000 is no rule that can be in preview, whatever its figures say:
    they count how often memlint misreads code that runs."""
    import memlint.rules as rules
    from memlint.rules import measured

    doubted = measured.Measured(true=1, false=9, debatable=0, per_thousand_files=1.0)
    monkeypatch.setitem(measured.MEASURED, rules.SYNTAX_ERROR_CODE, doubted)
    assert rules.SYNTAX_ERROR_CODE in measured.preview_codes()
    assert rules.SYNTAX_ERROR_CODE not in rules.PREVIEW_CODES
    assert rules.how_it_runs(rules.SYNTAX_ERROR_CODE) == "always"
    monkeypatch.setattr(settings_module, "PREVIEW_CODES", frozenset({rules.SYNTAX_ERROR_CODE}))
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    found = check_paths([str(broken)], Settings(), jobs=1).findings
    assert [f.code for f in found] == [rules.SYNTAX_ERROR_CODE]


@pytest.mark.parametrize("value, preview", [("1", True), ("true", True), ("0", False), ("", False)])
def test_the_environment_turns_preview_on_in_every_front_end(monkeypatch, tmp_path, value,
                                                             preview):
    from memlint.engine.config import load_settings

    monkeypatch.setenv("MEMLINT_PREVIEW", value)
    assert load_settings(None).preview is preview
    project = tmp_path / "pyproject.toml"
    project.write_text("[tool.memlint]\nselect = ['MEM']\n", encoding="utf-8")
    assert load_settings(project).preview is preview


def test_a_bad_preview_variable_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MEMLINT_PREVIEW", "maybe")
    (tmp_path / "train.py").write_text("x = 1\n", encoding="utf-8")
    assert cli.main(["check", "--no-cache", str(tmp_path / "train.py")]) == 2
    assert "MEMLINT_PREVIEW: expected 1 or 0" in capsys.readouterr().err


#: restored as it is in one process, onto the GPU it was saved from
RESTORED = ("import torch\nmodel = torch.nn.Linear(4, 2).cuda()\n"
            "torch.save({'step': 3}, 'step.pt')\n"
            "step = torch.load('step.pt')\n")


@pytest.mark.parametrize("settings, shown", [
    (Settings(), False),
    (Settings(preview=True), True),
    (Settings(select=("MEM007",)), True),          # its exact code asks for it
    (Settings(extend_select=("MEM007",)), True),
    (Settings(select=("MEM00",)), False),          # a prefix asks for the default set only
])
def test_a_finding_in_preview_is_shown_when_asked(settings, shown):
    """MEM007 on a file restored as it is in one process is a preview variant
    (a note) of its rule, shown only when asked for."""
    from memlint import check_source

    found = [f for f in check_source(RESTORED, "train.py", settings) if f.code == "MEM007"]
    assert bool(found) is shown
    assert all(f.preview and f.severity == "note" for f in found)


def test_a_finding_says_in_json_whether_it_is_in_preview():
    from memlint import check_source

    finding, = [f for f in check_source(RESTORED, "train.py", Settings(preview=True))
                if f.code == "MEM007"]
    assert finding.to_dict()["preview"] is True
    assert finding.to_dict()["severity"] == "note"


def test_the_project_severity_wins_over_a_findings_own():
    assert Settings(severities={"MEM007": "error"}).severity_of("MEM007", "note") == "error"
    assert Settings().severity_of("MEM007", "note") == "note"
    assert Settings().severity_of("MEM007") == "warning"


def test_findings_of_a_preview_variant_do_not_count_for_their_rule(tmp_path, monkeypatch):
    """A rule's figures are its default findings'; the findings it put in a
    preview variant (from the judge's saved run) are counted apart."""
    import json

    write_measured = _write_measured()
    review = tmp_path / "review"
    (review / "repos").mkdir(parents=True)
    (review / "verdicts").mkdir()
    (review / "repos" / "set_a.csv").write_text("repo,commit,kind\no/r,abc,x\n")
    (review / "verdicts" / "o+r.csv").write_text(
        "path,line,code,verdict,reason\n"
        "train.py,3,MEM007,TRUE,a checkpoint\nutils.py,9,MEM007,FALSE,a step counter\n")
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"o/r": {"findings": [
        {"path": "train.py", "line": 3, "code": "MEM007", "preview": False},
        {"path": "utils.py", "line": 9, "code": "MEM007", "preview": True}]}}))
    monkeypatch.setattr(write_measured, "REVIEW", review)
    assert write_measured.heldout_verdicts(("set_a",))["MEM007"]["FALSE"] == 1
    write_measured.write_judged("set_a", run)
    counts = write_measured.heldout_verdicts(("set_a",))
    assert (counts["MEM007"]["TRUE"], counts["MEM007"]["FALSE"]) == (1, 0)
    assert counts["MEM007 (preview variant)"]["FALSE"] == 1


def test_a_rule_changed_since_some_sets_counts_only_the_later_ones(tmp_path, monkeypatch):
    """`--rule-heldout MEM007=set_b`: MEM007 is measured on set b alone (it
    changed after set a was judged); every other rule on both sets."""
    write_measured = _write_measured()
    review = tmp_path / "review"
    (review / "repos").mkdir(parents=True)
    (review / "verdicts").mkdir()
    for name, repo in (("set_a", "o/a"), ("set_b", "o/b")):
        (review / "repos" / f"{name}.csv").write_text(f"repo,commit,kind\n{repo},abc,x\n")
        (review / "verdicts" / f"{repo.replace('/', '+')}.csv").write_text(
            "path,line,code,verdict,reason\n"
            f"train.py,3,MEM007,{'FALSE' if name == 'set_a' else 'TRUE'},why\n"
            "train.py,9,MEM004,TRUE,why\n")
    monkeypatch.setattr(write_measured, "REVIEW", review)
    counts = write_measured.heldout_verdicts(("set_a", "set_b"), {"MEM007": ("set_b",)})
    assert (counts["MEM007"]["TRUE"], counts["MEM007"]["FALSE"]) == (1, 0)
    assert counts["MEM004"]["TRUE"] == 2
