"""Text and JSON output of `memlint verify`."""

from __future__ import annotations

import json
import os

from memlint.verify.account import account_rows, gpu_rows
from memlint.verify.peak import peak_rows
from memlint.verify.judges import human_bytes
from memlint.verify.processes import STILL_SECONDS
from memlint.verify.runner import ScriptRun


def _where_stopped(run: ScriptRun) -> str:
    """What the timeout found: a run still working, or one stuck."""
    if run.stopped_at is None:
        return ""
    if run.stuck:
        return f", stuck at {run.stopped_at} (no CPU used and the same stack for " \
               f"{STILL_SECONDS:.0f} s)"
    return f", running at {run.stopped_at} when the timeout hit"


def _outcome_line(run: ScriptRun) -> str:
    outcome = run.outcome
    took = f" after {run.run_seconds:.1f} s" if run.run_seconds is not None else ""
    stuck = _where_stopped(run)
    kept = " (verdicts from what was measured before)" if (run.raw or {}).get("partial") else ""
    if run.timed_out or outcome.get("exit") == "timeout":
        return f"stopped by --timeout{took}{stuck}{kept}"
    if outcome.get("exit") == "exception":
        error = outcome["error"]
        where = f" at line {error['line']}" if error.get("line") else ""
        return f"raised{where}{took}: {error['message'].splitlines()[0][:160]}"
    if outcome.get("exit") == "died":
        return f"the child process died (exit status {outcome.get('status')}){kept}"
    if outcome.get("exit") == "sys.exit":
        return f"exited with status {outcome.get('code')}{took}"
    return f"ran to the end{took}"


def _confirmed_places(run: ScriptRun) -> dict[str, str]:
    """code -> `file.py:31` of its first confirmed finding, to tie a row of
    the account to the finding that explains it."""
    places: dict[str, str] = {}
    for item in run.verified:
        if item.judgement.verdict == "confirmed":
            places.setdefault(item.finding.code,
                              f"{os.path.basename(item.finding.path)}:{item.finding.line}")
    return places


def _launch_ends(runs: list[ScriptRun]) -> dict[int, list[ScriptRun]]:
    """The index of the last rank of each launched job -> the job's ranks
    (ranks of one launch share the parent's process watch)."""
    jobs: dict[int, list[tuple[int, ScriptRun]]] = {}
    for position, run in enumerate(runs):
        contexts = (run.raw or {}).get("contexts")
        if (run.raw or {}).get("rank") is not None and contexts is not None:
            jobs.setdefault(id(contexts), []).append((position, run))
    return {job[-1][0]: [run for _, run in job] for job in jobs.values()}


def _ranks_by_pid(ranks: list[ScriptRun]) -> dict[str, int]:
    raws = (run.raw or {} for run in ranks)
    return {str(raw["pid"]): raw["rank"] for raw in raws if raw.get("pid") is not None}


def selected_gpus(ranks: list[ScriptRun]) -> dict[str, str]:
    """pid -> the GPU each rank measured as its own (`cuda:LOCAL_RANK`)."""
    raws = (run.raw or {} for run in ranks)
    return {str(raw["pid"]): raw["device"] for raw in raws
            if raw.get("pid") is not None and str(raw.get("device", "")).startswith("cuda")}


def format_text(runs: list[ScriptRun], skipped: list[str]) -> str:
    rows = []
    launch_ends = _launch_ends(runs)
    for position, run in enumerate(runs):
        peak = (run.raw or {}).get("peak_allocated")
        peak_text = f", peak {human_bytes(peak)} allocated" if peak is not None else ""
        rows.append(f"{run.path}: {_outcome_line(run)}{peak_text}")
        for item in run.verified:
            finding = item.finding
            place = f"{finding.path}:{finding.line}:{finding.column}"
            rows.append(f"  {finding.code}  {place:<40} {item.judgement.verdict:<14} "
                        f"{item.judgement.measured}")
        raw = run.raw or {}
        account = account_rows(raw.get("account"), raw.get("contexts"), _confirmed_places(run),
                               ranks=raw.get("rank") is not None, pid=raw.get("pid"),
                               device=raw.get("device"))
        if account:
            rows.append("  memory account, as nvidia-smi counts it (NVML, per process):")
            rows.extend("  " + row for row in account)
        rows.extend(peak_rows(raw, [item.finding for item in run.verified]))
        if position in launch_ends:
            ranks = launch_ends[position]
            per_gpu = gpu_rows(raw.get("contexts"), _ranks_by_pid(ranks), selected_gpus(ranks))
            if per_gpu:
                rows.append(f"the {len(ranks)} ranks' memory per GPU (NVML, per process):")
                rows.extend(per_gpu)
    for path in skipped:
        rows.append(f"{path}: skipped, not runnable (no `if __name__ == \"__main__\":` "
                    "and no top-level code)")
    total = sum(len(r.verified) for r in runs)
    confirmed = sum(r.confirmed for r in runs)
    if total == 0 and runs:
        rows.append(f"no findings to measure; the memory account of {len(runs)} "
                    f"run{'s' if len(runs) != 1 else ''} is above")
    else:
        rows.append(f"{confirmed} of {total} findings confirmed in {len(runs)} "
                    f"script{'s' if len(runs) != 1 else ''}")
    return "\n".join(rows)


def format_json(runs: list[ScriptRun], skipped: list[str]) -> str:
    return json.dumps(as_data(runs, skipped), indent=2)


def _account_data(run: ScriptRun) -> dict | None:
    raw = run.raw or {}
    main = raw.get("account")
    if main is None and raw.get("contexts") is None:
        return None
    return {"main": {k: v for k, v in (main or {}).items() if k != "timeline"} or None,
            "processes": raw.get("contexts")}


def _held(run: ScriptRun, finding_id: int) -> int | None:
    """Bytes of the reserved peak held by tensors allocated at the finding's lines."""
    explained = (run.raw or {}).get("peak") or {}
    return explained.get("findings", {}).get(str(finding_id))


def as_data(runs: list[ScriptRun], skipped: list[str]) -> dict:
    return {"scripts": [{"path": run.path, "outcome": run.outcome,
                         "run_seconds": run.run_seconds, "timed_out": run.timed_out,
                         "stopped_at": run.stopped_at, "stuck": run.stuck,
                         "account": _account_data(run),
                         "partial": bool((run.raw or {}).get("partial")),
                         "peak_allocated": (run.raw or {}).get("peak_allocated"),
                         "peak_reserved": (run.raw or {}).get("peak_reserved"),
                         "peak_explained": (run.raw or {}).get("peak"),
                         "findings": [{**v.to_dict(), "held_at_peak": _held(run, fid)}
                                      for fid, v in enumerate(run.verified)]} for run in runs],
            "skipped": skipped}
