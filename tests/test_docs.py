"""The docs as a user pastes them: every configuration snippet loads."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from memlint.engine.config import settings_from_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CHECKOUT = Path(__file__).resolve().parent.parent
DOCS = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]


def fenced_blocks(language: str) -> list[tuple[str, str]]:
    """(file:line, text) of every ```language block of the docs."""
    blocks = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in re.finditer(rf"^```{language}\n(.*?)^```", text, re.M | re.S):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{doc.relative_to(CHECKOUT)}:{line}", match.group(1)))
    return blocks


CONFIG_SNIPPETS = [(where, text) for where, text in fenced_blocks("toml")
                   if "[tool.memlint" in text]


def test_the_docs_show_configuration_snippets():
    assert len(CONFIG_SNIPPETS) >= 3


@pytest.mark.parametrize("where, snippet", CONFIG_SNIPPETS, ids=[w for w, _ in CONFIG_SNIPPETS])
def test_every_configuration_snippet_loads_as_pasted(where, snippet):
    table = tomllib.loads(snippet)["tool"]["memlint"]
    settings_from_table(table, where)


@pytest.mark.parametrize("where, snippet", fenced_blocks("toml"),
                         ids=[w for w, _ in fenced_blocks("toml")])
def test_every_toml_snippet_is_valid_toml(where, snippet):
    tomllib.loads(snippet)


def config_errors_shown(doc: str) -> list[str]:
    """The `memlint: <pyproject>: ...` lines a page shows, without the path."""
    text = (CHECKOUT / doc).read_text(encoding="utf-8")
    return [line.split(": ", 2)[2] for line in text.splitlines()
            if line.startswith("memlint: ") and "pyproject.toml: [tool.memlint]" in line]


def test_the_configuration_errors_usage_md_shows_are_what_memlint_says():
    said = []
    for table in ({"select": "MEM001"}, {"selct": ["MEM001"]}):
        with pytest.raises(Exception) as raised:
            settings_from_table(table, "pyproject.toml")
        said.append(str(raised.value).split(": ", 1)[1])
    assert config_errors_shown("docs/usage.md") == said


# -- what the docs say about the code, checked against it ---------------------

def relative_links() -> list[tuple[str, str]]:
    """(doc, target) of every Markdown link to a file of the checkout."""
    links = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not target.startswith("mailto:"):
                links.append((str(doc.relative_to(CHECKOUT)), target))
    return links


@pytest.mark.parametrize("doc, target", relative_links())
def test_every_link_to_a_file_of_the_checkout_resolves(doc, target):
    assert ((CHECKOUT / doc).parent / target).exists()


def test_the_usage_page_cites_the_verify_page_that_exists():
    assert "(docs/verify.md)" in (CHECKOUT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert (CHECKOUT / "docs" / "verify.md").is_file()


def long_options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option != "--help"}


def test_every_verify_option_is_in_the_verify_page():
    from memlint.verify.cli import build_parser
    page = (CHECKOUT / "docs" / "verify.md").read_text(encoding="utf-8")
    assert {o for o in long_options(build_parser()) if f"`{o}" not in page} == set()


def test_every_check_option_is_in_the_usage_page():
    from memlint.cli.main import build_parser
    check = build_parser()._subparsers._group_actions[0].choices["check"]
    page = (CHECKOUT / "docs" / "usage.md").read_text(encoding="utf-8")
    assert {o for o in long_options(check) if f"`{o}" not in page} == set()


def finding_records(*args: str) -> list[dict]:
    import json
    import subprocess
    done = subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", *args,
                           "fixtures/tensor_history_kept/classifier_training_loop.py"],
                          cwd=CHECKOUT, capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


def test_the_json_keys_the_usage_page_lists_are_those_written():
    page = (CHECKOUT / "docs" / "usage.md").read_text(encoding="utf-8")
    listed = re.search(r"each finding has the keys `([^`]+)`", page).group(1)
    record = finding_records("--format", "json")[0]
    assert re.split(r",\s*", listed) == list(record)


def test_the_sarif_rule_and_result_fields_the_usage_page_names_are_those_written():
    page = (CHECKOUT / "docs" / "usage.md").read_text(encoding="utf-8")
    bullet = page.split("- `sarif`:", 1)[1].split("\n\n", 1)[0]
    run = finding_records("--format", "sarif")["runs"][0]
    for key in {k for rule in run["tool"]["driver"]["rules"] for k in rule}:
        assert f"`{key}`" in bullet
    assert "helpUri" not in bullet
    assert {r["level"] for r in run["results"]} <= {"error", "warning", "note"}


def test_flake8_sees_what_integrations_md_says():
    import subprocess
    page = (CHECKOUT / "docs" / "integrations.md").read_text(encoding="utf-8")
    version = subprocess.run([sys.executable, "-m", "flake8", "--version"],
                             capture_output=True, text=True, timeout=60).stdout
    shown = re.search(r"`flake8 --version` lists\s+`([^`]+)`", page).group(1)
    assert shown in " ".join(version.split())
    from memlint.rules import ALL_CODES
    assert f"`memlint rules` lists, `{ALL_CODES[0]}` to `{ALL_CODES[-1]}`" in \
        " ".join(page.split())


def test_the_vs_code_sample_line_is_what_flake8_prints(tmp_path):
    import subprocess
    page = (CHECKOUT / "docs" / "integrations.md").read_text(encoding="utf-8")
    sample = next(line for line in page.splitlines() if line.startswith("3,9,M,MEM007:"))
    (tmp_path / "train.py").write_text('import torch.cuda\n\nstate = torch.load("ckpt.pt")\n')
    done = subprocess.run([sys.executable, "-m", "flake8", "--select", "MEM", "--format",
                           "%(row)d,%(col)d,%(code).1s,%(code)s:%(text)s", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == [sample]
