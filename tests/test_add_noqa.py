"""`memlint check --add-noqa`: every finding commented away, code left working."""

from __future__ import annotations

from tests.cli_helpers import check, write

SOURCE = '''import torch.cuda

state = torch.load('a.pt')
other = torch.load('b.pt')  # the teacher's weights
more = torch.load('c.pt')  # noqa: MEM005
doc = torch.load("""a
b.pt""")
cont = \\
    torch.load('d.pt')
'''

WITH_NOQA = '''import torch.cuda

state = torch.load('a.pt')  # noqa: MEM007
other = torch.load('b.pt')  # the teacher's weights  # noqa: MEM007
more = torch.load('c.pt')  # noqa: MEM005, MEM007
doc = torch.load("""a
b.pt""")  # noqa: MEM007
cont = \\
    torch.load('d.pt')  # noqa: MEM007
'''


def test_add_noqa_comments_each_finding_where_memlint_reads_it(tmp_path, capsys):
    """Not inside a string, not after a backslash; an existing comment and
    an existing `# noqa: CODE` are kept and extended."""
    path = write(tmp_path / "train.py", SOURCE)
    code, out, err = check(capsys, "--add-noqa", str(path))
    assert (code, out, err) == (0, "", "Added 5 noqa comments.\n")
    assert path.read_text() == WITH_NOQA
    assert check(capsys, str(path))[:2] == (0, "All checks passed!\n")


def test_add_noqa_twice_adds_nothing_and_keeps_line_endings(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_bytes(SOURCE.replace("\n", "\r\n").encode())
    check(capsys, "--add-noqa", str(path))
    assert path.read_bytes() == WITH_NOQA.replace("\n", "\r\n").encode()
    assert check(capsys, "--add-noqa", str(path))[2] == "Added 0 noqa comments.\n"


def test_add_noqa_says_it_leaves_stdin_alone(tmp_path, capsys, monkeypatch):
    import io
    import sys
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SOURCE.encode())))
    code, out, err = check(capsys, "--add-noqa", "--stdin-filename", "train.py", "-")
    assert (code, out) == (0, "")
    assert err == ("memlint: train.py: not changed: --add-noqa does not edit stdin\n"
                   "Added 0 noqa comments.\n")
