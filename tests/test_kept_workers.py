"""The editor server's worker lives across analyses (issue 29): it keeps the
top-level statements it parsed, so an edit parses only what it changed, and
no process is forked per keystroke burst; one that dies or hangs is replaced
and the next analysis is as right as the first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlint import Settings
from memlint.engine import chunks
from memlint.engine.isolation import Budget, Failure, Workers, run_supervised
from memlint.engine.paths import Source, check_in_project, check_keeping_pieces
from tests.processes import descendants, left_after

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked here")

SOURCE = ("import torch\n\n"
          "def train(loader, model):\n"
          "    for x in loader:\n"
          "        model(x.cuda())\n\n"
          "@torch.no_grad\n"
          "def evaluate(model, x):\n"
          "    return model(x)\n")


def _pid(value: int) -> int:
    return os.getpid()


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_kept_worker_serves_run_after_run():
    kept = Workers(_pid)
    try:
        first = run_supervised(_pid, [1, 2], 1, Budget(), kept)
        second = run_supervised(_pid, [3], 1, Budget(), kept)
        assert len(set(first + second)) == 1 and first[0] != os.getpid()
        assert kept.pool[0].process.is_alive()
    finally:
        kept.close()
    assert kept.pool == []


def test_a_kept_worker_that_hangs_or_dies_is_replaced():
    kept = Workers(_sleep)
    try:
        hung, = run_supervised(_sleep, [5.0], 1, Budget(seconds=0.5), kept)
        assert isinstance(hung, Failure) and "file-timeout" in hung.reason
        assert run_supervised(_sleep, [0.0], 1, Budget(seconds=5), kept) == [0.0]
        worker, dead_end = kept.pool[0].process, kept.pool[0].connection
        os.kill(worker.pid, signal.SIGKILL)
        worker.join()
        assert run_supervised(_sleep, [0.0], 1, Budget(seconds=5), kept) == [0.0]
        assert kept.pool[0].process.pid != worker.pid
        assert len(kept.pool) == 1 and dead_end.closed  # the dead one let go of
    finally:
        kept.close()


#: the texts libcst parsed in this process (a worker's own copy once forked)
_PARSED: list[str] = []


def _parses_counted(task):
    """check_keeping_pieces, and the statements it parsed for this task."""
    before = len(_PARSED)
    result = check_keeping_pieces(task)
    return result, _PARSED[before:]


def test_the_kept_worker_parses_only_the_statement_an_edit_changed(tmp_path, monkeypatch):
    parse_module = chunks.cst.parse_module

    def counting(text, *args, **kwargs):
        _PARSED.append(text)
        return parse_module(text, *args, **kwargs)

    monkeypatch.setattr(chunks.cst, "parse_module", counting)
    path = str(tmp_path / "train.py")
    edited = SOURCE.replace("model(x)\n", "model(x) \n")
    settings = Settings(preview=True)
    kept = Workers(_parses_counted)
    try:
        (before, parsed_first), (after, parsed_then) = [
            run_supervised(_parses_counted, [(Source(path, text.encode()), settings, True)], 1,
                           Budget(seconds=60), kept)[0] for text in (SOURCE, edited)]
    finally:
        kept.close()
    assert len(parsed_first) == 3  # the import and the two functions
    assert parsed_then == ["\n@torch.no_grad\ndef evaluate(model, x):\n    return model(x) \n"]
    assert _PARSED == []  # the parent parsed nothing
    fresh = check_in_project(path, edited.encode(), settings)
    assert [(f.line, f.code) for f in after.findings] == [(f.line, f.code) for f in fresh]
    assert [(f.line, f.code) for f in before.findings] == [(f.line, f.code) for f in fresh]


def _message(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_kept_worker_dies_with_a_killed_server(tmp_path, how):
    """An editor killing its server (or the OOM killer) leaves no worker behind."""
    pytest.importorskip("pygls")
    (tmp_path / "pyproject.toml").write_text("[tool.memlint]\n")
    uri = (tmp_path / "train.py").as_uri()
    server = subprocess.Popen([sys.executable, "-m", "memlint", "server"], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(_message({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"capabilities": {}, "processId": None}}))
        server.stdin.write(_message({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        server.stdin.write(_message({"jsonrpc": "2.0", "method": "textDocument/didOpen",
                                     "params": {"textDocument": {
                                         "uri": uri, "languageId": "python", "version": 1,
                                         "text": SOURCE}}}))
        server.stdin.flush()
        seen = b""
        while b"publishDiagnostics" not in seen:  # analysed: the worker is up
            chunk = server.stdout.read1(65536)
            assert chunk, "the server ended before publishing"
            seen += chunk
        workers = descendants(server.pid)
        assert workers
    finally:
        server.send_signal(how)
        server.wait(timeout=30)
    assert left_after(workers) == []


def test_the_kept_trees_cost_the_cyclic_collector_nothing(tmp_path, monkeypatch):
    """A worker keeps a file's trees, a million objects for 300 KB: a full
    collection that scans them cost 0.1-0.3 s, every few edits, inside the
    time an editor waits. Nothing is collected during a kept check (the
    thresholds here make the collector run every few allocations if it may),
    and what is kept after it is frozen out of the collector's sight (before:
    315 collections in these three checks, gen 1 and 2 among them)."""
    import gc

    monkeypatch.setattr(chunks, "PIECES", chunks.TopLevelTrees())
    monkeypatch.setattr("memlint.engine.parsed.PIECES", chunks.PIECES)
    path = tmp_path / "train.py"
    source = SOURCE + "".join(f"\ndef f{i}(x):\n    return x.cuda() + {i}\n" for i in range(200))
    path.write_text(source)
    collections: list[int] = []

    checking = [False]

    def count(phase: str, info: dict) -> None:
        if phase == "start" and checking[0]:
            collections.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.set_threshold(50, 1, 1)
    gc.callbacks.append(count)
    try:
        for edit in range(3):
            text = source.replace("+ 7\n", f"+ 7 * {edit}\n")
            task = (Source(str(path), text.encode(), project=str(tmp_path)), Settings(), True)
            checking[0] = True
            result = check_keeping_pieces(task)
            checking[0] = False
            assert result.error is None
        # at most one collection per check, as it returns, over what is not frozen
        assert len(collections) <= 3, collections
        kept = next(iter(chunks.PIECES._pieces.values())).module
        assert gc.is_tracked(kept) and not any(o is kept for o in gc.get_objects())
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
