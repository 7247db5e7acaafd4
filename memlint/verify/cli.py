"""`memlint verify PATH... [-- ARGS...]`: argument parsing and the run.

Kept apart from `memlint/cli.py`, which only hands `verify` over to `main`.
Exit 0 when no finding was confirmed, 1 when one was, 2 on a usage error or
when no CUDA device is usable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import overload

from memlint.engine.config import (ConfigError, apply_overrides, common_parent, find_pyproject,
                            load_settings, parse_codes)
from memlint.engine.settings import Settings

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str) -> int:
    """`1048576`, `512KiB`, `1.5 GiB`, `10MB` -> bytes."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1MiB or 1048576)")
    number, unit = float(match.group(1)), (match.group(2) or "B").lower()
    return int(number * _UNITS[unit])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memlint verify",
        description="Run a flagged script on a GPU with probes on the flagged lines and "
                    "measure each finding. Arguments after `--` go to the script.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a script (run even without findings, for its memory account), "
                             "or a directory: every runnable file with findings")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before the script is stopped (default 120)")
    parser.add_argument("--min-bytes", type=parse_size, default=2**20,
                        help="smallest impact that confirms a finding (default 1MiB)")
    parser.add_argument("--device", default="cuda:0", help="CUDA device to measure on")
    parser.add_argument("--select", default=None,
                        help="comma-separated codes or prefixes (replaces the config's)")
    parser.add_argument("--ignore", default=None,
                        help="comma-separated codes or prefixes (replaces the config's)")
    parser.add_argument("--preview", action="store_true",
                        help="also measure the findings of rules in preview, as `memlint check "
                             "--preview` reports them")
    parser.add_argument("--output-format", "--format", dest="format", choices=("text", "json"),
                        default="text", help="output format (default: text)")
    parser.add_argument("--snapshot", metavar="OUT.pickle",
                        help="write PyTorch's memory snapshot (opens in pytorch.org/memory_viz)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="draw device memory over the run with the flagged lines marked "
                             "(with --nproc-per-node: one line per GPU, all ranks together)")
    parser.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                        help="run the script as N ranks (1 included) under torchrun (PyTorch's "
                             "launcher, --standalone) and report each rank's verdicts and "
                             "account, and what every rank held on each GPU")
    parser.add_argument("--fix", action="store_true",
                        help="also run the script with its safe fixes applied (in memory; the "
                             "file is not written) and report what each fix saved, measured")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="with --fix: apply the unsafe fixes too")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed random, numpy and torch before the script runs (--fix "
                             "seeds both runs with 0 unless given)")
    parser.add_argument("--explain-peak", action="store_true",
                        help="record the allocator's history while the reserve grows and break "
                             "the reserved peak into parameters, gradients, optimizer state, "
                             "activations, tensors of flagged lines and cache (slower)")
    return parser


def _settings(options: argparse.Namespace) -> Settings:
    """The same configuration as `memlint check`: the nearest pyproject.toml's
    [tool.memlint], then --select / --ignore over it."""
    settings = load_settings(find_pyproject(common_parent(options.paths)))
    select = parse_codes(options.select, "--select") if options.select is not None else None
    ignore = parse_codes(options.ignore, "--ignore", ignoring=True) \
        if options.ignore is not None else None
    return apply_overrides(settings, select=select, ignore=ignore, preview=options.preview)


def _checked_settings(options: argparse.Namespace) -> Settings:
    """The settings, once the paths and flags are known to make sense: a
    mistake is named before the GPU is looked for."""
    missing = [p for p in options.paths if not os.path.exists(p)]
    if missing:
        raise ConfigError(f"no such file or directory: {missing[0]}")
    if options.nproc_per_node is not None and options.nproc_per_node < 1:
        raise ConfigError("--nproc-per-node must be 1 or more")
    if options.nproc_per_node is not None and options.fix:
        raise ConfigError("--fix with --nproc-per-node is not supported yet; "
                          "measure the fixes on one process")
    if options.unsafe_fixes and not options.fix:
        raise ConfigError("--unsafe-fixes needs --fix")
    return _settings(options)


@overload
def _per_script(path: str, script: str, several: bool) -> str: ...
@overload
def _per_script(path: None, script: str, several: bool) -> None: ...


def _per_script(path: str | None, script: str, several: bool) -> str | None:
    """`out.png` for one script; `out.<script>.png` for each of several."""
    if path is None or not several:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.{os.path.splitext(os.path.basename(script))[0]}{ext}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1:]
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as stop:
        return 2 if stop.code else 0

    from memlint.verify.runner import prestart

    # one script, one process: its child starts now, and its import of torch
    # hides the checks below (issue 28, item 7)
    early = prestart(options.device, explain_peak=options.explain_peak) \
        if len(options.paths) == 1 and \
        os.path.isfile(options.paths[0]) and options.nproc_per_node is None else None
    try:
        return _verify(options, script_args, early)
    finally:
        if early is not None:
            early.close()


def _verify(options: argparse.Namespace, script_args: list[str], early) -> int:
    from memlint.verify.runner import Options, cuda_problem, runnable_targets, verify_ranks

    try:
        settings = _checked_settings(options)
    except ConfigError as error:
        print(f"memlint verify: {error}", file=sys.stderr)
        return 2
    problem = cuda_problem(options.device)
    if problem:
        print(f"memlint verify: {problem}", file=sys.stderr)
        if options.format == "json":  # a consumer of the JSON still gets a document
            print(json.dumps({"error": problem, "scripts": [], "skipped": []}, indent=2))
        return 2
    targets, skipped = runnable_targets(options.paths, settings)
    several = len(targets) > 1
    runs, comparisons = [], []
    seed = 0 if options.fix and options.seed is None else options.seed
    for script, findings in targets:
        run_options = Options(args=script_args, timeout=options.timeout,
                              min_bytes=options.min_bytes, device=options.device,
                              settings=settings,
                              snapshot=_per_script(options.snapshot, script, several),
                              timeline=options.plot is not None, seed=seed,
                              nproc_per_node=options.nproc_per_node,
                              explain_peak=options.explain_peak, early=early)
        if options.fix:
            from memlint.verify.fix_effects import compare_fixes

            comparison = compare_fixes(script, findings, run_options, options.unsafe_fixes)
            comparisons.append(comparison)
            ranks = [comparison.before]
        else:
            ranks = verify_ranks(script, findings, run_options)
        runs.extend(ranks)
        run = ranks[0]  # the one plotted
        gpu_lines = ((run.raw or {}).get("contexts") or {}).get("gpu_timeline")
        if options.plot and len(ranks) > 1 and gpu_lines:
            print(_plot_gpus(gpu_lines, ranks, script, _per_script(options.plot, script, several)),
                  file=sys.stderr)
        elif options.plot and run.raw and "timeline" in run.raw:
            after = comparisons[-1].after if comparisons else None
            print(_plot(run, findings, _per_script(options.plot, script, several), after),
                  file=sys.stderr)

    from memlint.verify import fix_effects, report

    if options.format == "json":
        data = report.as_data(runs, skipped)
        if options.fix:
            data.update(fix_effects.format_json(comparisons))
        print(json.dumps(data, indent=2))
    else:
        print(report.format_text(runs, skipped))
        if options.fix:
            print(fix_effects.format_text(comparisons))
    return 1 if any(run.confirmed for run in runs) else 0


def _plot_gpus(gpu_lines: dict, ranks, script: str, out_path: str) -> str:
    """One line per GPU the run touched or a rank selected (flat at zero
    where a rank's own GPU stayed empty)."""
    from memlint.verify.plot import draw_gpus, peak_bars
    from memlint.verify.report import selected_gpus

    times = [t for points in gpu_lines.values() for t, _ in points]
    for gpu in set(selected_gpus(ranks).values()) - set(gpu_lines):
        gpu_lines = {**gpu_lines, gpu: [(t, 0) for t in sorted(set(times))]}
    title = f"memlint verify {os.path.basename(script)}: memory per GPU, all ranks"
    try:
        draw_gpus(gpu_lines, out_path, title, peak_bars([run.raw for run in ranks if run.raw]))
    except ImportError:
        saved = os.path.splitext(out_path)[0] + ".gpus.json"
        with open(saved, "w", encoding="utf-8") as handle:
            json.dump({"title": title, "gpu_timeline": gpu_lines}, handle)
        return f"memlint verify: matplotlib is not installed; per-GPU timeline saved to {saved}"
    return f"memlint verify: plot written to {out_path}"


def _plot(run, findings, out_path: str, after=None) -> str:
    from memlint.verify.plot import account_timeline, draw, labels_of, peak_bars, save_timeline

    labels = labels_of(run.raw, findings)
    title = f"memlint verify {os.path.basename(run.path)}: device memory and flagged lines"
    fixed = after.raw["timeline"] if after is not None and after.raw \
        and "timeline" in after.raw else None
    try:
        draw(run.raw["timeline"], labels, out_path, title, fixed, account_timeline(run.raw),
             peak_bars([run.raw]))
    except ImportError:
        saved = os.path.splitext(out_path)[0] + ".timeline.json"
        save_timeline(saved, run.raw, labels, title, fixed)
        return (f"memlint verify: matplotlib is not installed; timeline saved to {saved} "
                f"(draw it with: python -m memlint.verify.plot {saved} {out_path})")
    return f"memlint verify: plot written to {out_path}"


if __name__ == "__main__":
    sys.exit(main())
