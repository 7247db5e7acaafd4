"""Device memory over a verify run, with each flagged line's executions
marked: `memlint verify --plot out.png`, or later from a saved timeline with
`python -m memlint.verify.plot TIMELINE.json OUT.png` (matplotlib is the
optional extra `plot`)."""

from __future__ import annotations

import json
import sys


def draw(timeline: dict, labels: dict[int, str], out_path: str, title: str,
         fixed: dict | None = None, account: list | None = None) -> None:
    """`timeline` as the child records it; `labels` maps a probe key to its
    legend text ("line 42 MEM003"); `fixed`, the timeline of the run with the
    fixes applied (`verify --fix`), drawn on the same axes. When the flagged
    lines ran in a short stretch of a long run, a second panel zooms in on
    that stretch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    exits = {key: [(t, a) for t, k, what, a in timeline["events"] if k == key and what == "exit"]
             for key in labels}
    repeated = [points for points in exits.values() if len(points) >= 3]
    times = [t for points in (repeated or exits.values()) for t, _ in points]
    samples = timeline["samples"]
    end = max([t for t, _ in samples] + [t for p in exits.values() for t, _ in p] + [1e-9])
    window = _zoom_window(times, end)
    rows = 2 if window else 1
    figure, axes = plt.subplots(rows, 1, figsize=(11, 4.2 * rows), dpi=110, squeeze=False)
    for row, limits in enumerate([None, window][:rows]):
        _panel(axes[row][0], samples, exits, labels, limits, plt.get_cmap("tab10"),
               fixed["samples"] if fixed else None, account)
    axes[0][0].set_title(title)
    if window:
        axes[1][0].set_title(f"zoom: {window[0]:.2f} s to {window[1]:.2f} s, where the "
                             "flagged lines ran", fontsize=10)
    figure.tight_layout()
    figure.savefig(out_path)
    plt.close(figure)


def draw_gpus(gpu_timeline: dict[str, list], out_path: str, title: str) -> None:
    """A launched run (`--nproc-per-node`): one line per GPU, the memory all
    the run's processes hold on it (NVML, as nvidia-smi counts it), so that a
    GPU 0 fuller than the others shows at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = 2**30
    figure, axes = plt.subplots(figsize=(11, 4.2), dpi=110)
    for index, (gpu, points) in enumerate(sorted(gpu_timeline.items())):
        axes.plot([t for t, _ in points], [b / gib for _, b in points],
                  color=plt.get_cmap("tab10")(index % 10), linewidth=1.4,
                  label=f"{gpu}: the run's processes together (peak "
                        f"{max((b for _, b in points), default=0) / gib:.2f} GiB)")
    axes.set_title(title)
    axes.set_xlabel("seconds since the launch")
    axes.set_ylabel("GiB on the GPU (NVML)")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", fontsize=9)
    figure.tight_layout()
    figure.savefig(out_path)
    plt.close(figure)


def _zoom_window(times: list[float], end: float) -> tuple[float, float] | None:
    """The stretch of the run where the flagged lines (those that ran many
    times, if any did) executed, if it is less than a third of the run."""
    if len(times) < 2:
        return None
    first, last = min(times), max(times)
    if last - first > end / 3:
        return None
    margin = max((last - first) * 0.1, end * 0.005)
    return max(0.0, first - margin), last + margin


def _panel(axes, samples, exits, labels, limits, colours, fixed_samples=None,
           account=None) -> None:
    gib = 2**30
    shown_account = [row for row in account or ()
                     if limits is None or limits[0] <= row[0] <= limits[1]]
    if shown_account:  # (t, NVML process total, PyTorch reserved)
        axes.plot([r[0] for r in shown_account], [r[1] / gib for r in shown_account],
                  color="tab:red", linewidth=1.0, label="process total (NVML, as nvidia-smi)")
        axes.plot([r[0] for r in shown_account], [r[2] / gib for r in shown_account],
                  color="tab:blue", linewidth=1.0, linestyle="--", label="reserved by PyTorch")
    shown = [(t, a) for t, a in samples if limits is None or limits[0] <= t <= limits[1]]
    if shown:
        axes.plot([t for t, _ in shown], [a / gib for _, a in shown], color="0.25",
                  linewidth=1.2, label="allocated on the device" + (
                      ", as written" if fixed_samples is not None else ""))
    fixed_shown = [(t, a) for t, a in fixed_samples or ()
                   if limits is None or limits[0] <= t <= limits[1]]
    if fixed_shown:
        axes.plot([t for t, _ in fixed_shown], [a / gib for _, a in fixed_shown],
                  color="tab:green", linewidth=1.2, label="allocated, with the fixes applied")
    for index, key in enumerate(sorted(labels)):
        points = [(t, a) for t, a in exits[key] if limits is None or limits[0] <= t <= limits[1]]
        if not exits[key]:
            continue
        count = len(exits[key])
        axes.scatter([t for t, _ in points], [a / gib for _, a in points], s=14, zorder=3,
                     color=colours(index % 10),
                     label=f"{labels[key]} ({count} execution{'s' if count != 1 else ''})")
    if limits is not None:
        axes.set_xlim(*limits)
    axes.set_xlabel("seconds since the script started")
    axes.set_ylabel("GiB on the device")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", fontsize=9)


def labels_of(raw: dict, findings) -> dict[int, str]:
    labels = {}
    for statement in raw["statements"]:
        codes = sorted({findings[fid].code for fid in statement["findings"]})
        labels[statement["key"]] = f"line {statement['line']} {'/'.join(codes)}"
    return labels


def save_timeline(path: str, raw: dict, labels: dict[int, str], title: str,
                  fixed: dict | None = None) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"title": title, "labels": {str(k): v for k, v in labels.items()},
                   "timeline": raw["timeline"], "fixed_timeline": fixed,
                   "account": account_timeline(raw)}, handle)


def account_timeline(raw: dict) -> list | None:
    return (raw.get("account") or {}).get("timeline")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m memlint.verify.plot TIMELINE.json OUT.png", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        saved = json.load(handle)
    draw(saved["timeline"], {int(k): v for k, v in saved["labels"].items()}, argv[1],
         saved["title"], saved.get("fixed_timeline"), saved.get("account"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
