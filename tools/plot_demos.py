#!/usr/bin/env python3
"""Charts from `minfer demo` results: one PNG per NAME.json.

    /usr/bin/python3 tools/plot_demos.py [DIR or NAME.json ...] [-o OUTDIR]

Each half of a demo (cpu, cuda) gets its own panel: series with an x value are drawn as lines
(a series called "kernels" as labelled points, "ceiling" or "ceiling LEVEL" as the roofline of
a memory level, "level ..." as a dashed horizontal line, "measured..." with its points labelled),
rows without one as bars. The demo's conclusions are printed under the panels.
Needs matplotlib (Debian: python3-matplotlib, which serves /usr/bin/python3).
"""
import argparse
import glob
import json
import math
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_whole(fig, path, dpi):
    """Writes the figure whole or not at all: a temporary file beside it, renamed over it."""
    temp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".tmp.png")
    try:
        fig.savefig(temp, dpi=dpi)
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)


def panels_of(demo):
    """[(half, kind, rows)] with kind 'line' or 'bar', in a stable order."""
    panels = []
    for half in ("cpu", "cuda"):
        rows = [r for r in demo["rows"] if r["half"] == half]
        lines = [r for r in rows if r["x"] is not None and not (isinstance(r["x"], float) and math.isnan(r["x"]))]
        bars = [r for r in rows if r not in lines]
        if lines:
            panels.append((half, "line", lines))
        if bars:
            panels.append((half, "bar", bars))
    return panels


def draw_line(ax, demo, rows):
    series = {}
    for r in rows:
        series.setdefault(r["series"], []).append(r)
    ceilings = [n for n in series if n.startswith("ceiling ")]
    levels = [n for n in series if n.startswith("level ")]
    for name, points in series.items():
        points.sort(key=lambda r: r["x"])
        xs, ys = [p["x"] for p in points], [p["y"] for p in points]
        if name == "kernels":
            ax.plot(xs, ys, "o", color="tab:red", label=name)
            for p in points:
                ax.annotate(p["label"], (p["x"], p["y"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        elif name == "ceiling":
            ax.plot(xs, ys, "-", color="black", label="measured ceiling")
        elif name.startswith("ceiling "):
            ax.plot(xs, ys, "-", color=str(0.6 * ceilings.index(name) / max(1, len(ceilings) - 1)),
                    label=name.replace("ceiling", "roof:"))
        elif name.startswith("level "):
            ax.plot(xs, ys, "--", linewidth=1, color=str(0.6 * levels.index(name) / max(1, len(levels) - 1)),
                    label=name[len("level "):])
        else:
            ax.plot(xs, ys, "-o", markersize=3, label=name)
            if name.startswith("measured"):
                for p in points:
                    if p.get("label"):
                        ax.annotate(p["label"], (p["x"], p["y"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if demo.get("xlog"):
        ax.set_xscale("log")
    if demo.get("ylog"):
        ax.set_yscale("log")
    ax.set_xlabel(demo.get("x", ""))
    ax.set_ylabel(demo.get("y", ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def draw_bar(ax, demo, rows):
    labels = [r["label"] or r["series"] for r in rows]
    ax.barh(range(len(rows)), [r["y"] for r in rows], color="tab:blue")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    if demo.get("ylog"):
        ax.set_xscale("log")
    ax.set_xlabel(demo.get("y", ""))
    ax.grid(True, axis="x", alpha=0.3)


def plot(path, out_dir):
    with open(path) as f:
        demo = json.load(f)
    panels = panels_of(demo)
    if not panels:
        raise SystemExit(f"plot_demos: {path} has no rows")
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    for ax, (half, kind, rows) in zip(axes[0], panels):
        (draw_line if kind == "line" else draw_bar)(ax, demo, rows)
        ax.set_title(f"{half}", fontsize=9)
    width = 100 * len(panels)  # characters of 7-point text across the figure
    fig.suptitle(textwrap.fill(f"minfer demo {demo['demo']}: {demo['title']}", width * 7 // 10), fontsize=10)
    notes = [f"{c['half']}: {c['text']}" for c in demo.get("conclusions", [])]
    notes += [f"{h}: {s}" for h, s in demo.get("halves", {}).items() if s != "ran"]
    text = "\n".join(textwrap.fill(n, width) for n in notes)
    fig.text(0.01, 0.01, text, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.05 + 0.025 * text.count("\n"), 1, 0.95))
    out = os.path.join(out_dir, demo["demo"] + ".png")
    save_whole(fig, out, dpi=110)
    plt.close(fig)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", default=["results"])
    parser.add_argument("-o", "--out", default=None, help="where the PNGs go (default: beside each JSON)")
    args = parser.parse_args()
    files = []
    for i in args.inputs:
        files += sorted(glob.glob(os.path.join(i, "*.json"))) if os.path.isdir(i) else [i]
    files = [f for f in files if not os.path.basename(f).startswith("bench")]
    if not files:
        raise SystemExit("plot_demos: no demo JSON files in " + ", ".join(args.inputs))
    for f in files:
        out_dir = args.out or os.path.dirname(f) or "."
        os.makedirs(out_dir, exist_ok=True)
        print("plot_demos: wrote", plot(f, out_dir))


if __name__ == "__main__":
    main()
