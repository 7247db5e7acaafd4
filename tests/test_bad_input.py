"""Files real trees contain and no linter should die on: each one is checked, the run
goes on, and nothing ends in a traceback. Broken files are MEM000 findings with the
parser's line and reason; a crash inside memlint is an internal error for that file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlint import check_source
from memlint.cli.main import main
from memlint.rules import RULES_BY_CODE

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", "check", *args], cwd=cwd,
                          capture_output=True, text=True, check=False, timeout=300)


def positions(source: str | bytes) -> list[tuple[int, int, str]]:
    return [(f.line, f.column, f.code) for f in check_source(source, "x.py")]


def only_finding(source: str | bytes):
    (finding,) = check_source(source, "x.py")
    return finding


def test_an_empty_file_is_clean():
    assert check_source(b"", "x.py") == [] and check_source("", "x.py") == []


def test_a_byte_order_mark_does_not_shift_columns():
    assert positions(b"\xef\xbb\xbf" + FLAGGED.encode()) == [(3, 9, "MEM007")]


def test_crlf_line_ends_keep_lines_and_columns():
    assert positions(FLAGGED.replace("\n", "\r\n").encode()) == [(3, 9, "MEM007")]
    assert positions("import torch\r\n\r\nx = torch.load(p)  # noqa\r\ny = torch.load(p)\r\n") \
        == [(4, 5, "MEM007")]


def test_tabs_count_as_one_column():
    assert positions("import torch.cuda\nif resume:\n\tstate = torch.load(p)\n") == [(3, 10, "MEM007")]


def test_a_form_feed_is_not_a_line_break_for_positions_or_noqa():
    source = "import torch.cuda\n\x0c\nx = torch.load(p)  # noqa: MEM007\ny = torch.load(p)\n"
    assert positions(source) == [(4, 5, "MEM007")]


def test_python_2_syntax_is_mem000_at_the_offending_line_with_pythons_reason():
    finding = only_finding("import torch.cuda\nprint 'loading'\nstate = torch.load(p)\n")
    assert (finding.line, finding.code) == (2, "MEM000")
    assert "Missing parentheses in call to 'print'" in finding.message


def test_a_syntax_error_from_libcst_alone_keeps_its_real_position(monkeypatch):
    """Syntax newer than the running Python: CPython accepts nothing here, libcst decides."""
    import memlint.engine.parsed  # noqa: F401 - where the parse failure is read
    monkeypatch.setattr("memlint.engine.parsed.parse_quietly", lambda source: None)
    finding = only_finding("import torch.cuda\nx = = torch.load(p)\n")
    # libcst's raw_column is always 0 for its native parser; the message has the column
    assert finding.message.startswith("cannot parse the file: error at 2:6: expected one of")
    assert (finding.line, finding.column, finding.code) == (2, 7, "MEM000")


def test_a_binary_file_named_py_is_mem000():
    finding = only_finding(bytes(range(256)) * 4)
    assert finding.code == "MEM000" and "NUL bytes" in finding.message


def test_a_file_in_another_encoding_without_a_cookie_is_mem000_at_the_byte():
    finding = only_finding(b"import torch.cuda\nname = 'caf\xe9'\nx = torch.load(p)\n")
    assert (finding.line, finding.column, finding.code) == (2, 12, "MEM000")
    assert "byte 0xe9" in finding.message and "coding" in finding.message


def test_a_coding_cookie_is_honoured():
    source = "# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'\nx = torch.load(p)\n"
    assert positions(source.encode("latin-1")) == [(4, 5, "MEM007")]


@pytest.mark.parametrize("expression", [
    "(" * 5000 + "1" + ")" * 5000,
    "[" * 3000 + "]" * 3000,
    "f(" * 3000 + ")" * 3000,
    "+".join(["1"] * 100_000),
    "a" + ".b" * 20_000,
], ids=["5000-parentheses", "3000-lists", "3000-calls", "100k-terms", "20k-attributes"])
def test_expressions_nested_deeper_than_python_allows_are_mem000_not_a_crash(expression):
    """libcst's native parser dies with SIGSEGV on these (about 2,000 nested
    parentheses); a child process proves the check survives and says why."""
    program = ("import sys\nfrom memlint import check_source\n"
               "source = sys.stdin.read()\n"
               "print([(f.code, f.message) for f in check_source(source, 'deep.py')])\n")
    source = f"import torch.cuda\nx = {expression}\nstate = torch.load(p)\n"
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", program], input=source, capture_output=True,
                           text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "MEM000" in child.stdout and "cannot parse the file" in child.stdout
    assert time.monotonic() - started < 60


def test_a_five_megabyte_generated_file_finishes_when_the_size_limit_allows_it(tmp_path):
    """Shaped like generated code (serialized descriptors as bytes, a table of layers).
    Number-heavy literals parse at only ~40 KB/s in libcst: see docs/usage.md. Past
    the default limit (2 MB) it is one MEM000 at once."""
    blob = "QUJD" * 250
    lines = ["import torch", "model = torch.nn.Linear(2, 2).cuda()", "DESCRIPTORS = ["]
    lines += [f"    b'{blob}'," for _ in range(5200)]
    lines += ["]", "LAYERS = {"]
    lines += [f"    'layer{i}': ({i}, {i * 0.5}, 'relu')," for i in range(2000)]
    lines += ["}", "state = torch.load('ckpt.pt')"]
    big = tmp_path / "generated.py"
    big.write_text("\n".join(lines) + "\n")
    assert big.stat().st_size > 5_000_000
    result = run("--max-file-size", "8", str(big), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout.startswith(f"{big}:{len(lines)}:9: MEM007")
    refused = run(str(big), cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stdout == (f"{big}:1:1: MEM000 cannot read the file: it is larger than 2 MB "
                              f"(max-file-size); exclude it or raise the limit with "
                              f"--max-file-size\nFound 1 finding.\n")


def test_a_symlink_loop_in_a_directory_is_walked_once(tmp_path, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text(FLAGGED)
    (package / "loop").symlink_to(package, target_is_directory=True)
    (package / "dangling.py").symlink_to(tmp_path / "gone.py")
    code = main(["check", "-j", "1", str(package)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.count("MEM007") == 1 and "dangling.py:1:1: MEM000 cannot read the file" in out


def test_an_unreadable_file_is_mem000_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    secret = tmp_path / "secret.py"
    secret.write_text(FLAGGED)
    (tmp_path / "train.py").write_text(FLAGGED)
    secret.chmod(0)
    try:
        if os.access(secret, os.R_OK):  # root reads anything: simulate the refusal instead
            real_open = os.open

            def refusing_open(path, *args, **kwargs):
                if os.fspath(path) == str(secret):
                    raise PermissionError(13, "Permission denied", str(secret))
                return real_open(path, *args, **kwargs)

            monkeypatch.setattr("os.open", refusing_open)  # forked workers inherit it
        code = main(["check", "-j", "1", str(tmp_path)])
    finally:
        secret.chmod(0o644)
    out = capsys.readouterr().out
    assert code == 1
    assert f"{secret}:1:1: MEM000 cannot read the file: Permission denied" in out
    assert f"{tmp_path / 'train.py'}:3:9: MEM007" in out


def crash_mem007_on(monkeypatch, filename: str, error: BaseException) -> None:
    """Make MEM007's visitor raise `error` on the file named `filename` only."""
    rule = RULES_BY_CODE["MEM007"]
    original = rule.visit_Call

    def fragile(self, node):
        if os.path.basename(self.ctx.path) == filename:
            raise error
        return original(self, node)

    monkeypatch.setattr(rule, "visit_Call", fragile)


def test_a_rule_crash_is_an_internal_error_for_that_file_only(tmp_path, monkeypatch, capsys):
    (tmp_path / "a_fine.py").write_text(FLAGGED)
    (tmp_path / "b_crash.py").write_text(FLAGGED.replace("ckpt.pt", "boom.pt"))
    (tmp_path / "c_fine.py").write_text(FLAGGED)
    crash_mem007_on(monkeypatch, "b_crash.py", ValueError("rule bug"))
    for output_format in ("text", "json", "sarif"):
        code = main(["check", "-j", "1", "--format", output_format, str(tmp_path)])
        out, err = capsys.readouterr()
        assert code == 2
        assert err.count("\n") == 1 and "internal error while checking" in err
        assert "b_crash.py" in err and "ValueError: rule bug" in err
        assert "a_fine.py" in out and "c_fine.py" in out
    assert main(["check", "-j", "1", "--exit-zero", str(tmp_path)]) == 2


def test_a_rule_crash_in_a_worker_process_is_reported_the_same_way(tmp_path, monkeypatch,
                                                                   capsys):
    for i in range(8):
        name = "boom" if i == 3 else f"fine{i}"
        (tmp_path / f"{name}.py").write_text(FLAGGED)
    crash_mem007_on(monkeypatch, "boom.py", RecursionError("deep"))  # forked workers inherit it
    if sys.platform != "linux":
        pytest.skip("relies on fork carrying the monkeypatch into worker processes")
    assert main(["check", "-j", "2", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out.count("MEM007") == 7 and "boom.py" in err


def test_a_broken_file_no_rule_could_fire_on_is_still_mem000():
    """The keyword pre-filter skips the parse, but never the MEM000."""
    findings = check_source("def f(:\n    return 1\n", "plain.py")
    assert [(f.code, f.line) for f in findings] == [("MEM000", 1)]


def test_syntax_newer_than_this_python_is_not_mem000_in_a_skipped_file():
    """CPython screens skipped files; libcst, which knows newer syntax, has the last word."""
    assert check_source("type Pair = tuple[int, int]\n", "modern.py") == []
