"""`memlint check --baseline FILE`: only findings the file does not hold fail."""

from __future__ import annotations

from tests.cli_helpers import check, write

LOADS = "import torch.cuda\n\nstate = torch.load('a.pt')\nteacher = torch.load('b.pt')\n"


def test_known_findings_are_not_reported_and_new_ones_are(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "src" / "train.py", LOADS)
    assert check(capsys, "--format", "json", "-o", "baseline.json", "src")[0] == 1
    assert check(capsys, "--baseline", "baseline.json", "src")[:2] == \
        (0, "All checks passed!\n")
    # an edit above moves the known findings; a third load is new
    write(tmp_path / "src" / "train.py", "# moved\n" + LOADS + "extra = torch.load('c.pt')\n")
    code, out, _ = check(capsys, "--baseline", "baseline.json", "./src")
    assert code == 1
    assert out.splitlines()[0].startswith("./src/train.py:6:9: MEM007 ")
    assert out.count("MEM007") == 1


def test_a_missing_baseline_says_how_to_write_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "train.py", LOADS)
    code, _, err = check(capsys, "--baseline", "none.json", "train.py")
    assert code == 2
    assert err == ("memlint: --baseline none.json: no such file (write one with: memlint "
                   "check --format json -o none.json)\n")
