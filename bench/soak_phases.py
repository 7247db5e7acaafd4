"""Where the editor server's time goes, without the editor: the soak's file
and edits (`server_soak.py`: one more `#` typed at the end per keystroke),
analysed as the server analyses them (`check_in_project` through a kept
worker) and as that worker's check alone, in this process.

    python bench/soak_phases.py              # 8 edits of the ~300 KB file
    python bench/soak_phases.py --shares 1   # the server's path in one worker

Printed: each path's time per analysis (median, last). The server's own
latency (`server_soak.py`) is these plus its debounce and the protocol.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_soak import big_source  # noqa: E402

from memlint.engine.config import find_pyproject, load_settings  # noqa: E402
from memlint.engine import paths  # noqa: E402
from memlint.engine.isolation import Workers  # noqa: E402
from memlint.engine.paths import Source, check_in_project, check_keeping_pieces  # noqa: E402


def timed(analyse, texts: list[str]) -> list[float]:
    times = []
    for text in texts:
        started = time.perf_counter()
        analyse(text)
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", type=int, default=paths.KEPT_SHARES,
                        help="kept workers a file's rules are split over (default: the server's)")
    paths.KEPT_SHARES = parser.parse_args().shares
    text = big_source(300 * 1024)
    edits = [text + "#" * (125 * i) for i in range(1, 9)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.py"
        path.write_text(text, encoding="utf-8")
        (Path(folder) / "pyproject.toml").write_text("[tool.memlint]\n")
        settings = load_settings(find_pyproject(folder))
        kept = Workers(check_keeping_pieces)  # forked first: it inherits no tree
        try:
            def through_worker(version: str) -> None:
                check_in_project(str(path), version.encode(), settings, kept=kept)

            through_worker(text)
            served = timed(through_worker, edits)
        finally:
            kept.close()

        def in_process(version: str) -> None:
            check_keeping_pieces((Source(str(path), version.encode(), project=folder),
                                  settings, True))

        in_process(text)
        alone = timed(in_process, edits)
    for name, times in ((f"server's path ({paths.KEPT_SHARES} kept workers)", served),
                        ("the check alone (every rule, one process)", alone)):
        print(f"{name}: median {statistics.median(times):.2f} s, last {times[-1]:.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
