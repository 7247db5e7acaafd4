"""Issue 15's table, one test a row: input a hostile user feeds `memlint check`,
next to a good file with a finding, through the console script (`python -m
memlint`) with -j1 and with -j2. Every one ends in a clear MEM000 or a one-line
usage error with the documented exit status, in seconds, and the good file's
finding is always there.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlint.engine.isolation import Budget, Failure, run_supervised
from memlint.engine.paths import useful_jobs

FLAGGED = "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n"
GOOD_FINDING = "good.py:3:9: MEM007"
JOBS = pytest.mark.parametrize("jobs", ["1", "2"])


def memlint(*args: str, cwd: Path, stdin: bytes | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlint", "check", *args], cwd=cwd,
                          input=stdin, capture_output=True, timeout=120, check=False,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def tree(tmp_path) -> Path:
    (tmp_path / "good.py").write_text(FLAGGED)
    return tmp_path


def lines_of(result: subprocess.CompletedProcess) -> list[str]:
    """The finding lines (the text format ends with a "Found ..." summary)."""
    return [line for line in result.stdout.decode("utf-8").splitlines()
            if not line.startswith("Found ")]


def assert_isolated(result, bad: str, *reasons: str) -> None:
    """The bad file is one MEM000 with one of `reasons` (CPython's parser and
    json module word and place their limits differently from one version to
    the next), the good file's finding is kept."""
    out = result.stdout.decode("utf-8")
    assert result.returncode == 1, result.stderr.decode()
    assert b"Traceback" not in result.stderr
    assert GOOD_FINDING in out
    (line,) = [line for line in out.splitlines() if line.startswith(bad + ":")]
    assert ": MEM000 " in line and any(reason in line for reason in reasons), line


#: CPython 3.11 and later refuse these chains; 3.10 parses them (memlint then
#: measures their depth, or checks nothing in a file no rule needs to read)
REFUSES_DEEP_CHAINS = sys.version_info >= (3, 11)


def timed(function, *args, **kwargs):
    started = time.monotonic()
    result = function(*args, **kwargs)
    return result, time.monotonic() - started


# -- row 1-3: chains that crash or hang libcst's native parser -----------------------------

CHAINS = {
    "30000-not": "x = (\n" + "not\n" * 30_000 + "1)\n",
    "30000-minus": "x = (\n" + "-\n" * 30_000 + "1)\n",
    "30000-plus-one": "x = (1\n" + "+ 1\n" * 30_000 + ")\n",
    "30000-attributes": "x = (a\n" + ".attr\n" * 30_000 + ")\n",
    "30000-backslashes": "x = 1 \\\n" + "+ 1 \\\n" * 30_000 + "\n",
}


@JOBS
@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
def test_rows_1_2_a_chain_that_crashes_or_hangs_the_parser_is_mem000(tree, jobs, chain):
    (tree / "bad.py").write_text(chain)
    result, seconds = timed(memlint, "-j", jobs, ".", cwd=tree)
    if REFUSES_DEEP_CHAINS:
        assert_isolated(result, "./bad.py", "nested or chained too deeply")
    else:  # some are valid Python there: no rule needs their tree, no finding
        assert result.returncode == 1 and b"Traceback" not in result.stderr
        assert GOOD_FINDING in result.stdout.decode()
        bad = [line for line in lines_of(result) if line.startswith("./bad.py:")]
        assert all(": MEM000 " in line and "nested" in line for line in bad), bad
    assert seconds < 15


@JOBS
def test_row_3_a_5000_line_chain_is_recognised_at_once_and_named_by_line(tree, jobs):
    (tree / "bad.py").write_text("import torch\ntorch.load('a')\nx = (\n" + "-\n" * 5000 + "1)\n")
    result, seconds = timed(memlint, "-j", jobs, ".", cwd=tree)
    assert_isolated(result, "./bad.py", "an expression from line 4", "expressions nested")
    assert seconds < 10


# -- rows 4-5: what is not a regular file ----------------------------------------------------

@JOBS
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_row_4_a_fifo_in_the_tree_or_named_is_mem000_and_never_blocks(tree, jobs):
    os.mkfifo(tree / "pipe.py")
    for target in (".", "pipe.py"):
        result = memlint("-j", jobs, target, "good.py", cwd=tree)
        name = "./pipe.py" if target == "." else "pipe.py"
        out = result.stdout.decode()
        assert f"{name}:1:1: MEM000 cannot read the file: it is a named pipe (FIFO), not a " \
               f"regular file" in out
        assert "good.py:3:9: MEM007" in out and result.returncode == 1


@JOBS
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_row_5_dev_zero_is_mem000_not_a_memory_blow_up(tree, jobs):
    result, seconds = timed(memlint, "-j", jobs, "/dev/zero", "good.py", cwd=tree)
    assert "/dev/zero:1:1: MEM000 cannot read the file: it is a character device" \
        in result.stdout.decode()
    assert result.returncode == 1 and seconds < 10


# -- row 6, 10, 11: notebooks ----------------------------------------------------------------

def notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                  "execution_count": None, "source": c} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@JOBS
def test_row_6_a_notebook_of_1000_nested_brackets_is_mem000(tree, jobs):
    (tree / "deep.ipynb").write_text("[" * 1000 + "]" * 1000)
    result = memlint("-j", jobs, ".", cwd=tree)
    assert_isolated(result, "./deep.ipynb", "not a notebook: JSON nested too deeply",
                    "not a notebook memlint can read")  # 3.13's json reads the nesting


@JOBS
def test_row_10_long_runs_of_spaces_in_a_cell_take_linear_time(tree, jobs):
    (tree / "spaces.ipynb").write_text(notebook("x y" + " " * 60_000 + "z",
                                                " " * 60_000 + "x y", FLAGGED))
    result, seconds = timed(memlint, "-j", jobs, ".", cwd=tree)
    assert result.returncode == 1 and "./spaces.ipynb:cell 3:3:9: MEM007" in lines_of(result)[-1]
    assert seconds < 10


@JOBS
def test_row_11_a_notebook_on_stdin_is_read_as_a_notebook(tree, jobs):
    result = memlint("-j", jobs, "-", "--stdin-filename", "nb.ipynb", cwd=tree,
                     stdin=notebook("x = 1", FLAGGED).encode())
    assert result.returncode == 1, result.stderr
    assert lines_of(result)[0].startswith("nb.ipynb:cell 2:3:9: MEM007")


# -- rows 7, 12, 13: usage and configuration errors exit 2 with one line --------------------

@JOBS
@pytest.mark.parametrize("byte", [b"\xe9", b"\xff\xfe"], ids=["latin-1", "ff-fe"])
def test_row_7_a_pyproject_that_is_not_utf8_is_one_line_exit_2(tree, jobs, byte):
    (tree / "pyproject.toml").write_bytes(b"[tool.memlint]\n# caf" + byte + b"\nselect = []\n")
    result = memlint("-j", jobs, ".", cwd=tree)
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().count("\n") == 1
    assert "pyproject.toml: invalid TOML: not UTF-8 (byte 0x" in result.stderr.decode()


@JOBS
@pytest.mark.parametrize("selection", ["", ",,,", " , "])
def test_row_12_an_empty_selection_is_a_usage_error(tree, jobs, selection):
    result = memlint("-j", jobs, "--select", selection, ".", cwd=tree)
    assert result.returncode == 2 and result.stdout == b""
    assert b"no rule codes given" in result.stderr and result.stderr.count(b"\n") == 1


def test_row_12_an_empty_select_in_the_config_is_an_error(tree):
    (tree / "pyproject.toml").write_text("[tool.memlint]\nselect = []\n")
    result = memlint(".", cwd=tree)
    assert result.returncode == 2 and b"select: no rule codes given" in result.stderr


@JOBS
def test_row_13_a_closed_stdin_is_one_line_exit_2(tree, jobs):
    result = subprocess.run(f"'{sys.executable}' -m memlint check -j {jobs} - good.py <&-",
                            shell=True, cwd=tree, capture_output=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr == b"memlint: cannot read stdin ('-'): it is closed\n"


# -- row 8: file names that are not UTF-8 ------------------------------------------------------

@JOBS
@pytest.mark.skipif(sys.platform == "win32" or sys.platform == "darwin",
                    reason="needs a file system that takes any bytes in a name")
def test_row_8_a_non_utf8_file_name_gives_valid_utf8_in_every_format(tree, jobs):
    with open(os.path.join(os.fsencode(tree), b"bad\xff.py"), "wb") as handle:
        handle.write(FLAGGED.encode())
    for output_format in ("text", "json", "sarif", "github"):
        result = memlint("-j", jobs, "--format", output_format, ".", cwd=tree,
                         env={"PYTHONIOENCODING": "utf-8:strict"})
        assert result.returncode == 1 and b"Traceback" not in result.stderr
        out = result.stdout.decode("utf-8")  # strict: raises on invalid UTF-8
        if output_format == "text":
            assert "./bad\\xff.py:3:9: MEM007" in out
        if output_format == "json":
            assert {r["path"] for r in json.loads(out)} == {"./bad\\xff.py", "./good.py"}
        if output_format == "sarif":
            uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                    for r in json.loads(out)["runs"][0]["results"]}
            assert uris == {"bad%FF.py", "good.py"}


# -- row 9 and 15: encodings CPython refuses --------------------------------------------------

REFUSED = {
    "hex": (b"# coding: hex\n" + FLAGGED.encode(), "'hex' is not a text encoding"),
    "rot13": (b"# -*- coding: rot13 -*-\n" + FLAGGED.encode(), "'rot13' is not a text encoding"),
    "nosuchcodec": (b"# coding: nosuchcodec\n" + FLAGGED.encode() + b"# caf\xe9\n",
                    "unknown encoding: nosuchcodec (Python knows it only if a package "
                    "registers that codec) and the file is not UTF-8"),
    "bom-and-latin-1": (b"\xef\xbb\xbf# coding: latin-1\n" + FLAGGED.encode(),
                        "UTF-8 byte order mark contradicts its coding cookie"),
    "utf-16": (FLAGGED.encode("utf-16"), "it is UTF-16"),
}


@JOBS
@pytest.mark.parametrize("data, reason", REFUSED.values(), ids=REFUSED.keys())
def test_rows_9_15_an_encoding_python_refuses_is_mem000_on_disk_and_on_stdin(tree, jobs, data,
                                                                             reason):
    (tree / "bad.py").write_bytes(data)
    assert_isolated(memlint("-j", jobs, ".", cwd=tree), "./bad.py", reason)
    assert_isolated(memlint("-j", jobs, "-", "good.py", "--stdin-filename", "bad.py",
                            cwd=tree, stdin=data), "bad.py", reason)


def test_a_codec_a_package_registers_reads_utf8_text(tree):
    """FCGF's `# -*- coding: future_fstrings -*-`: future-fstrings registers
    the codec when Python starts, and the text under it is UTF-8: checked as
    the program it is, not reported as unreadable."""
    (tree / "bad.py").write_bytes(b"# -*- coding: future_fstrings -*-\n" + FLAGGED.encode())
    result = memlint("--format", "json", "bad.py", cwd=tree)
    assert [(f["code"], f["line"]) for f in json.loads(result.stdout)] == [("MEM007", 4)]


# -- row 14: a file too large for libcst in reasonable time and memory ------------------------

@pytest.fixture
def huge(tree) -> Path:
    """100,000 real statements, 3.8 MB: libcst took 51 s and 3.2 GB on it."""
    (tree / "huge.py").write_text("import torch\n"
                                  + "x = torch.tensor(data).to('cuda')\n" * 100_000)
    return tree


@JOBS
def test_row_14_a_file_over_the_size_limit_is_mem000_at_once(huge, jobs):
    result, seconds = timed(memlint, "-j", jobs, ".", cwd=huge)
    assert_isolated(result, "./huge.py", "it is larger than 2 MB (max-file-size)")
    assert seconds < 10


@JOBS
def test_row_14_the_time_budget_stops_a_slow_file(huge, jobs):
    result, seconds = timed(memlint, "-j", jobs, "--max-file-size", "0", "--file-timeout", "2",
                            ".", cwd=huge)
    assert_isolated(result, "./huge.py", "gave up after 2 s (file-timeout)")
    assert seconds < 15


@JOBS
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="memory is read from /proc")
def test_row_14_the_memory_budget_stops_a_file_that_needs_too_much(huge, jobs):
    result, seconds = timed(memlint, "-j", jobs, "--max-file-size", "0", "--file-timeout", "0",
                            "--max-file-memory", "250", ".", cwd=huge)
    assert_isolated(result, "./huge.py", "it needed more than 250 MB of memory")
    assert seconds < 30


# -- row 15: the smaller ones -------------------------------------------------------------------

@JOBS
def test_row_15_config_naming_something_not_a_file_says_so(tree, jobs):
    result = memlint("-j", jobs, "--config", os.devnull, ".", cwd=tree)
    assert result.returncode == 2
    assert result.stderr.decode() == (f"memlint: --config {os.devnull}: not a regular file "
                                      f"(--no-config uses the defaults)\n")


@JOBS
def test_row_15_a_too_deep_notebook_cell_says_why(tree, jobs):
    (tree / "deep.ipynb").write_text(notebook("x = (\n" + "not\n" * 5000 + "1)\n", FLAGGED))
    result = memlint("-j", jobs, ".", cwd=tree)
    assert result.returncode == 1
    out = result.stdout.decode()
    deep = [line for line in out.splitlines()
            if line.startswith("./deep.ipynb:cell 1:") and ": MEM000 " in line]
    # 3.11/3.12 refuse the cell ("cannot parse this cell ... nested or chained too
    # deeply"); 3.10 and 3.13 parse it and memlint measures it ("expressions nested")
    assert deep and ("nested or chained too deeply" in deep[0]
                     or "expressions nested" in deep[0]), out


def test_row_15_an_undecodable_file_is_mem000_through_flake8_too(tree):
    (tree / "bad.py").write_bytes(b"import torch\nname = 'caf\xe9'\nx = torch.load(p)\n")
    result = subprocess.run([sys.executable, "-m", "flake8", "--select", "MEM", "bad.py"],
                            cwd=tree, capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.startswith("bad.py:2:12: MEM000 cannot decode the file as utf-8")
    assert "MEM007" not in result.stdout


@JOBS
def test_row_15_many_jobs_are_capped_at_what_helps(tree, jobs):
    for i in range(20):
        (tree / f"m{i}.py").write_text(FLAGGED)
    result, seconds = timed(memlint, "-j", "256" if jobs == "2" else jobs, ".", cwd=tree)
    assert result.returncode == 1 and result.stdout.decode().count("MEM007") == 21
    assert useful_jobs(256, 300) <= (os.cpu_count() or 1) and useful_jobs(256, 3) <= 3
    assert seconds < 20


# -- the supervisor itself: what no pre-check recognises ------------------------------------------

def _hostile(task: str) -> str:
    if task == "segfault":
        faulthandler.disable()  # pytest's, inherited by the fork: its dump would fill the log
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "hang":
        time.sleep(60)
    if task == "hog":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 2**20))
            time.sleep(0.01)
    if task == "exit":
        os._exit(3)
    return task.upper()


def test_the_deliberate_crash_prints_no_fatal_error_dump_into_the_test_log():
    """A passing run must look like one: no 50-line 'Fatal Python error' dump."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{__file__}::test_a_worker_that_dies_hangs_or_hoards_costs_its_task_only"],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout
    assert "Fatal Python error" not in done.stdout + done.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_dies_hangs_or_hoards_costs_its_task_only(workers):
    tasks = ["a", "segfault", "b", "hang", "c", "hog", "d", "exit", "e"]
    results, seconds = timed(run_supervised, _hostile, tasks, workers,
                             Budget(seconds=2, memory_mb=300))
    assert [r for r in results if not isinstance(r, Failure)] == ["A", "B", "C", "D", "E"]
    reasons = {t: r.reason for t, r in zip(tasks, results) if isinstance(r, Failure)}
    assert "the parser crashed on it (SIGSEGV)" in reasons["segfault"]
    assert reasons["hang"].startswith("gave up after 2 s")
    if os.path.exists("/proc/self/statm"):
        assert reasons["hog"].startswith("it needed more than 300 MB of memory")
    assert reasons["exit"] == "the process checking it exited unexpectedly (status 3)"
    assert seconds < 20


@JOBS
def test_pythons_warnings_about_the_users_code_stay_off_stderr(tree, jobs):
    """`1if x else 2` and `"\\d"` make CPython warn as it parses them: the
    user's code, not memlint's findings, and noise in every CI log."""
    (tree / "warned.py").write_text('xs = [1for _ in range(3)]\npattern = "\\d+"\nx = 0x1for\n')
    result = memlint("--no-cache", "-j", jobs, ".", cwd=tree)
    assert result.returncode == 1
    assert GOOD_FINDING in result.stdout.decode()
    assert result.stderr.decode() == ""
