"""Helpers shared by the command-line tests: run `memlint check` in-process."""

from __future__ import annotations

from pathlib import Path

from memlint.cli.main import main


def check(capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `memlint check -j 1 ARGS`."""
    code = main(["check", "-j", "1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
