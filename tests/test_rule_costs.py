"""Every rule's page states what a finding costs, when that cost is worth acting
on, and the GPU measurements behind it: each figure it quotes is found in the
committed `bench/` file it cites, so a page cannot claim a number nobody ran."""

from __future__ import annotations

import re
import sys

import pytest

from memlint.rules import SYNTAX_ERROR_CODE
from memlint.rules.catalogue import CATALOGUE
from tests.expectations import CHECKOUT, page_path

RULE_CODES = [entry.code for entry in CATALOGUE if entry.code != SYNTAX_ERROR_CODE]
LABELS = ("**What it costs:**", "**Worth acting on when:**", "**Measured:**")
#: a measured quantity as the reports print it: `64.00 MiB`, `+371 B`, `53.9 GB/s`
FIGURE = re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|GB/s)\b")
CITED = re.compile(r"`(bench/[^`\s]+)`")


def cost_section(code: str) -> str:
    page = page_path(code).read_text(encoding="utf-8")
    assert "\n## Cost\n" in page, f"{code}: its page has no '## Cost' section"
    return page.split("\n## Cost\n", 1)[1].split("\n## ", 1)[0]


def paragraph(section: str, label: str) -> str:
    assert label in section, f"no {label} paragraph"
    return section.split(label, 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize("code", RULE_CODES)
def test_the_page_states_the_cost_and_when_it_matters(code):
    section = cost_section(code)
    for label in LABELS:
        assert len(paragraph(section, label).split()) >= 8, f"{code}: {label} says too little"


@pytest.mark.parametrize("code", RULE_CODES)
def test_every_measured_figure_is_in_the_bench_file_it_cites(code):
    measured = paragraph(cost_section(code), "**Measured:**")
    cited = CITED.findall(measured)
    assert cited, f"{code}: the measurements cite no committed bench/ file"
    texts = []
    for path in cited:
        assert (CHECKOUT / path).is_file(), f"{code}: cites {path}, which is not committed"
        texts.append((CHECKOUT / path).read_text(encoding="utf-8"))
    figures = FIGURE.findall(" ".join(measured.split()))
    assert figures, f"{code}: the measurements quote no figure"
    for figure in figures:
        assert any(figure in text for text in texts), \
            f"{code}: {figure} is in none of {', '.join(cited)}"


def test_a_figure_no_bench_file_holds_fails(tmp_path, monkeypatch):
    """The check can fail: a page quoting a number its cited file lacks."""
    page = tmp_path / "page.md"
    page.write_text("# x (MEM001)\n\n## Cost\n\n**Measured:** it put 99.99 MiB on cuda:0 "
                    "(`bench/verify-mem010/README.md`).\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "page_path", lambda code: page)
    with pytest.raises(AssertionError, match="99.99 MiB"):
        test_every_measured_figure_is_in_the_bench_file_it_cites("MEM001")
