"""A rule is one package: everything that lists the rules is read from the
packages or checked against them here, so a rule missing from any of them fails."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from memlint.rules import ALL_RULES, NAMES_BY_CODE, SYNTAX_ERROR_CODE
from memlint.rules.catalogue import CATALOGUE, PACKAGES_BY_CODE
from tests.expectations import CHECKOUT, FIXTURES, page_path

RULE_CODES = [entry.code for entry in CATALOGUE]


def test_every_rule_package_is_catalogued_once_and_in_order():
    assert list(PACKAGES_BY_CODE) == [SYNTAX_ERROR_CODE, *RULE_CODES]
    assert RULE_CODES == [f"MEM{n:03d}" for n in range(1, len(RULE_CODES) + 1)]
    assert [rule.code for rule in ALL_RULES] == RULE_CODES


@pytest.mark.parametrize("code", RULE_CODES)
def test_the_package_holds_the_rule_its_page_its_verify_and_fixtures(code):
    from memlint.verify import meters
    from memlint.verify.judges import Quantity, rule_verify

    package = PACKAGES_BY_CODE[code]
    rule_module = importlib.import_module(f"{package}.rule")
    classes = [rule for rule in ALL_RULES if rule.__module__ == rule_module.__name__]
    assert [rule.code for rule in classes] == [code]
    title = page_path(code).read_text(encoding="utf-8").splitlines()[0]
    assert title == f"# {NAMES_BY_CODE[code]} ({code})"
    plugin = rule_verify(code)
    assert issubclass(getattr(meters, plugin.METER), meters.Meter)
    assert callable(plugin.judge)
    assert all(isinstance(quantity, Quantity) for quantity in plugin.QUANTITIES)
    folder = package.rsplit(".", 1)[1].split("_", 1)[1]
    assert list((FIXTURES / folder).glob("*.py")), f"no fixtures in fixtures/{folder}/"


def test_the_readme_table_lists_every_rule_in_order():
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    rules = readme.split("\n## Rules\n", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| (MEM\d{3}) \| ([a-z0-9-]+) \|", rules, re.M)
    assert table == list(NAMES_BY_CODE.items())


def _index_writer():
    sys.path.insert(0, str(CHECKOUT / "scripts"))
    try:
        import write_rule_index
    finally:
        sys.path.remove(str(CHECKOUT / "scripts"))
    return write_rule_index


def test_the_rule_index_is_current():
    assert (CHECKOUT / "rules" / "README.md").read_text(encoding="utf-8") \
        == _index_writer().rule_index(), "run python scripts/write_rule_index.py"


def test_the_readme_states_each_rules_severity_set_and_measured_precision(monkeypatch):
    """Default or preview, severity, precision and frequency in README.md are
    the ones `measured.py` and the catalogue give, not copied by hand."""
    import memlint.rules as rules
    from tests.conftest import SHIPPED_PREVIEW_CODES

    monkeypatch.setattr(rules, "PREVIEW_CODES", SHIPPED_PREVIEW_CODES)  # not conftest's
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    writer = _index_writer()
    assert writer.readme_with_rules_table(readme) == readme, \
        "run python scripts/write_rule_index.py"
    for code in NAMES_BY_CODE:
        assert f"| {writer.measured_cells(code)} |" in readme


def test_a_new_rule_package_is_found_without_registering_it(tmp_path):
    """CONTRIBUTING.md's promise: a copy of memlint with one more package
    `mem099_...` lists the new rule, pages it, and checks with it."""
    copy = tmp_path / "memlint"
    subprocess.run(["cp", "-r", str(CHECKOUT / "memlint"), str(copy)], check=True)
    new = copy / "rules" / "mem099_bare_empty_cache"
    new.mkdir()
    (new / "__init__.py").write_text(
        '"""MEM099 bare-empty-cache: a test rule."""\n\n'
        "from memlint.rules.entry import RuleEntry\n\n"
        'ENTRY = RuleEntry("MEM099", "bare-empty-cache", "note", ("empty_cache",))\n')
    (new / "rule.py").write_text(
        '"""`torch.cuda.empty_cache()` called in a loop."""\n\n'
        "import libcst as cst\n\nfrom memlint.rules.base import Rule\n\n\n"
        "class BareEmptyCache(Rule):\n"
        '    """Calls to empty_cache."""\n\n    code = "MEM099"\n\n'
        "    def visit_Call(self, node: cst.Call) -> None:\n"
        '        if self.ctx.qualify(node.func) == "torch.cuda.empty_cache":\n'
        '            self.report(node, "empty_cache called")\n')
    (new / "page.md").write_text("# bare-empty-cache (MEM099)\n")
    script = ("import memlint; from memlint.cli.main import main; "
              "main(['rules']); main(['rule', 'MEM099']); "
              "main(['check', '--select', 'MEM099', '-'])")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, input="import torch\ntorch.cuda.empty_cache()\n",
                          env={"PYTHONPATH": str(tmp_path), "PATH": ""}, timeout=120)
    assert re.search(r"^MEM099 +bare-empty-cache ", done.stdout, re.M), done.stderr
    assert "# bare-empty-cache (MEM099)" in done.stdout
    assert "MEM099 empty_cache called" in done.stdout
