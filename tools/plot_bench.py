#!/usr/bin/env python3
"""Charts from `minfer bench -o json` (or --save-json) records.

    /usr/bin/python3 tools/plot_bench.py results.json [more.json ...] -o OUTDIR

writes OUTDIR/bench_throughput.png (tokens/s against batch size, prefill and decode, one line per
model/device/dtype/threads/kernels) and, when the records carry roofline ceilings (--roofline),
OUTDIR/bench_roofline.png (every row placed by arithmetic intensity, FLOPs per byte, against its
achieved GFLOP/s, under each memory level's bandwidth slope and the matmul peak) and
OUTDIR/bench_bandwidth.png (every decode row's achieved GB/s against its bytes per step, under
each memory level's measured bandwidth as a horizontal line across the sizes it holds).
Needs matplotlib (Debian: python3-matplotlib, which serves /usr/bin/python3).
"""
import argparse
import json
import os
import sys

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


def series_key(r):
    threads = f", {r['threads']} threads" if r.get("threads") else ""
    return f"{r['model']} {r['device']} {r['dtype']}{threads} {r.get('kernels', '')}".strip()


def plot_throughput(records, path):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, kind, title in ((axes[0], "pp", "prefill"), (axes[1], "tg", "decode")):
        groups = {}
        for r in records:
            if r["test"].startswith(kind):
                groups.setdefault((series_key(r), r["test"]), []).append(r)
        for (name, test), rows in sorted(groups.items()):
            rows.sort(key=lambda r: r["batch"])
            ax.errorbar([r["batch"] for r in rows], [r["avg_ts"] for r in rows],
                        yerr=[r["stddev_ts"] for r in rows], marker="o", capsize=3, label=f"{test} {name}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size B (sequences)")
        ax.set_ylabel("tokens/s (all sequences)")
        ax.set_title(f"{title}: tokens/s against batch size")
        ax.grid(True, which="both", alpha=0.3)
        if groups:
            ax.legend(fontsize=7)
    fig.tight_layout()
    save_whole(fig, path, dpi=120)
    plt.close(fig)


def finish_log_log(fig, ax, xlabel, ylabel, title, path):
    """Log axes, labels, grid and legend, then the PNG written whole."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    save_whole(fig, path, dpi=120)
    plt.close(fig)


def levels_of(r):
    """The memory levels a record was judged against: [(name, capacity_bytes, read_gbps)]."""
    return [(l["name"], l["capacity_bytes"], l["read_gbps"]) for l in r.get("roofline_levels") or []]


def plot_roofline(records, path):
    rows = [r for r in records if r.get("roofline_gflops") and r.get("gbps") and levels_of(r)]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    ceilings = {}
    for r in rows:
        ceilings[(r["device_name"], r["dtype"])] = (levels_of(r), r["roofline_gflops"])
    for (device, dtype), (levels, gflops) in ceilings.items():
        ridge = gflops / levels[-1][2]
        xs = [ridge / 64 * 2 ** (i / 4) for i in range(4 * 13)]
        for i, (name, _, gbps) in enumerate(levels):
            shade = str(0.6 * i / max(1, len(levels) - 1))
            ax.plot(xs, [min(gflops, x * gbps) for x in xs], "-", color=shade,
                    label=f"{device} {dtype}: {name} {gbps:.0f} GB/s, peak {gflops:.0f} GFLOP/s")
    for r in rows:
        intensity = r["gflops"] / r["gbps"]
        marker = "s" if r["test"].startswith("pp") else "o"
        level = f" of {r['roofline_level']}" if r.get("roofline_level") else ""
        ax.plot(intensity, r["gflops"], marker,
                label=f"{r['test']} B={r['batch']} {r['model']} ({100 * r['roofline_fraction']:.0f}%{level})")
    finish_log_log(fig, ax, "arithmetic intensity (FLOPs per byte read)", "GFLOP/s",
                   "minfer bench on the cache-aware roofline", path)
    return True


def plot_bandwidth(records, path):
    rows = [r for r in records if r["test"].startswith("tg") and r.get("gbps") and levels_of(r)]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    smallest = min(r["bytes_per_step"] for r in rows) / 4
    largest = max(r["bytes_per_step"] for r in rows) * 4
    drawn = set()
    for r in rows:
        key = (r["device_name"], r["threads"])
        if key in drawn:
            continue
        drawn.add(key)
        below = min([smallest] + [c / 4 for _, c, _ in levels_of(r) if c])
        for i, (name, capacity, gbps) in enumerate(levels_of(r)):
            right = capacity if capacity else max(largest, 4 * below)
            shade = str(0.6 * i / max(1, len(levels_of(r)) - 1))
            ax.hlines(gbps, below, right, colors=shade, linestyles="--",
                      label=f"{r['device_name']}: {name} {gbps:.1f} GB/s")
            below = right
    for r in rows:
        ax.plot(r["bytes_per_step"], r["gbps"], "o",
                label=f"{r['test']} B={r['batch']} {r['model']} {r['dtype']} ({100 * r['roofline_fraction']:.0f}% of {r['roofline_level']})")
    finish_log_log(fig, ax, "bytes read per decode step", "GB/s",
                   "decode against the bandwidth of the level its bytes fit in", path)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+")
    parser.add_argument("-o", "--out", default="results")
    args = parser.parse_args()
    records = []
    for path in args.json:
        with open(path) as f:
            records.extend(json.load(f))
    if not records:
        sys.exit("plot_bench: no records in " + ", ".join(args.json))
    os.makedirs(args.out, exist_ok=True)
    plot_throughput(records, os.path.join(args.out, "bench_throughput.png"))
    wrote = ["bench_throughput.png"]
    if plot_roofline(records, os.path.join(args.out, "bench_roofline.png")):
        wrote.append("bench_roofline.png")
    if plot_bandwidth(records, os.path.join(args.out, "bench_bandwidth.png")):
        wrote.append("bench_bandwidth.png")
    print("plot_bench: wrote " + ", ".join(os.path.join(args.out, w) for w in wrote))


if __name__ == "__main__":
    main()
