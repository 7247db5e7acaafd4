"""Device memory over a verify run, with each flagged line's executions
marked: `memlint verify --plot out.png`, or later from a saved timeline with
`python -m memlint.verify.plot TIMELINE.json OUT.png` (matplotlib is the
optional extra `plot`)."""

from __future__ import annotations

import json
import sys


def draw(timeline: dict, labels: dict[int, str], out_path: str, title: str,
         fixed: dict | None = None, account: list | None = None,
         bars: list[tuple[str, dict[str, int]]] | None = None) -> None:
    """`timeline` as the child records it; `labels` maps a probe key to its
    legend text ("line 42 MEM003"); `fixed`, the timeline of the run with the
    fixes applied (`verify --fix`), drawn on the same axes. When the flagged
    lines ran in a short stretch of a long run, a second panel zooms in on
    that stretch. `bars` (label, parts): the peak explained, one stacked bar
    per process and GPU, drawn to the right of the timeline."""
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
    columns = 2 if bars else 1
    figure, axes = plt.subplots(rows, columns, figsize=(11 + 4 * (columns - 1), 4.2 * rows),
                                dpi=110, squeeze=False,
                                gridspec_kw={"width_ratios": [3, 1][:columns]})
    if bars:
        _bars(axes[0][1], bars)
        for row in range(1, rows):
            axes[row][1].axis("off")
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


#: a colour per part of the peak, the same in every plot
_PART_COLOURS = {"CUDA context": "0.55", "parameters": "tab:blue", "gradients": "tab:orange",
                 "optimizer state": "tab:green", "activations saved for backward": "tab:red",
                 "tensors kept by flagged lines": "tab:purple", "other tensors": "tab:brown",
                 "allocator cache": "0.8", "other (libraries)": "0.35"}


def _bars(axes, bars: list[tuple[str, dict[str, int]]]) -> None:
    """The peak of each process/GPU as one stacked bar of its parts."""
    gib = 2**30
    names = [name for name in _PART_COLOURS if any(parts.get(name) for _, parts in bars)]
    bottoms = [0.0] * len(bars)
    for name in names:
        heights = [parts.get(name, 0) / gib for _, parts in bars]
        axes.bar(range(len(bars)), heights, bottom=bottoms, color=_PART_COLOURS[name],
                 label=name, width=0.6)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    axes.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
    axes.set_ylabel("GiB at the peak")
    axes.set_title("the peak, by what held it", fontsize=10)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.12), ncol=1)


def draw_gpus(gpu_timeline: dict[str, list], out_path: str, title: str,
              bars: list[tuple[str, dict[str, int]]] | None = None) -> None:
    """A launched run (`--nproc-per-node`): one line per GPU, the memory all
    the run's processes hold on it (NVML, as nvidia-smi counts it), so that a
    GPU 0 fuller than the others shows at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = 2**30
    figure, both = plt.subplots(1, 2 if bars else 1, figsize=(15 if bars else 11, 4.2),
                                dpi=110, squeeze=False,
                                gridspec_kw={"width_ratios": [3, 1] if bars else [1]})
    axes = both[0][0]
    if bars:
        _bars(both[0][1], bars)
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
                   "account": account_timeline(raw), "bars": peak_bars([raw])}, handle)


def peak_bars(raws: list[dict]) -> list[tuple[str, dict[str, int]]]:
    """One (label, parts) per process with its peak explained: `pid N cuda:I`
    (with the rank where there is one)."""
    from memlint.verify.peak import process_bar

    bars = []
    for raw in raws:
        bar = process_bar(raw)
        if bar is not None:
            rank = f"rank {raw['rank']}\n" if raw.get("rank") is not None else ""
            bars.append((f"{rank}pid {raw.get('pid')}\n{raw.get('device')}", bar))
    return bars


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
         saved["title"], saved.get("fixed_timeline"), saved.get("account"), saved.get("bars"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
