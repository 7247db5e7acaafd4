"""Soak the editor server: 1,000 edits of a ~300 KB file in one LSP session.

An editor sends a didChange per keystroke. The server must keep up (a burst
is one analysis of its last version), answer the last version within a
second, and leave no process behind when the editor goes. This drives the
real console script over stdio with pygls's client, as an editor would:

    python bench/server_soak.py                 # 1,000 edits, 8 bursts
    python bench/server_soak.py --edits 200 --json soak.json

Reported: the time from the last edit of each burst to the diagnostics of
that version (the figure an editor user feels), beside `memlint check` of the
same text run in the same session (the reference: what one analysis costs),
as a ratio; and the server's child processes still alive after exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def big_source(target_bytes: int) -> str:
    """Real-looking code of about `target_bytes`: the fixtures, each wrapped in
    its own function so names do not clash, repeated until large enough."""
    parts = ["import torch\nfrom torch.utils.data import DataLoader\n\n"]
    files = sorted(FIXTURES.rglob("*.py"))
    size, copy = 0, 0
    while size < target_bytes:
        for path in files:
            body = path.read_text(encoding="utf-8")
            indented = "".join(f"    {line}" if line.strip() else line
                               for line in body.splitlines(keepends=True))
            block = f"\ndef fixture_{copy}_{path.stem}():\n{indented}\n    return None\n"
            try:
                compile(block, str(path), "exec")
            except SyntaxError:
                continue  # a fixture of a broken file: not what an editor holds
            parts.append(block)
            size += len(block)
            if size >= target_bytes:
                break
        copy += 1
    return "".join(parts)


def memlint_command() -> list[str]:
    script = shutil.which("memlint", path=os.path.dirname(sys.executable))
    return [script, "server"] if script else [sys.executable, "-m", "memlint", "server"]


def children_of(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc)."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            listing = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, listing):
            found.append(child)
            frontier.append(child)
    return found


async def soak(folder: Path, text: str, edits: int, bursts: int) -> dict:
    uri = (folder / "train.py").as_uri()
    client = LanguageClient("memlint-soak", "1")
    published: asyncio.Queue = asyncio.Queue()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def received(params: types.PublishDiagnosticsParams) -> None:
        published.put_nowait((time.perf_counter(), params))

    await client.start_io(*memlint_command(), cwd=str(folder))
    server_pid = client._server.pid
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=folder.as_uri()))
    client.initialized(types.InitializedParams())
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1,
                                             text=text)))
    _, first = await asyncio.wait_for(published.get(), 300)
    latencies, analyses, version, line = [], 0, 1, text.count("\n")
    per_burst = edits // bursts
    for _ in range(bursts):
        for _ in range(per_burst):  # typing at the end of the file, one character a time
            version += 1
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(line=line, character=0),
                                      end=types.Position(line=line, character=0)),
                    text="#")]))
            await asyncio.sleep(0.005)  # a fast typist: 200 keystrokes a second
        sent = time.perf_counter()
        while True:
            at, params = await asyncio.wait_for(published.get(), 300)
            analyses += 1
            if params.version == version:
                latencies.append(at - sent)
                break
    children = children_of(server_pid)
    await asyncio.wait_for(client.shutdown_async(None), 60)
    client.exit(None)
    await asyncio.wait_for(client._server.wait(), 60)
    await client.stop()
    await asyncio.sleep(1)
    orphans = [pid for pid in children if Path(f"/proc/{pid}").exists()]
    return {"edits": per_burst * bursts, "bursts": bursts, "analyses": analyses,
            "diagnostics_first_open": len(first.diagnostics),
            "last_version_latency_s": latencies, "orphaned_processes": orphans}


def one_check_seconds(path: Path, runs: int = 3) -> float:
    """The reference: `memlint check` of the same file, no cache, best of `runs`."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", "-q",
                        str(path)], capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=1000)
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--kilobytes", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    text = big_source(args.kilobytes * 1024)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "pyproject.toml").write_text("[tool.memlint]\n")
        path = Path(folder) / "train.py"
        path.write_text(text, encoding="utf-8")
        reference = one_check_seconds(path)
        result = asyncio.run(soak(Path(folder), text, args.edits, args.bursts))
    latencies = result["last_version_latency_s"]
    result.update(file_bytes=len(text.encode()), reference_check_s=reference,
                  python=sys.version.split()[0])
    print(f"file {len(text.encode()) / 1024:.0f} KB; {result['edits']} edits in "
          f"{args.bursts} bursts -> {result['analyses']} analyses")
    print(f"memlint check of the file (reference): {reference:.2f} s")
    print(f"last edit -> its diagnostics: median {statistics.median(latencies):.2f} s, "
          f"last {latencies[-1]:.2f} s ({latencies[-1] / reference:.2f}x the reference)")
    print(f"processes left after exit: {len(result['orphaned_processes'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if latencies[-1] < 1.0 and not result["orphaned_processes"] else 1


if __name__ == "__main__":
    sys.exit(main())
