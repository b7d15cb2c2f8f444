#!/usr/bin/env python3
"""Helper for bench/peers/measure_quants.sh (run it with a Python that has gguf, numpy and
llama-cpp-python, e.g. /tmp/venv/bin/python). Subcommands:

  types FILE...                 size and tensor type counts of GGUF files (TSV: file, bytes, tensors, types)
  ts CSV                        the tokens/s of the last throughput row of a minfer bench or llama-bench CSV
                                (column avg_ts), or "na"
  mfppl JSON                    minfer perplexity -o json: "ppl kl_mean kl_p99 top1 base_ppl" (or na)
  lpppl LOG                     llama-perplexity --kl-divergence log: "ppl kl_mean kl_p99 top1 base_ppl"
  lptokens BASEFILE IDS         do the tokens llama-perplexity saved in its --kl-divergence-base file equal IDS?
  lpids BASEFILE                the tokens llama-perplexity saved in its --kl-divergence-base file, one a line
  lcppkl IDS CTX BASE FILE...   llama.cpp's PPL and KL through llama-cpp-python over the reference windows
                                (tests/data/real_models/make_smollm2_reference.py: windows of CTX tokens, the
                                first replaced by BOS, predictions CTX/2 .. CTX-2 scored), each FILE against
                                BASE in float64; prints TSV: file, ppl, kl_mean, kl_p99, top1, base_ppl
  summary TSV                   medians, per-round ratios and the issue's targets as markdown
"""
import collections
import csv
import math
import os
import re
import statistics
import sys


def cmd_types(files):
    from gguf import GGUFReader
    for f in files:
        r = GGUFReader(f)
        c = collections.Counter(t.tensor_type.name for t in r.tensors)
        types = ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
        print(f"{os.path.basename(f)}\t{os.path.getsize(f)}\t{len(r.tensors)}\t{types}")


def cmd_ts(path):
    try:
        rows = [r for r in csv.DictReader(open(path)) if r.get("avg_ts")]
        print(f"{float(rows[-1]['avg_ts']):.4f}")
    except Exception:
        print("na")


def cmd_mfppl(path):
    import json
    try:
        d = json.load(open(path))
        if isinstance(d, list):
            d = d[-1]
        print(f"{d['ppl']:.6f} {d.get('kl_mean', float('nan')):.6f} {d.get('kl_p99', float('nan')):.6f} "
              f"{d.get('top1_agreement', float('nan')):.6f} {d.get('base_ppl', float('nan')):.6f}")
    except Exception:
        print("na na na na na")


def cmd_lpppl(path):
    text = open(path, errors="replace").read()
    def grab(pattern, scale=1.0):
        m = re.search(pattern, text, re.M)
        return f"{float(m.group(1)) * scale:.6f}" if m else "na"
    ppl = grab(r"^Mean PPL\(Q\)\s*:\s*([0-9.eE+-]+)")
    if ppl == "na":
        ppl = grab(r"Final estimate: PPL = ([0-9.eE+-]+)")
    print(ppl, grab(r"^Mean\s+KLD:\s*([0-9.eE+-]+)"), grab(r"^99\.0%\s+KLD:\s*([0-9.eE+-]+)"),
          grab(r"^Same top p:\s*([0-9.eE+-]+)", 0.01), grab(r"^Mean PPL\(base\)\s*:\s*([0-9.eE+-]+)"))


def lp_tokens(base):
    """The tokens of a llama-perplexity --kl-divergence-base file, and its n_ctx and chunks."""
    import numpy as np
    with open(base, "rb") as f:
        assert f.read(8) == b"_logits_", "not a llama-perplexity logits file"
        n_ctx, n_vocab, n_chunk = np.frombuffer(f.read(12), dtype=np.int32)
        return np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype=np.int32).tolist(), n_ctx, n_chunk


def cmd_lpids(base):
    print("\n".join(map(str, lp_tokens(base)[0])))


def cmd_lptokens(base, ids_path):
    ids = [int(x) for x in open(ids_path).read().split()]
    toks, n_ctx, n_chunk = lp_tokens(base)
    same = toks == ids[:len(toks)]
    first = next((i for i, (a, b) in enumerate(zip(toks, ids)) if a != b), None)
    print(f"llama-perplexity tokens: {len(toks)} (n_ctx {n_ctx} x {n_chunk} chunks); "
          f"equal to the first {len(toks)} of {len(ids)} ids: {same}" + ("" if same else f" (first difference at {first})"))
    return 0 if same else 1


def cmd_lcppkl(ids_path, ctx, base, files):
    import llama_cpp
    import numpy as np
    ctx = int(ctx)
    ids = [int(x) for x in open(ids_path).read().split()]
    windows = len(ids) // ctx

    def logprobs(path):
        llm = llama_cpp.Llama(model_path=path, n_ctx=ctx, n_batch=ctx, n_threads=2, logits_all=True, verbose=False)
        bos = int(llm.metadata.get("tokenizer.ggml.bos_token_id", 1))
        out, targets = [], []
        for w in range(windows):
            window = ids[w * ctx:(w + 1) * ctx]
            window[0] = bos
            llm.reset()
            llm.eval(window)
            z = np.array(llm.scores[ctx // 2:ctx - 1], dtype=np.float64)
            m = z.max(axis=1, keepdims=True)
            out.append(z - (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True))))
            targets += window[ctx // 2 + 1:ctx]
        del llm
        return np.concatenate(out), np.array(targets)

    lb, t = logprobs(base)
    rows = np.arange(len(t))
    base_ppl = math.exp(-lb[rows, t].mean())
    pb = np.exp(lb)
    print(f"{os.path.basename(base)}\t{base_ppl:.6f}\t0\t0\t1\t{base_ppl:.6f}", flush=True)
    for f in files:
        lq, t2 = logprobs(f)
        assert (t2 == t).all()
        kl = np.maximum((pb * (lb - lq)).sum(axis=1), 0.0)
        top1 = float((lb.argmax(axis=1) == lq.argmax(axis=1)).mean())
        ppl = math.exp(-lq[rows, t].mean())
        print(f"{os.path.basename(f)}\t{ppl:.6f}\t{kl.mean():.6f}\t{np.percentile(kl, 99):.6f}\t{top1:.6f}\t{base_ppl:.6f}",
              flush=True)


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


def f2(x, d=2):
    return "na" if x is None else f"{x:.{d}f}"


def cmd_summary(path):
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    out = []
    # speed: kind in (decode, prefill); key (kind, model, qtype, threads) -> round -> engine -> value
    speed = collections.defaultdict(lambda: collections.defaultdict(dict))
    loads = collections.defaultdict(list)
    order = []
    for r in rows:
        if r["kind"] not in ("decode", "prefill"):
            continue
        key = (r["kind"], r["model"], r["qtype"], r["threads"])
        if key not in order:
            order.append(key)
        speed[key][int(r["round"])][r["engine"]] = num(r["value"])
        if num(r["load1"]) is not None:
            loads[r["kind"]].append(float(r["load1"]))
    medians = {}
    for kind, title in (("decode", "Decode tok/s (tg%s, batch 1)"), ("prefill", "Prefill tok/s (pp%s, batch 1)")):
        keys = [k for k in order if k[0] == kind]
        if not keys:
            continue
        n = {r["n"] for r in rows if r["kind"] == kind}
        out.append(f"### {title % '/'.join(sorted(n))}\n")
        if loads[kind]:
            lo = loads[kind]
            out.append(f"1-minute load average before each measurement: min {min(lo):.2f}, median {statistics.median(lo):.2f}, "
                       f"max {max(lo):.2f} (2 cores).\n")
        out.append("| model | type | threads | minfer | llama.cpp | ratio (median of per-round) | per-round ratios (minfer/llama.cpp) |")
        out.append("|---|---|---:|---:|---:|---:|---|")
        for k in keys:
            rounds = speed[k]
            mf = [rounds[i].get("minfer") for i in sorted(rounds)]
            lc = [rounds[i].get("llama.cpp") for i in sorted(rounds)]
            ratios = [a / b if a and b else None for a, b in zip(mf, lc)]
            medians[k] = (med(mf), med(lc), med(ratios), ratios, mf)
            out.append(f"| {k[1]} | {k[2]} | {k[3]} | {f2(med(mf))} | {f2(med(lc))} | {f2(med(ratios), 3)} | "
                       + " ".join(f2(x, 3) for x in ratios) + " |")
        out.append("")
    # targets
    if medians:
        out.append("### Targets\n")
        out.append("| target | threads | measured | met |")
        out.append("|---|---:|---|---|")
        for model in ("stories110M", "smollm2"):
            for q in ("Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K"):
                for t in ("1", "2"):
                    m = medians.get(("decode", model, q, t))
                    if m and m[2] is not None:
                        out.append(f"| decode {model} {q}: minfer >= 1.0x llama.cpp | {t} | {m[2]:.3f}x | "
                                   f"{'yes' if m[2] >= 1.0 else 'NO'} |")
        for t in ("1", "2"):
            a, b = medians.get(("decode", "stories110M", "Q4_K_M", t)), medians.get(("decode", "stories110M", "Q8_0", t))
            if a and b:
                per = [x / y if x and y else None for x, y in zip(a[4], b[4])]
                r = med(per)
                out.append(f"| decode stories110M: minfer Q4_K_M >= 1.6x minfer Q8_0 | {t} | {f2(r, 3)}x "
                           f"(medians {f2(a[0])} / {f2(b[0])}; per round {' '.join(f2(x, 3) for x in per)}) | "
                           f"{'yes' if r is not None and r >= 1.6 else 'NO'} |")
        for q, goal in (("Q4_K_M", 1.0), ("F32", 1.1)):
            for t in ("1", "2"):
                m = medians.get(("prefill", "stories110M", q, t))
                if m and m[2] is not None:
                    out.append(f"| prefill pp256 stories110M {q}: minfer >= {goal}x llama.cpp | {t} | {m[2]:.3f}x | "
                               f"{'yes' if m[2] >= goal else 'NO'} |")
        out.append("")
    # quality: kind quality, engine in (minfer, llama.cpp-python, minfer-nobos, llama-perplexity), metric, value
    q = collections.defaultdict(dict)
    qtypes = []
    for r in rows:
        if r["kind"] != "quality":
            continue
        q[(r["qtype"], r["engine"])][r["metric"]] = num(r["value"])
        if r["qtype"] not in qtypes:
            qtypes.append(r["qtype"])
    if q:
        for title, a, b in (("windows of 256 starting with BOS (the reference script's method)", "minfer", "llama-cpp-python"),
                            ("windows of 256 as the text runs, no BOS (llama-perplexity's method for this "
                             "model, whose add_bos_token is false)", "minfer-nobos", "llama-perplexity")):
            out.append(f"### SmolLM2 quality, {title}: {a} vs {b}\n")
            out.append(f"| type | KL {a} | KL {b} | KL ratio | within 5% | PPL {a} | PPL {b} | KL p99 {a} | KL p99 {b} | top-1 {a} | top-1 {b} |")
            out.append("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
            for t in qtypes:
                x, y = q.get((t, a), {}), q.get((t, b), {})
                if not x and not y:
                    continue
                ka, kb = x.get("kl_mean"), y.get("kl_mean")
                ratio = ka / kb if ka is not None and kb else None
                ok = "-" if t == "F32" else ("na" if ratio is None else ("yes" if abs(ratio - 1) <= 0.05 else "NO"))
                out.append(f"| {t} | {f2(ka, 5)} | {f2(kb, 5)} | {f2(ratio, 3)} | {ok} | {f2(x.get('ppl'), 4)} | "
                           f"{f2(y.get('ppl'), 4)} | {f2(x.get('kl_p99'), 4)} | {f2(y.get('kl_p99'), 4)} | "
                           f"{f2(x.get('top1'), 4)} | {f2(y.get('top1'), 4)} |")
            out.append("")
    print("\n".join(out))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "types":
        cmd_types(args)
    elif cmd == "ts":
        cmd_ts(args[0])
    elif cmd == "mfppl":
        cmd_mfppl(args[0])
    elif cmd == "lpppl":
        cmd_lpppl(args[0])
    elif cmd == "lptokens":
        return cmd_lptokens(args[0], args[1])
    elif cmd == "lpids":
        cmd_lpids(args[0])
    elif cmd == "lcppkl":
        cmd_lcppkl(args[0], args[1], args[2], args[3:])
    elif cmd == "summary":
        cmd_summary(args[0])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
