"""How fast `memlint check` is next to the libcst parse it cannot avoid, and next to TorchFix.

    python bench/run_bench.py                 # the whole corpus (about 20 minutes on 2 cores)
    python bench/run_bench.py --sample 10     # every 10th file (about 2 minutes)
    python bench/run_bench.py --profile       # also cProfile `check -j1`, grouped by stage

The corpus is the `.py` files of the transformers wheel (`pip download --no-deps
transformers`), unpacked once into `.bench/corpus/`; TorchFix is installed once
into its own venv, `.bench/torchfix-venv/`, so its libcst pin stays out of ours.
Everything is cached under the git-ignored `.bench/`; delete it to start afresh.

Columns, all on the same files, files already in the OS page cache:
- parse floor: one process, for each file read the bytes, decode UTF-8,
  `libcst.parse_module`. No process start-up. Every file is parsed.
- memlint in-process: `memlint.engine.check_file` on each file in the same
  process, interleaved file by file with the floor (so load from other
  processes hits both alike). This is `check_paths(jobs=1)` without discovery.
- `memlint check -j1` / `-jN`: the CLI as a user runs it, process start-up,
  discovery and output (to /dev/null) included.
- TorchFix: `torchfix --select ALL` with its default jobs (all cores).
Ratios are wall time divided by the parse floor.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import glob
import inspect
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import libcst

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".bench"
CORPUS = CACHE / "corpus"
TORCHFIX_VENV = CACHE / "torchfix-venv"
TORCHFIX = TORCHFIX_VENV / "bin" / "torchfix"

sys.path.insert(0, str(REPO))
from memlint.engine import check_file, check_paths, check_source, discover  # noqa: E402
from memlint.rules import ALL_RULES  # noqa: E402
from memlint.engine.settings import Settings  # noqa: E402


# -- preparing the corpus and TorchFix ----------------------------------------

def ensure_corpus() -> str:
    """Unpack the transformers wheel's files once; return the wheel's name."""
    wheels = sorted(glob.glob(str(CACHE / "wheel" / "transformers-*.whl")))
    if not wheels:
        print("downloading the transformers wheel into .bench/wheel ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "transformers", "-d", str(CACHE / "wheel")], check=True)
        wheels = sorted(glob.glob(str(CACHE / "wheel" / "transformers-*.whl")))
    wheel = wheels[-1]
    if not CORPUS.is_dir():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(CORPUS, [n for n in archive.namelist() if n.endswith(".py")])
    return Path(wheel).name


def ensure_torchfix() -> str:
    """TorchFix's version, installing it into its own venv on first use."""
    if not TORCHFIX.exists():
        print("installing TorchFix into .bench/torchfix-venv ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TORCHFIX_VENV)], check=True)
        subprocess.run([str(TORCHFIX_VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                        "torchfix"], check=True)
    return subprocess.run([str(TORCHFIX), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def sample_tree(files: list[str], every: int) -> tuple[str, list[str]]:
    """Every `every`-th file copied into its own tree, so that the CLI and
    TorchFix are pointed at exactly the files the in-process columns time."""
    if every <= 1:
        return str(CORPUS), files
    root = CACHE / f"sample-{every}"
    chosen = files[::every]
    if not root.is_dir():
        for path in chosen:
            target = root / os.path.relpath(path, CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return str(root), sorted(discover([str(root)], Settings()))


# -- timing -------------------------------------------------------------------

def time_per_file(files: list[str], settings: Settings) -> list[dict]:
    """The parse floor and memlint's in-process check of each file, interleaved
    (alternating which goes first). Also notes whether memlint parsed the file
    at all, by counting its calls of libcst.parse_module."""
    real_parse = libcst.parse_module
    parses = [0]

    def counting_parse(source, *args, **kwargs):
        parses[0] += 1
        return real_parse(source, *args, **kwargs)

    def floor(path: str) -> tuple[float, float]:
        # the cyclic GC is paused here as memlint pauses it, so that the floor
        # is the fastest bare parse, not one memlint beats by a trick
        wall, cpu = time.perf_counter(), time.process_time()
        with open(path, "rb") as handle:
            source = handle.read().decode("utf-8")
        gc.disable()
        try:
            real_parse(source)
        finally:
            gc.enable()
        return time.perf_counter() - wall, time.process_time() - cpu

    def memlint(path: str) -> tuple[float, float, int]:
        wall, cpu = time.perf_counter(), time.process_time()
        findings, error = check_file(path, settings)
        if error is not None:
            raise SystemExit(f"memlint crashed on {path}: {error}")
        return time.perf_counter() - wall, time.process_time() - cpu, len(findings)

    rows = []
    libcst.parse_module = counting_parse
    try:
        for i, path in enumerate(files):
            before = parses[0]
            if i % 2:
                check_s, check_cpu, found = memlint(path)
                parse_s, parse_cpu = floor(path)
            else:
                parse_s, parse_cpu = floor(path)
                check_s, check_cpu, found = memlint(path)
            rows.append({"path": path, "parse_s": parse_s, "parse_cpu": parse_cpu,
                         "check_s": check_s, "check_cpu": check_cpu,
                         "parsed": parses[0] > before, "findings": found})
    finally:
        libcst.parse_module = real_parse
    return rows


def floor_cpu(files: list[str]) -> float:
    """The libcst parse floor of every file, in CPU seconds, parsed here as
    `time_per_file` does (the cyclic GC paused as memlint pauses it)."""
    cpu = time.process_time()
    for path in files:
        with open(path, "rb") as handle:
            source = handle.read().decode("utf-8")
        gc.disable()
        try:
            libcst.parse_module(source)
        finally:
            gc.enable()
    return time.process_time() - cpu


def paired_cli_ratios(files: list[str], root: str, pairs: int) -> list[float]:
    """`check -j1` over the parse floor, each CLI run next to a floor run
    (alternating which goes first), so that a machine that speeds up or slows
    down between columns (a shared one does) moves both sides of a ratio."""
    ratios = []
    for i in range(pairs):
        if i % 2:
            cli = time_command(memlint_command(1, root))[1]
            floor = floor_cpu(files)
        else:
            floor = floor_cpu(files)
            cli = time_command(memlint_command(1, root))[1]
        ratios.append(cli / floor)
    return ratios


#: Commands run as an installed tool runs: with its bytecode compiled and kept
#: (a shell with PYTHONDONTWRITEBYTECODE would make every memlint process
#: compile memlint from source, which no user's install does)
_TOOL_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def time_command(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds of the command and all its child processes, result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_TOOL_ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


#: every rule, as `memlint check --preview` (`--preview`): the rules in preview too
CHECKED = Settings()


def memlint_command(jobs: int, root: str, cache_dir: str | None = None) -> list[str]:
    """The CLI if it exists; else the library behind it, in a fresh process alike.
    Cold (`--no-cache`) unless given a cache folder, where the CLI has a cache."""
    if (REPO / "memlint" / "__main__.py").exists():
        caching = []
        if (REPO / "memlint" / "engine" / "cache.py").exists():
            caching = ["--no-cache"] if cache_dir is None else ["--cache-dir", cache_dir]
        preview = ["--preview"] if CHECKED.preview else []
        return [sys.executable, "-m", "memlint", "check", f"-j{jobs}", *caching, *preview, root]
    script = ("import sys; from memlint import check_paths; "
              "r = check_paths([sys.argv[1]], jobs=int(sys.argv[2])); "
              "print('\\n'.join(f'{f.path}:{f.line}: {f.code}' for f in r.findings))")
    return [sys.executable, "-c", script, root, str(jobs)]


def startup_seconds() -> float:
    """CPU seconds of the CLI on a one-line file: interpreter start, imports, rules."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "empty.py")
        with open(path, "w") as handle:
            handle.write("import torch\n")
        return min(time_command(memlint_command(1, path))[1] for _ in range(3))


def import_libcst_seconds() -> float:
    """CPU seconds of `python -c "import libcst"`: the start-up's reference."""
    return min(time_command([sys.executable, "-c", "import libcst"])[1] for _ in range(3))


def ruff_command(root: str) -> list[str] | None:
    """`ruff check --no-cache` on the same files (its default rules), if ruff is installed."""
    ruff = shutil.which("ruff") or shutil.which("ruff", path=os.path.dirname(sys.executable))
    return None if ruff is None else [ruff, "check", "--no-cache", "--exit-zero", "--quiet", root]


# -- profiling ----------------------------------------------------------------

def profile_stages(root: str) -> list[tuple[str, float]]:
    """cProfile `check_paths(jobs=1)` and split its time by stage, from the
    cumulative times of the functions that start each stage. Deterministic
    profiling slows Python-level code far more than libcst's native parser, so
    read the shares, not the seconds."""
    profiler = cProfile.Profile()
    profiler.runcall(check_paths, [root], CHECKED, 1)
    profiler.dump_stats(str(CACHE / "profile.pstats"))
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}

    def cumulative(predicate) -> float:
        return sum(ct for (file, _, name), (_, _, _, ct, _) in stats.items()
                   if predicate(file.replace(os.sep, "/"), name))

    total = cumulative(lambda f, n: n == "check_paths" and f.endswith("memlint/engine/paths.py"))
    parse = cumulative(lambda f, n: n == "parse_module" and "libcst" in f)
    walk = cumulative(lambda f, n: n == "walk" and f.endswith("memlint/analysis/walker.py"))
    context = cumulative(lambda f, n: f.endswith("memlint/analysis/context.py")
                         and n in ("enter", "leave", "enter_body", "leave_body"))
    rules = cumulative(lambda f, n: "memlint/rules/" in f
                       and n.startswith(("visit_", "leave_")))
    finish = cumulative(lambda f, n: "memlint/rules/" in f and n == "finish")
    handlers = cumulative(
        lambda f, n: n == "handlers_for" and f.endswith("memlint/analysis/walker.py"))
    positions = cumulative(lambda f, n: n == "_place" and f.endswith("memlint/engine/source.py"))
    decode = cumulative(lambda f, n: n == "decode" and f.endswith("memlint/engine/source.py"))
    source_lines, first = inspect.getsourcelines(check_source)
    check_source_lines = range(first, first + len(source_lines))
    prefilter = sum(ct for (file, line, name), (_, _, _, ct, _) in stats.items()
                    if name == "<genexpr>" and file.endswith("memlint/engine/source.py")
                    and line in check_source_lines)
    discovery = cumulative(lambda f, n: n == "discover" and f.endswith("memlint/engine/paths.py"))
    stages = [
        ("libcst parse", parse),
        ("walker (traversal itself)", walk - context - rules),
        ("context (ctx.enter/leave)", context),
        ("rules: visit_/leave_", rules),
        ("rules: finish()", finish),
        ("handler tables", handlers),
        ("positions + noqa (_place)", positions),
        ("decode", decode),
        ("keyword prefilter", prefilter),
        ("discovery", discovery),
    ]
    accounted = sum(seconds for _, seconds in stages)
    stages.append(("other (reading, sorting, ...)", total - accounted))
    stages.append(("total", total))
    return stages


# -- reporting ----------------------------------------------------------------

def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, libcst {libcst_version()}")


def libcst_version() -> str:
    from importlib.metadata import version

    return version("libcst")


def git_state() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()

    dirty = " + uncommitted changes in memlint/" if git("status", "--porcelain", "memlint") else ""
    return f"{git('rev-parse', '--short', 'HEAD')}{dirty}"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def describe(args, wheel, files, root, rows, columns, startup_cpu, torchfix_notes, load) -> str:
    """The figures as Markdown, ready for bench/README.md."""
    n = len(files)
    floor_wall, floor_cpu = columns[0][1], columns[0][2]
    by_label = {label: (wall, cpu) for label, wall, cpu in columns}
    parsed = [r for r in rows if r["parsed"]]
    out = [
        f"- memlint {git_state()}; rules present: {', '.join(r.code for r in ALL_RULES)}",
        f"- machine: {machine()}",
        f"- load average before / after: {load[0]:.2f} / {load[1]:.2f} (others' processes "
        "stretch wall times; CPU times are the steadier figure on a shared machine)",
        f"- corpus: {n} files, {sum(os.path.getsize(p) for p in files) / 1e6:.1f} MB, from {wheel}"
        + (f", every {args.sample}th file" if args.sample > 1 else ""),
        f"- command: `{' '.join(['python bench/run_bench.py', *sys.argv[1:]])}`",
        "",
        "| run | wall s | CPU s | CPU ms / file | × floor (wall) | × floor (CPU) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, wall, cpu in columns:
        out.append(f"| {label} | {wall:.1f} | {cpu:.1f} | {1000 * cpu / n:.1f} | "
                   f"{wall / floor_wall:.2f} | {cpu / floor_cpu:.2f} |")
    out.append("")
    skipped = [r for r in rows if not r["parsed"]]
    out.append(f"- prefilter: {len(skipped)} of {n} files skipped without parsing (their parse "
               f"is {sum(r['parse_cpu'] for r in skipped):.1f} CPU s of the floor)")
    if parsed:
        ratios = [r["check_cpu"] / r["parse_cpu"] for r in parsed if r["parse_cpu"] > 0]
        check = sum(r["check_cpu"] for r in parsed)
        parse = sum(r["parse_cpu"] for r in parsed)
        out.append(f"- on the {len(parsed)} files memlint parsed: check {check:.1f} CPU s vs parse "
                   f"{parse:.1f} CPU s = {check / parse:.2f}×; per file median "
                   f"{statistics.median(ratios):.2f}×, p90 {percentile(ratios, 0.9):.2f}×, "
                   f"max {max(ratios):.2f}×")
    startup, libcst_import = startup_cpu
    out.append(f"- one-file latency (CLI, `--no-cache`, on a one-line file): {startup:.3f} CPU s; "
               f"`python -c 'import libcst'`: {libcst_import:.3f} CPU s "
               f"({startup / libcst_import:.2f}×)")
    out.append(f"- findings: {sum(r['findings'] for r in rows)}")
    j1 = by_label.get("memlint check -j1 (CLI)")
    for note in torchfix_notes:
        out.append(f"- {note}")
    for label, wall, cpu in columns:
        if label.startswith("TorchFix") and j1:
            out.append(f"- {label} vs memlint check -j1: {cpu / j1[1]:.1f}× the CPU time, "
                       f"{wall / j1[0]:.1f}× the wall time")
    out.append("- largest per-file overheads (check − parse, CPU):")
    for r in sorted(parsed, key=lambda r: r["check_cpu"] - r["parse_cpu"], reverse=True)[:5]:
        out.append(f"  - {os.path.relpath(r['path'], root)}: parse {1000 * r['parse_cpu']:.0f} ms, "
                   f"check {1000 * r['check_cpu']:.0f} ms")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=1, metavar="K",
                        help="time every K-th file only (default: all files)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes for the parallel memlint run (default: all cores)")
    parser.add_argument("--skip-torchfix", action="store_true")
    parser.add_argument("--torchfix-j1", action="store_true",
                        help="also time TorchFix on one process (slow)")
    parser.add_argument("--pairs", type=int, default=3, metavar="N",
                        help="also time check -j1 N more times, each beside a parse floor "
                             "run, and report the median ratio (default 3; 0: skip)")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile check -j1 and print where the time goes")
    parser.add_argument("--preview", action="store_true",
                        help="check with every rule, those in preview too (`check --preview`)")
    args = parser.parse_args()
    global CHECKED
    CHECKED = Settings(preview=args.preview)

    wheel = ensure_corpus()
    torchfix_version = None if args.skip_torchfix else ensure_torchfix()
    root, files = sample_tree(sorted(discover([str(CORPUS)], Settings())), args.sample)
    for path in files:  # warm the page cache for every column alike
        Path(path).read_bytes()
    load_before = os.getloadavg()

    print(f"corpus: {len(files)} files of {wheel} in {os.path.relpath(root, REPO)}", flush=True)
    rows = time_per_file(files, CHECKED)
    floor_wall = sum(r["parse_s"] for r in rows)
    floor_cpu = sum(r["parse_cpu"] for r in rows)
    columns = [("libcst parse floor (in-process)", floor_wall, floor_cpu),
               ("memlint in-process (check_file each)", sum(r["check_s"] for r in rows),
                sum(r["check_cpu"] for r in rows))]
    print(f"timed {len(files)} files in-process", flush=True)

    time_command(memlint_command(1, __file__))  # compile memlint's bytecode once, as installed
    startup_cpu = startup_seconds()
    libcst_cpu = import_libcst_seconds()
    for jobs in sorted({1, args.jobs}):
        wall, cpu, done = time_command(memlint_command(jobs, root))
        if done.returncode not in (0, 1):
            raise SystemExit(f"memlint -j{jobs} failed ({done.returncode}): {done.stderr[-2000:]}")
        columns.append((f"memlint check -j{jobs} (CLI)", wall, cpu))
        print(f"timed memlint -j{jobs}", flush=True)
    if (REPO / "memlint" / "engine" / "cache.py").exists():
        with tempfile.TemporaryDirectory() as cache_dir:
            time_command(memlint_command(1, root, cache_dir))  # fills the cache
            wall, cpu, done = time_command(memlint_command(1, root, cache_dir))
            columns.append(("memlint check -j1, warm cache (CLI)", wall, cpu))
        print("timed memlint warm", flush=True)
    ruff = ruff_command(root)
    if ruff is not None:
        version = subprocess.run([ruff[0], "--version"], capture_output=True, text=True).stdout
        wall, cpu, done = time_command(ruff)
        columns.append((f"{version.strip()} check --no-cache", wall, cpu))
        print("timed ruff", flush=True)

    torchfix_notes = []
    if torchfix_version:
        for extra in [[]] + ([["-j", "1"]] if args.torchfix_j1 else []):
            wall, cpu, done = time_command([str(TORCHFIX), "--select", "ALL", *extra, root])
            checked = next((line for line in done.stderr.splitlines()
                            if line.startswith("Finished checking")), "no summary line")
            label = f"TorchFix {torchfix_version} --select ALL {' '.join(extra) or '(all cores)'}"
            torchfix_notes.append(f"{label}: {checked.lower()} (exit {done.returncode})")
            columns.append((label, wall, cpu))
            print(f"timed {label}", flush=True)
    paired = paired_cli_ratios(files, root, args.pairs)
    if paired:
        print("timed check -j1 beside the floor", flush=True)
    load_after = os.getloadavg()

    report = describe(args, wheel, files, root, rows, columns, (startup_cpu, libcst_cpu),
                      torchfix_notes, (load_before[0], load_after[0]))
    if paired:
        report += (f"\n- check -j1 (CLI) over the parse floor, {len(paired)} runs each beside a "
                   f"floor run (CPU): median {statistics.median(paired):.2f}×, "
                   f"{min(paired):.2f}-{max(paired):.2f}×")
    print("\n" + report)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (CACHE / f"results-{stamp}.json").write_text(json.dumps(
        {"report": report, "columns": columns, "files": rows}, indent=1))

    if args.profile:
        print("\ncProfile of check_paths(jobs=1), cumulative seconds by stage:")
        stages = profile_stages(root)
        total = stages[-1][1]
        for name, seconds in stages:
            print(f"  {name:34s} {seconds:8.2f} s  {100 * seconds / total:5.1f} %")
        print(f"  (full profile: {os.path.relpath(CACHE / 'profile.pstats', REPO)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
