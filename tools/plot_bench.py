#!/usr/bin/env python3
"""Charts from `minfer bench -o json` (or --save-json) records.

    /usr/bin/python3 tools/plot_bench.py results.json [more.json ...] -o OUTDIR

writes OUTDIR/bench_throughput.png (tokens/s against batch size, prefill and decode, one line per
model/device/dtype/threads/kernels) and, when the records carry roofline ceilings (--roofline),
OUTDIR/bench_roofline.png (every row placed by arithmetic intensity, FLOPs per byte, against its
achieved GFLOP/s, under the measured bandwidth slope and matmul peak).
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


def plot_roofline(records, path):
    rows = [r for r in records if r.get("roofline_gbps") and r.get("roofline_gflops") and r.get("gbps")]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    ceilings = {}
    for r in rows:
        ceilings[(r["device_name"], r["dtype"])] = (r["roofline_gbps"], r["roofline_gflops"])
    for (device, dtype), (gbps, gflops) in ceilings.items():
        ridge = gflops / gbps
        xs = [ridge / 64, ridge, ridge * 64]
        ax.plot(xs, [min(gflops, x * gbps) for x in xs], "-", label=f"ceiling {device} {dtype}: {gbps:.0f} GB/s, {gflops:.0f} GFLOP/s")
    for r in rows:
        intensity = r["gflops"] / r["gbps"]
        marker = "s" if r["test"].startswith("pp") else "o"
        ax.plot(intensity, r["gflops"], marker, label=f"{r['test']} B={r['batch']} {r['model']} ({100 * r['roofline_fraction']:.0f}%)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("minfer bench on the roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    save_whole(fig, path, dpi=120)
    plt.close(fig)
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
    print("plot_bench: wrote " + ", ".join(os.path.join(args.out, w) for w in wrote))


if __name__ == "__main__":
    main()
