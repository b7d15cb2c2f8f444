#!/usr/bin/env python3
"""Helper for bench/peers/measure_layout.sh (standard library only). Subcommands:

  minfer JSON              the rows of `minfer bench -o json`, one a line: test, tok/s, GB/s, bytes per step,
                           model bytes, the device's name ("na" fields where the run failed)
  llama JSON               the rows of `llama-bench -o json`, one a line: test (pp256, tg128), tok/s
  ops JSON                 the rows of a minfer_microbench --benchmark_format=json run (BM_MatmulFromDram,
                           BM_QuantLayoutFromDram), one a line: benchmark,NxK,dtype,layout then threads and weight GB/s
  layers B1 B2 TARGET      the layers a preset needs for TARGET bytes of weights, given its bytes at 1 layer (B1)
                           and at 2 (B2); at most 1024 (model/presets.h, kMaxPresetLayers)
  summary DIR              DIR/results.tsv and DIR/greedy.*.json as markdown (DIR/summary.md) and JSON
                           (DIR/summary.json): medians of per-round ratios and the issue's targets
"""
import collections
import glob
import json
import math
import os
import statistics
import sys

# dtype numbers of BM_MatmulFromDram's names (core/dtype.h, enum class DType)
DTYPES = ["f32", "f16", "bf16", "i32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]


def cmd_minfer(path):
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return
    for r in rows:
        print(r["test"], f"{r['avg_ts']:.4f}", f"{r['gbps']:.4f}" if r["n_gen"] else "na", r["bytes_per_step"],
              r["model_bytes"], r["device_name"].replace(" ", "_"))


def cmd_llama(path):
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        return
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        print(test, f"{r['avg_ts']:.4f}")


def cmd_ops(path):
    try:
        rows = json.load(open(path))["benchmarks"]
    except (OSError, ValueError, KeyError):
        return
    for r in rows:
        if r.get("run_type") == "aggregate":
            continue
        parts = r["name"].split("/")
        args = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
        layout = {"0": "file", "1": "packed"}.get(args.get("packed"), "-")
        print(f"{parts[0][3:]},{args['N']}x{args['K']},{DTYPES[int(args['dtype'])]},{layout}", args["threads"],
              f"{r['weight B/s'] / 1e9:.4f}")


def ops_f32(label):
    """The f32 row an ops row is compared with: the same benchmark, shape and threads (f32 runs the file's path)."""
    bench, shape, _, layout = label.split(",")
    return ",".join([bench, shape, "f32", "file" if layout != "-" else "-"])


def cmd_layers(b1, b2, target):
    per = int(b2) - int(b1)
    outside = int(b1) - per  # the embedding, the output matrix and the last norm
    print(min(1024, max(1, math.ceil((int(target) - outside) / per))))  # kMaxPresetLayers


# ---------------------------------------------------------------------------------------------- summary
def num(x):
    try:
        v = float(x)
        return v if v == v else None
    except (TypeError, ValueError):
        return None


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def ratio(a, b):
    return a / b if a is not None and b else None


def f(x, d=2):
    return "na" if x is None else f"{x:.{d}f}"


def met(x, goal):
    return "na" if x is None else ("yes" if x >= goal else "NO")


def cmd_summary(outdir):
    rows = list(__import__("csv").DictReader(open(os.path.join(outdir, "results.tsv")), delimiter="\t"))
    meta = dict(line.rstrip("\n").split("\t", 1) for line in open(os.path.join(outdir, "meta.tsv")))
    # key (kind, model, test) -> round -> engine -> row
    cells = collections.defaultdict(lambda: collections.defaultdict(dict))
    order, engines, isa = [], [], {}
    for r in rows:
        key = (r["kind"], r["model"], r["test"])
        if key not in order:
            order.append(key)
        if r["engine"] not in engines:
            engines.append(r["engine"])
        cells[key][int(r["round"])][r["engine"]] = r
        if r["isa"] not in ("", "na", "-"):
            isa[r["engine"]] = r["isa"].replace("_", " ")
    commits = {}  # each minfer binary's build_commit, as its bench records it
    for path in glob.glob(os.path.join(outdir, "logs", "*.json")):
        engine = os.path.basename(path)[:-len(".json")].split(".")[-1]
        try:
            commits.setdefault(engine, json.load(open(path))[0]["build_commit"])
        except (OSError, ValueError, LookupError, TypeError):
            pass
    # the speed step's engines: an ops-only engine (OPS_NEW_AVX2's new-avx2) gets no columns there
    speed_engines = [e for e in engines if any(k[0] == "speed" and e in cells[k][i] for k in order for i in cells[k])]
    pairs = [("new", "base")] + ([("new-avx2", "base-avx2")] if "new-avx2" in speed_engines else [])
    out, js = [], {"meta": meta, "speed": [], "dram": [], "ops": [], "greedy": {}, "targets": []}
    out.append(f"# Repacked weights (issue 57): {meta.get('cpu', '?')}, {meta.get('threads', '?')} threads\n")
    out.append(f"- base: `{meta.get('base')}`; new: `{meta.get('new')}`"
               + (f"; base-avx2: `{meta.get('base-avx2')}`; new-avx2: `{meta.get('new-avx2')}`" if "new-avx2" in speed_engines else "")
               + f"; llama.cpp: `{meta.get('llama')}`")
    out.append("- minfer's build commits: " + ", ".join(f"{e}: {commits[e]}" for e in engines if e in commits))
    out.append("- minfer's ISA as its bench names it: " + ", ".join(f"{e}: {isa[e]}" for e in engines if e in isa))
    out.append(f"- last cache (lscpu): {meta.get('l3_mib')} MiB; {meta.get('rounds')} interleaved rounds, each engine once "
               f"per round per file (order rotated), -r {meta.get('reps')} after one warm-up; {meta.get('date')}")
    loads = [num(r["load1"]) for r in rows if num(r["load1"]) is not None]
    if loads:
        out.append(f"- 1-minute load average before each measurement: min {min(loads):.2f}, median "
                   f"{statistics.median(loads):.2f}, max {max(loads):.2f} (a run of its own keeps it near {meta.get('threads', '?')}; "
                   "above that others shared the cores)")
    if meta.get("probe"):
        out.append(f"- streaming reads by working set (new's bench --roofline): {meta['probe']}")
    out.append("")

    def series(key, engine, field="tok_s"):
        return [num(cells[key][i].get(engine, {}).get(field)) for i in sorted(cells[key])]

    def per_round(key, a, b, field="tok_s"):
        if b == "llama.cpp":  # the better of its two OpenMP wait policies in the round
            best = [max([v for v in (x, y) if v is not None], default=None)
                    for x, y in zip(series(key, "llama.cpp"), series(key, "llama.cpp-passive"))]
            return [ratio(x, y) for x, y in zip(series(key, a, field), best)]
        return [ratio(x, y) for x, y in zip(series(key, a, field), series(key, b, field))]

    # ---- speed: per file and test
    speed = [k for k in order if k[0] == "speed"]
    if speed:
        out.append("## Prefill pp and decode tg, tok/s (medians), and medians of per-round ratios\n")
        out.append("llama.cpp: OpenMP's default wait; llama.cpp-passive: OMP_WAIT_POLICY=passive; a ratio to llama.cpp "
                   "takes the better of the two in each round.\n")
        head = "| file | test | " + " | ".join(speed_engines) + " | " + " | ".join(f"{a}/{b}" for a, b in pairs) + " | " \
               + " | ".join(f"{a}/llama.cpp" for a, _ in pairs) + " | decode GB/s " + " / ".join(a for a, _ in pairs) + " |"
        out.append(head)
        out.append("|---|---|" + "---:|" * (len(speed_engines) + 2 * len(pairs) + 1))
        for k in speed:
            m = {e: med(series(k, e)) for e in speed_engines}
            rb = {f"{a}/{b}": med(per_round(k, a, b)) for a, b in pairs}
            rl = {f"{a}/llama.cpp": med(per_round(k, a, "llama.cpp")) for a, _ in pairs}
            gb = {a: med(series(k, a, "gbps")) for a, _ in pairs}
            js["speed"].append({"file": k[1], "test": k[2], "tok_s": m, "ratios": {**rb, **rl}, "gbps": gb,
                                "per_round": {n: per_round(k, *n.split("/")) for n in list(rb) + list(rl)}})
            out.append(f"| {k[1]} | {k[2]} | " + " | ".join(f(m[e]) for e in speed_engines) + " | "
                       + " | ".join(f(v, 3) for v in rb.values()) + " | " + " | ".join(f(v, 3) for v in rl.values())
                       + " | " + " / ".join(f(v) for v in gb.values()) + " |")
        out.append("")

    # ---- dram: decode GB/s of presets and files against f32's at >= DRAM_X the last cache
    dram = [k for k in order if k[0] == "dram"]
    if dram:
        l3 = num(meta.get("l3_mib"))
        out.append(f"## Decode from DRAM: weight bytes per second against f32's (tg{meta.get('dram_gen')}; "
                   f"f32 on `{meta.get('f32_model')}`)\n")
        out.append("| model | engine | size / last cache | GB/s (median) | ratio to f32 (median of per-round) | per round |")
        out.append("|---|---|---:|---:|---:|---|")
        f32 = [k for k in dram if k[1] == "f32"]
        for k in dram:
            for e in [e for e in engines if e != "llama.cpp"]:
                g = series(k, e, "gbps")
                if all(x is None for x in g):
                    continue
                sizes = [num(cells[k][i].get(e, {}).get("model_bytes")) for i in sorted(cells[k])]
                size = med(sizes)
                xl3 = size / (l3 * 2**20) if size and l3 else None
                per = [ratio(x, y) for x, y in zip(g, series(f32[0], e, "gbps"))] if f32 else []
                js["dram"].append({"model": k[1], "engine": e, "x_last_cache": xl3, "gbps": med(g),
                                   "ratio_f32": med(per), "per_round": per})
                out.append(f"| {k[1]} | {e} | {f(xl3, 1)} | {f(med(g))} | {f(med(per), 3)} | "
                           + " ".join(f(x, 3) for x in per) + " |")
        # the files of the speed step, against the same binary's f32 (other rounds: a ratio of medians)
        for k in [k for k in speed if k[2].startswith("tg")]:
            for e in [e for e in engines if f32 and any(x is not None for x in series(f32[0], e, "gbps"))]:
                g, gf = med(series(k, e, "gbps")), med(series(f32[0], e, "gbps"))
                size = med([num(cells[k][i].get(e, {}).get("model_bytes")) for i in sorted(cells[k])])
                xl3 = size / (l3 * 2**20) if size and l3 else None
                js["dram"].append({"model": f"file {k[1]}", "engine": e, "x_last_cache": xl3, "gbps": g,
                                   "ratio_f32": ratio(g, gf), "per_round": []})
                out.append(f"| file {k[1]} ({k[2]}) | {e} | {f(xl3, 1)} | {f(g)} | {f(ratio(g, gf), 3)} (of medians) | |")
        out.append("")
        out.append("Preset rows: stories110M's shape, every matrix in the row's type, decoded in the same rounds as f32. "
                   "File rows: the speed step's decode, against the f32 preset's median (a file is several types; "
                   "files.tsv has its types and its size against the last cache, which serves part of a file under "
                   "several times its size).\n")

    # ---- ops: BM_MatmulFromDram
    ops = [k for k in order if k[0] == "ops"]
    if ops:
        out.append("## Microbenchmarks from DRAM, M=1 (weight GB/s; ratio to f32 of the same benchmark, shape and threads "
                   "(0: every core), median of per-round)\n")
        out.append("| benchmark | N x K | dtype | layout | threads | engine | GB/s | ratio to f32 |")
        out.append("|---|---|---|---|---:|---|---:|---:|")
        for k in ops:
            label, threads = k[1], k[2]
            for e in engines:
                g = series(k, e, "gbps")
                if all(x is None for x in g):
                    continue
                per = [ratio(x, y) for x, y in zip(g, series(("ops", ops_f32(label), threads), e, "gbps"))]
                js["ops"].append({"bench": label, "threads": threads, "engine": e, "gbps": med(g), "ratio_f32": med(per)})
                out.append("| " + " | ".join(label.split(",")) + f" | {threads} | {e} | {f(med(g))} | {f(med(per), 3)} |")
        out.append("")

    # ---- greedy shapes
    greedy = sorted(glob.glob(os.path.join(outdir, "greedy.*.json")))
    if greedy:
        out.append("## Greedy answers against the shape of the passes (bench/peers/greedy_shapes.py)\n")
        out.append("| file | binary | engine | one-by-one | chunks-16 | cached (of 32 that differ from the whole prompt's) |")
        out.append("|---|---|---|---:|---:|---:|")
        for path in greedy:
            g = json.load(open(path))
            binary = os.path.basename(path).split(".")[1]
            for name, v in g["engines"].items():
                c = v["changed"]
                js["greedy"].setdefault(g["model"], {})[f"{binary}: {name}"] = c
                out.append(f"| {g['model']} | {binary} | {name} | {c['one-by-one']} | {c['chunks-16']} | {c['cached']} |")
        out.append("")

    # ---- targets
    t = []
    for model, v in js["greedy"].items():
        c = v.get("new: minfer")
        if c is not None:
            n = max(c[s] for s in ("one-by-one", "chunks-16", "cached"))
            t.append((f"greedy_shapes {model}: 0 of 32 change by default (new)", f"{n} of 32 at most", met(-n, 0)))
    for s in js["speed"]:
        for a, b in pairs:
            x = s["ratios"].get(f"{a}/{b}")
            t.append((f"{s['test']} {s['file']}: {a} >= 1.0x {b}", f(x, 3), met(x, 1.0)))
        x = s["ratios"].get("new/llama.cpp")
        t.append((f"{s['test']} {s['file']}: new >= 1.2x llama.cpp", f(x, 3), met(x, 1.2)))
    for d in js["dram"]:
        if d["model"] != "f32" and not d["model"].startswith("file ") and d["engine"] in ("new", "new-avx2"):
            t.append((f"decode from DRAM {d['model']} ({d['engine']}): >= 0.9 of f32's bytes/s "
                      f"({f(d['x_last_cache'], 1)} times the last cache)", f(d["ratio_f32"], 3), met(d["ratio_f32"], 0.9)))
    if t:
        out.append("## Targets\n")
        out.append("| target | measured | met |")
        out.append("|---|---|---|")
        for name, value, ok in t:
            js["targets"].append({"target": name, "measured": value, "met": ok})
            out.append(f"| {name} | {value} | {ok} |")
        out.append("")
    text = "\n".join(out)
    open(os.path.join(outdir, "summary.md"), "w").write(text)
    json.dump(js, open(os.path.join(outdir, "summary.json"), "w"), indent=1)
    print(text)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    handlers = {"minfer": cmd_minfer, "llama": cmd_llama, "ops": cmd_ops, "layers": cmd_layers, "summary": cmd_summary}
    if cmd not in handlers:
        print(__doc__)
        return 2
    handlers[cmd](*args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
