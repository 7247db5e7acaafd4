"""What the grad-mode fixtures say of the code they leave alone, checked by
running it (CPU, in a process of its own: `tests/data/grad_fixture_claims.py`):
the functions MEM004 does not report record no graph, or need autograd in
their forward; the one it reports records one. The GPU measurement of the
reported lines is `bench/results/verify-mem004/`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.expectations import CHECKOUT

SCRIPT = CHECKOUT / "tests" / "data" / "grad_fixture_claims.py"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="runs the fixtures: needs torch (the CPU build will do)")


def _claim(name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), name], capture_output=True, text=True,
                          timeout=120, check=False)


@needs_torch
def test_grad_already_off_where_memlint_leaves_it_alone():
    done = _claim("off")
    assert done.returncode == 0, done.stderr


@needs_torch
def test_a_forward_that_differentiates_fails_under_no_grad():
    done = _claim("needed")
    assert done.returncode == 0, done.stderr
