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
