"""Device memory over a verify run, with each flagged line's executions
marked: `memlint verify --plot out.png`, or later from a saved timeline with
`python -m memlint.verify.plot TIMELINE.json OUT.png` (matplotlib is the
optional extra `plot`)."""

from __future__ import annotations

import json
import sys


def draw(timeline: dict, labels: dict[int, str], out_path: str, title: str) -> None:
    """`timeline` as the child records it; `labels` maps a probe key to its
    legend text ("line 42 MEM003")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = 2**30
    samples = timeline["samples"]
    figure, axes = plt.subplots(figsize=(11, 5), dpi=110)
    if samples:
        axes.plot([t for t, _ in samples], [a / gib for _, a in samples], color="0.25",
                  linewidth=1.2, label="allocated on the device")
    colours = plt.get_cmap("tab10")
    for index, (key, label) in enumerate(sorted(labels.items())):
        exits = [(t, a) for t, k, what, a in timeline["events"] if k == key and what == "exit"]
        if not exits:
            continue
        axes.scatter([t for t, _ in exits], [a / gib for _, a in exits], s=14, zorder=3,
                     color=colours(index % 10),
                     label=f"{label} ({len(exits)} execution{'s' if len(exits) != 1 else ''})")
    axes.set_xlabel("seconds since the script started")
    axes.set_ylabel("GiB allocated")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", fontsize=9)
    figure.tight_layout()
    figure.savefig(out_path)
    plt.close(figure)


def labels_of(raw: dict, findings) -> dict[int, str]:
    labels = {}
    for statement in raw["statements"]:
        codes = sorted({findings[fid].code for fid in statement["findings"]})
        labels[statement["key"]] = f"line {statement['line']} {'/'.join(codes)}"
    return labels


def save_timeline(path: str, raw: dict, labels: dict[int, str], title: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"title": title, "labels": {str(k): v for k, v in labels.items()},
                   "timeline": raw["timeline"]}, handle)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m memlint.verify.plot TIMELINE.json OUT.png", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        saved = json.load(handle)
    draw(saved["timeline"], {int(k): v for k, v in saved["labels"].items()}, argv[1],
         saved["title"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
