"""The code in each rule's page does what the page says: its Example is flagged
(on the lines it marks `# MEMxxx`, where it marks any) and its Use instead is not."""

from __future__ import annotations

import re
import pytest

from memlint import check_source
from memlint.rules import ALL_RULES
from tests.expectations import page_path



def python_blocks(page: str, section: str) -> list[str]:
    match = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    assert match, f"no '## {section}' section"
    return re.findall(r"```python\n(.*?)```", match.group(1), re.S)


@pytest.mark.parametrize("code", [rule.code for rule in ALL_RULES])
def test_the_page_example_is_flagged_and_its_fix_is_not(code):
    page = page_path(code).read_text(encoding="utf-8")
    examples, fixes = python_blocks(page, "Example"), python_blocks(page, "Use instead")
    assert examples and fixes
    for example in examples:
        flagged = sorted(f.line for f in check_source(example, "example.py") if f.code == code)
        assert flagged, f"{code}'s Example is not flagged:\n{example}"
        marked = [n for n, line in enumerate(example.splitlines(), 1) if f"# {code}" in line]
        if marked:
            assert flagged == marked
    for fix in fixes:
        assert not [f for f in check_source(fix, "example.py") if f.code == code], fix
