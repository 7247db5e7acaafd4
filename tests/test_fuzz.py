"""Fuzzing `check` with hypothesis: mutated fixtures and hostile shapes, checked
in-process (`check_sources`, supervised) and through the console script.

Properties, for every generated file next to good files:
- no traceback, an exit status in {0, 1, 2} as docs/usage.md promises, output
  that is valid UTF-8 (and valid JSON for --format json);
- bounded time (each file has a 10 s budget; a run must end well within 60 s);
- the good files' findings are exactly what they are without the bad neighbour;
- `check` never writes to the tree (names, bytes and modification times kept),
  but its result cache in `.memlint_cache/`.

And for `--fix` (file and stdin, through the console script): in UTF-8,
latin-1, cp1252, cp932, utf-7 and iso-2022-jp, with \\n, \\r\\n or \\r line
ends and form feeds leading lines, the only bytes that change are the fixes'.

Bounded for CI: about 60 examples in-process, 20 through the console script
and 15 of `--fix`, about two minutes on 2 cores. For a longer run by hand, scale the examples:

    MEMLINT_FUZZ_SCALE=50 python -m pytest tests/test_fuzz.py -q

What it found when written: nothing beyond issue 15's table (already fixed),
neither at the CI bound nor at MEMLINT_FUZZ_SCALE=8 (480 in-process and 160
console-script examples, 106 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memlint import Settings
from memlint.engine import Source, check_sources
from memlint.engine.cache import CACHE_DIR_NAME
from memlint.finding import message_parts
from tests.expectations import fixture_files
from tests.processes import descendants, left_after

SCALE = int(os.environ.get("MEMLINT_FUZZ_SCALE", "1"))
FIXTURE_BYTES = [p.read_bytes() for p in fixture_files(".py")]
NOTEBOOK_BYTES = [p.read_bytes() for p in fixture_files(".ipynb")]
GOOD = {"good_a.py": "import torch.cuda\n\nstate = torch.load('ckpt.pt')\n",
        "good_b.py": "import torch\nfor x in loader:\n    losses.append(model(x.cuda()))\n"}
SUPERVISED = Settings(file_timeout_s=10, preview=True)  # every rule, as the module fixture runs
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- what gets generated ----------------------------------------------------------------------

CHAIN_LINKS = ["not", "-", "+ 1", ".attr", "+ 1 \\", "~", "[0]", "()", "and x", "if a else"]
HOSTILE = [
    b"\xef\xbb\xbf", b"\xff\xfe", b"\0", b"\xe9", b"\r", b"\r\n", b"\t", b"\x0c", b"\\\n",
    b"# coding: latin-1\n", b"# coding: hex\n", b"# coding: utf-16\n", b"# memlint: skip-file\n",
    b"# noqa\n", b"%matplotlib inline\n", b"!pip install x\n", b"model?\n", b"'''", b'"""',
    b"f'{", b"(", b")", b"[", b"]", b"{", b"}", b":", b"\n    ", b"lambda: ", b"async ",
    b"match x:\n    case 1:\n        pass\n", b"type X = int\n", b"torch.load(p)\n",
]


@st.composite
def chains(draw) -> bytes:
    link = draw(st.sampled_from(CHAIN_LINKS))
    count = draw(st.sampled_from([10, 200, 1200, 3000, 30_000]))
    separator = draw(st.sampled_from([" ", "\n"]))
    if link.endswith("\\"):
        separator = "\n"
    body = separator.join([link] * count)
    return f"x = (1 {separator}{body}{separator} 1)\n".encode()


@st.composite
def mutated_fixtures(draw) -> bytes:
    """A fixture file with a few splices: cut, copy, hostile bytes, a chain."""
    data = bytearray(draw(st.sampled_from(FIXTURE_BYTES)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["cut", "copy", "hostile", "bytes", "chain"]))
        if kind == "cut":
            del data[at:at + draw(st.integers(1, 200))]
        elif kind == "copy":
            start = draw(st.integers(0, len(data)))
            data[at:at] = data[start:start + draw(st.integers(1, 400))]
        elif kind == "hostile":
            data[at:at] = draw(st.sampled_from(HOSTILE))
        elif kind == "bytes":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[at:at] = b"\n" + draw(chains())
    return bytes(data)


@st.composite
def mutated_notebooks(draw) -> bytes:
    """A fixture notebook with one cell's code replaced by a mutated fixture, or
    its JSON cut and spliced."""
    notebook = json.loads(draw(st.sampled_from(NOTEBOOK_BYTES)))
    if draw(st.booleans()):
        code = [c for c in notebook["cells"] if c.get("cell_type") == "code"]
        cell = draw(st.sampled_from(code))
        cell["source"] = draw(mutated_fixtures()).decode("utf-8", "surrogateescape")
        return json.dumps(notebook).encode("utf-8", "surrogateescape")
    data = bytearray(json.dumps(notebook).encode())
    at = draw(st.integers(0, len(data)))
    data[at:at + draw(st.integers(0, 50))] = draw(st.sampled_from(HOSTILE))
    return bytes(data)


hostile_files = st.one_of(mutated_fixtures(), chains(), mutated_notebooks(),
                          st.binary(max_size=2000))


# -- in-process ----------------------------------------------------------------------------------

def good_findings(report, bad_path: str) -> list:
    return [f for f in report.findings if f.path != bad_path]


@pytest.fixture(scope="module")
def alone():
    """The good files' findings without any neighbour."""
    return check_sources([Source(n, t.encode()) for n, t in GOOD.items()], SUPERVISED, 1).findings


@settings(FUZZ, max_examples=60 * SCALE)
@given(data=hostile_files, as_notebook=st.booleans(), jobs=st.sampled_from([1, 2]))
def test_in_process_one_bad_file_never_costs_another_files_findings(alone, data, as_notebook,
                                                                    jobs):
    bad = "bad.ipynb" if as_notebook else "bad.py"
    sources = [Source(bad, data), *(Source(n, t.encode()) for n, t in GOOD.items())]
    started = time.monotonic()
    report = check_sources(sources, SUPERVISED, jobs)
    assert time.monotonic() - started < 60
    assert report.errors == [], report.errors  # an internal error is memlint's bug
    assert good_findings(report, bad) == alone
    assert all(f.path == bad and f.line >= 1 and f.column >= 1 for f in report.findings
               if f not in alone)


# -- through the console script --------------------------------------------------------------------

def snapshot(root: Path) -> dict:
    """Every regular file and its bytes and time, but the result cache's own
    folder; every other entry by its name (a pipe cannot be read without a writer)."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() and not p.is_symlink()
            else p.name for p in sorted(root.rglob("*"))
            if CACHE_DIR_NAME not in p.relative_to(root).parts}


@pytest.fixture(scope="module")
def console_alone(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("alone")
    for name, text in GOOD.items():
        (root / name).write_text(text)
    # --preview: a module fixture runs before conftest's MEMLINT_PREVIEW=1 is set
    result = subprocess.run([sys.executable, "-m", "memlint", "check", "--preview", "-j", "1", "."],
                            cwd=root, capture_output=True, timeout=60, check=False)
    assert result.returncode == 1 and result.stdout.count(b"MEM0") == 2
    return [line for line in result.stdout.decode().splitlines() if not line.startswith("Found ")]


#: what else a project may hold that a check must neither open nor trip on: named
#: pipes (a blocking open would hang `check FILE` and the server), a pipe named
#: like a source file, a link that points nowhere (issue 29)
HAZARDS = ["none", "fifo", "fifo-source", "dangling-link"]


def plant(root: Path, hazard: str) -> None:
    if hazard == "fifo":
        (root / "logs").mkdir()
        os.mkfifo(root / "logs" / "progress.json")
    elif hazard == "fifo-source":
        os.mkfifo(root / "pipe_step.py")
    elif hazard == "dangling-link":
        (root / "gone.py").symlink_to(root / "nowhere.py")


@settings(FUZZ, max_examples=20 * SCALE)
@given(data=hostile_files, name=st.sampled_from(["bad.py", "sub/bad.py", "bad.ipynb"]),
       jobs=st.sampled_from(["1", "2"]), output=st.sampled_from(["text", "json"]),
       hazard=st.sampled_from(HAZARDS if hasattr(os, "mkfifo") else ["none"]),
       target=st.sampled_from([".", "good_a.py"]))
def test_console_script_survives_and_never_writes(tmp_path_factory, console_alone, data, name,
                                                  jobs, output, hazard, target):
    root = tmp_path_factory.mktemp("fuzz")
    for good, text in GOOD.items():
        (root / good).write_text(text)
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)
    plant(root, hazard)
    before = snapshot(root)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "memlint", "check", "-j", jobs,
                             "--file-timeout", "10", "--format", output, target],
                            cwd=root, capture_output=True, timeout=120, check=False)
    assert time.monotonic() - started < 60
    assert result.returncode in (0, 1, 2)
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    assert result.stderr == b"", result.stderr  # internal errors would be memlint's bugs
    out = result.stdout.decode("utf-8")
    planted = ("pipe_step.py", "gone.py")  # reported as unreadable, never opened
    if output == "json":
        shown = [f"./{r['path'].removeprefix('./')}:{r['line']}:{r['column']}: {r['code']} "
                 f"{message_parts(r['message'])[0]}"
                 for r in json.loads(out) if not r["path"].endswith((name, *planted))]
    else:
        shown = [line if line.startswith("./") else f"./{line}" for line in out.splitlines()
                 if not line.startswith((f"./{name}:", "Found ", *(f"./{p}:" for p in planted)))]
    expected = console_alone if target == "." else \
        [line for line in console_alone if line.startswith(f"./{target}:")]
    assert shown == expected
    assert snapshot(root) == before


# -- unreadable paths in the project (issue 29) -----------------------------------------------


@settings(FUZZ, max_examples=10 * SCALE)
@given(data=hostile_files, locked=st.sampled_from(["file", "folder"]),
       name=st.sampled_from(["bad.py", "sub/bad.py"]))
def test_an_unreadable_path_is_said_and_costs_no_other_findings(tmp_path_factory, console_alone,
                                                                data, locked, name):
    """A file or folder memlint may not read (simulated: the tests may run as
    root, who reads everything), beside a hostile file: it is named on stderr
    or as a MEM000, the run exits 2 or 1, never with a traceback, and the
    other files' findings are as they are alone."""
    import contextlib
    import io
    from unittest import mock

    from memlint.cli.main import main

    root = tmp_path_factory.mktemp("locked")
    for good, text in GOOD.items():
        (root / good).write_text(text)
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)
    secret = root / ("secret.py" if locked == "file" else "locked")
    if locked == "file":
        secret.write_text("import torch\n")
    else:
        secret.mkdir()
        (secret / "train.py").write_text(GOOD["good_a.py"])
    real_open, real_scandir = os.open, os.scandir

    def refusing_open(path, *args, **kwargs):
        if os.path.abspath(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    def refusing_scandir(path="."):
        if os.path.abspath(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    out, err = io.StringIO(), io.StringIO()
    with mock.patch("os.open", refusing_open), mock.patch("os.scandir", refusing_scandir), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--no-cache", "-j", "1", "--preview", "--file-timeout", "10",
                     str(root)])
    assert "Traceback" not in err.getvalue()
    said = out.getvalue() + err.getvalue()
    assert "Permission denied" in said
    assert code == (2 if locked == "folder" else 1)
    shown = [f"./{line.removeprefix(str(root) + '/')}" for line in out.getvalue().splitlines()
             if line.startswith(str(root)) and "/bad.py:" not in line and "/secret.py:" not in line
             and "/locked/" not in line]
    assert shown == console_alone


# -- a killed run (issue 29) ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@settings(FUZZ, max_examples=8 * SCALE)
@given(data=hostile_files, jobs=st.sampled_from(["1", "2"]),
       hazard=st.sampled_from(HAZARDS if hasattr(os, "mkfifo") else ["none"]),
       how=st.sampled_from(["SIGKILL", "SIGTERM", "SIGINT"]), cache=st.booleans())
def test_a_killed_run_leaves_no_worker_and_no_byte_changed(tmp_path_factory, data, jobs, hazard,
                                                          how, cache):
    """CI cancelling a job, the OOM killer, Ctrl-C: whatever the project holds,
    killed while its workers check it, the run leaves no process behind and
    the user's files as they were."""
    import signal

    root = tmp_path_factory.mktemp("killed")
    for number in range(40):  # enough files that the workers are still busy
        (root / f"step_{number}.py").write_text(GOOD["good_a.py"] * 20)
    (root / "bad.py").write_bytes(data)
    plant(root, hazard)
    before = snapshot(root)
    run = subprocess.Popen([sys.executable, "-m", "memlint", "check", "-j", jobs,
                            "--file-timeout", "10", *([] if cache else ["--no-cache"]), "."],
                           cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    deadline = time.monotonic() + 30
    while not workers and run.poll() is None and time.monotonic() < deadline:
        workers = descendants(run.pid)
        time.sleep(0.01)
    run.send_signal(getattr(signal, how))
    run.wait(timeout=60)
    assert left_after(workers) == []
    assert snapshot(root) == before


# -- --fix in every encoding and line shape (issue 29) ------------------------------------------

#: text each encoding can hold, with spellings that decoding then encoding again would change
ENCODED_TEXT = {"utf-8": "é😀", "latin-1": "café", "cp1252": "€‚ƒ", "cp932": "日本語ⅰ￢",
                "utf-7": "日本 +!~", "iso2022_jp": "日本語"}
LOADS_FIXED = ', map_location="cpu"'


@st.composite
def encoded_sources(draw) -> tuple[bytes, int]:
    """A file with flagged loads in an encoding, line ends and form feeds drawn;
    how many loads it flags."""
    encoding = draw(st.sampled_from(sorted(ENCODED_TEXT)))
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = ["import torch.cuda"]
    loads = draw(st.integers(1, 3))
    for number in range(loads):
        lead = draw(st.sampled_from(["", "\x0c", "\x0c\x0c", "  \x0c"]))
        note = draw(st.sampled_from(["", f"  # {ENCODED_TEXT[encoding]}"]))
        lines += [f"# {ENCODED_TEXT[encoding]}" if draw(st.booleans()) else "\x0c",
                  f"{lead}state{number} = torch.load('{ENCODED_TEXT[encoding]}.pt'){note}"]
    text = f"# -*- coding: {encoding} -*-{end}" + end.join(lines) + end
    data = text.encode(encoding)
    for spelling, other in ((b"\xee\xef", b"\xfa\x40"), (b"+AH4-", b"~")):  # as a user wrote it
        if encoding in ("cp932", "utf-7"):
            data = data.replace(other, spelling) if data.replace(other, spelling).decode(
                encoding) == data.decode(encoding) else data
    return data, loads


@pytest.mark.slow
@settings(FUZZ, max_examples=15 * SCALE)
@given(source=encoded_sources(), through=st.sampled_from(["file", "stdin"]))
def test_fix_changes_only_the_fixed_spans_whatever_the_encoding_and_line_shape(
        tmp_path_factory, source, through):
    """Through the console script, as an editor or a user runs it. What it
    found when written: a coding cookie in a file with \\r line ends was
    not read (a false MEM000 'cannot decode')."""
    data, loads = source
    folder = tmp_path_factory.mktemp("fix")
    path = folder / "train.py"
    path.write_bytes(data)
    args = [sys.executable, "-m", "memlint", "check", "--no-cache", "--fix", "--unsafe-fixes",
            "--select", "MEM007", "-" if through == "stdin" else "train.py"]
    result = subprocess.run(args, cwd=folder, input=data, capture_output=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    fixed = result.stdout if through == "stdin" else path.read_bytes()
    assert fixed.count(LOADS_FIXED.encode()) == loads
    assert fixed.replace(LOADS_FIXED.encode(), b"") == data
