"""The child started before the static check (issue 28, item 7): the run
that claims it uses that very process and gives the same result as a child
started afterwards; one never let go ends, and its folder goes with it."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

pytest.importorskip("torch")

from memlint.verify import runner  # noqa: E402
from memlint.verify.processes import Prestarted, wait_until_gone  # noqa: E402
from memlint.verify.runner import Options, verify_script  # noqa: E402
from tests.verify_helpers import DATA, probe_findings  # noqa: E402


def _early(spec_name: str = "spec.json") -> Prestarted:
    """What `runner.prestart` starts for a CUDA device, here for a CPU run."""
    work = tempfile.mkdtemp(prefix="memlint-verify-")
    command = runner._child_command(sys.executable, None, os.path.join(work, spec_name))
    return Prestarted(command, runner._child_env(), work)


def _verdicts(run):
    return [(v.finding.line, v.finding.code, v.judgement.verdict) for v in run.verified]


def test_the_run_uses_the_prestarted_child_and_judges_as_a_fresh_one():
    path = str(DATA / "cpu_probes.py")
    findings = probe_findings(path)
    early = _early()
    try:
        run = verify_script(path, findings, Options(args=["7"], device="cpu", early=early))
        assert not early.available and early.child.returncode is not None
        assert run.raw is not None and run.raw["pid"] == early.child.pid
    finally:
        early.close()
    assert not os.path.exists(early.work)
    fresh = verify_script(path, findings, Options(args=["7"], device="cpu"))
    assert run.outcome == fresh.outcome == {"exit": "completed"}
    assert _verdicts(run) == _verdicts(fresh)
    assert run.raw["measurements"].keys() == fresh.raw["measurements"].keys()


def test_a_child_never_let_go_ends_and_its_folder_is_removed():
    early = _early()
    pid = early.child.pid
    early.close()
    assert wait_until_gone([pid]) and not os.path.exists(early.work)


def test_a_child_started_for_another_command_is_not_claimed():
    early = _early(spec_name="another.json")
    try:
        run = verify_script(str(DATA / "cpu_probes.py"), [], Options(args=["7"], device="cpu",
                                                                      early=early))
        assert early.available and run.outcome == {"exit": "completed"}
    finally:
        early.close()


def test_prestart_is_for_cuda_runs_only():
    assert runner.prestart("cpu") is None


def test_a_child_prestarted_for_explain_peak_imports_what_the_snapshot_needs(monkeypatch):
    """The allocator's first snapshot imports torch._inductor (~4 s in the
    sampler thread, stalling the program, seen on an H100): a child started
    for `--explain-peak` imports it while it waits, a plain one does not."""
    started: list[dict] = []
    monkeypatch.setattr(runner, "Prestarted", lambda command, env, work: started.append(env))
    monkeypatch.setattr(runner.tempfile, "mkdtemp", lambda prefix: "/nonexistent")
    runner.prestart("cuda:0")
    runner.prestart("cuda:0", explain_peak=True)
    assert [env.get(runner.PRELOAD_INDUCTOR) for env in started] == [None, "1"]
