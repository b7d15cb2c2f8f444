#!/usr/bin/env python3
"""Constrained decoding at batch 1: `minfer serve` and llama.cpp's llama-server on the same GGUF file,
the same JSON schema and the same prompts, each prompt asked unconstrained ("free") and under the
schema (response_format json_schema), one request at a time, streamed.

Each round starts a fresh server of each kind in turn (minfer, then llama-server: interleaved
rounds), and asks, after one unconstrained warm-up on the first prompt (which caches its blocks):
  - the compile probe: the first prompt under the schema twice. The second finds the prompt's blocks
    cached as the first did, and the compiled grammar too (minfer keeps compiled grammars across
    requests), so the difference of their times to the first token is the grammar's compile time;
    minfer's /metrics also says its compile time, its compiles and cache hits, and its mask time;
  - each prompt free and under the schema, the order alternating from prompt to prompt.
A request's decode rate is (completion tokens - 1) / (last token's time - first token's time); its
output rate is completion tokens / the whole request's time. A round's rate sums tokens and times
over its prompts; the tables give the medians of the rounds and of the per-round ratios.

  structured_compare.py GGUF OUTDIR [--rounds 3] [--kinds minfer,llama] [--threads 2]
      [--minfer PATH] [--llama PATH] [--minfer-args "..."] [--max-tokens 160]

Writes OUTDIR/requests.json (every request, with its answer and times), OUTDIR/summary.json,
OUTDIR/summary.csv, and each run's server log; prints the tables. Standard library only.
"""
import argparse
import csv
import http.client
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "email": {"type": "string", "maxLength": 60},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 1, "maxItems": 4},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                     "country": {"type": "string", "maxLength": 30}},
                    "required": ["city", "country"], "additionalProperties": False},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "skills", "address", "employed"],
    "additionalProperties": False,
}
SYSTEM = "You are a helpful assistant. You write JSON."
PROMPTS = [
    "Make up a profile of a software engineer from Brazil.",
    "Invent a person who works as a nurse in Canada and describe them.",
    "Describe a fictional retired teacher living in Japan.",
    "Create a profile for a data scientist based in Kenya.",
    "Write a made-up profile of a chef from Italy.",
    "Describe an imaginary student of physics in Germany.",
    "Invent a carpenter from Norway and give their details.",
    "Make up a graphic designer living in Mexico.",
]


def server_command(kind, args, port):
    if kind == "minfer":
        return [args.minfer, "serve", "-m", args.gguf, "--host", "127.0.0.1", "--port", str(port), "--slots", "1",
                "--ctx", "1024", "--threads", str(args.threads), "--kv-dtype", "f16", *shlex.split(args.minfer_args)]
    return [args.llama, "-m", args.gguf, "--host", "127.0.0.1", "--port", str(port), "-np", "1", "-c", "1024",
            "-t", str(args.threads), "-tb", str(args.threads), "--jinja", "--no-webui"]


def free_port():
    """A port nothing listens on now: a server started on a taken one would be mistaken for the
    one that answers there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(server, port):
    for _ in range(1200):
        if server.poll() is not None:
            return False
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def grammar_metrics(port):
    """minfer's /metrics lines about grammars and masks ({} from a server without them)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read().decode() if response.status == 200 else ""
    return {name: float(value) for name, value in (line.split() for line in text.splitlines()
                                                   if line.startswith(("minfer_grammar_", "minfer_mask")))}


def ask(port, prompt, constrained, max_tokens):
    """One streamed chat request: its times, tokens, finish_reason and text."""
    body = {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True}}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "profile", "schema": SCHEMA, "strict": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    sent = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:500]!r}")
    text, first, last, chunks, usage, timings, finish = "", None, None, 0, None, None, None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        usage = event.get("usage") or usage
        timings = event.get("timings") or timings
        for choice in event.get("choices", []):
            finish = choice.get("finish_reason") or finish
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                chunks += 1
                text += piece
    tokens = usage["completion_tokens"] if usage else (timings or {}).get("predicted_n", chunks)
    try:
        json.loads(text)
        parses = True
    except json.JSONDecodeError:
        parses = False
    return {"constrained": constrained, "prompt": prompt, "completion_tokens": tokens, "finish_reason": finish,
            "ttft_s": first - sent, "decode_s": last - first, "total_s": last - sent, "parses": parses,
            "content": text, "server_timings": timings}


def run_server(kind, round_index, args):
    """A fresh server: the warm-up, the compile probe and the prompts; returns its requests."""
    port = free_port()
    log_path = os.path.join(args.outdir, f"{kind}-r{round_index}.server.log")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(args.llama))
    with open(log_path, "w") as log:
        server = subprocess.Popen(server_command(kind, args, port), stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        if not wait_ready(server, port):
            sys.exit(f"{kind} did not start: {log_path}")
        load = os.getloadavg()[0]
        ask(port, PROMPTS[0], False, 16)  # the probe's prompt, cached for both of its requests
        probe = [dict(ask(port, PROMPTS[0], True, args.max_tokens), probe=i) for i in (0, 1)]
        probe[1]["metrics"] = grammar_metrics(port)
        requests = []
        for i, prompt in enumerate(PROMPTS):
            for constrained in ((False, True) if i % 2 == 0 else (True, False)):
                requests.append(ask(port, prompt, constrained, args.max_tokens))
        requests[-1]["metrics"] = grammar_metrics(port)
    finally:
        server.terminate()
        server.wait(timeout=60)
    for r in probe + requests:
        r.update(kind=kind, round=round_index, load_1min=load)
    return probe, requests


def rates(requests):
    tokens = sum(r["completion_tokens"] for r in requests)
    return {"decode_tok_s": sum(r["completion_tokens"] - 1 for r in requests) / sum(r["decode_s"] for r in requests),
            "output_tok_s": tokens / sum(r["total_s"] for r in requests),
            "ttft_median_ms": 1e3 * statistics.median(r["ttft_s"] for r in requests),
            "tokens": tokens, "parsed": sum(r["parses"] for r in requests), "answers": len(requests)}


def server_metrics(after_probe, at_end):
    """What minfer's /metrics says: the compiles and cache hits after the probe (1 and 1 when the
    repeat found the grammar compiled), the compile time, and the mask's time per masked token."""
    if "minfer_grammar_compiles_total" not in after_probe:
        return {}
    masked = at_end.get("minfer_masked_tokens_total", 0)
    return {"probe_compiles": after_probe["minfer_grammar_compiles_total"],
            "probe_cache_hits": after_probe["minfer_grammar_cache_hits_total"],
            "compile_ms": 1e3 * after_probe["minfer_grammar_compile_seconds_total"],
            "mask_ms_per_token": 1e3 * at_end.get("minfer_mask_seconds_total", 0) / masked if masked else None}


def summarize(runs, rounds, kinds):
    """Per round and kind: the rates free and constrained, and the compile probe."""
    rows = []
    for r in range(1, rounds + 1):
        for kind in kinds:
            probe, requests = runs[(kind, r)]
            for constrained in (False, True):
                row = {"round": r, "kind": kind, "mode": "schema" if constrained else "free",
                       **rates([q for q in requests if q["constrained"] == constrained])}
                if constrained:
                    row["probe_ttft_first_ms"] = 1e3 * probe[0]["ttft_s"]
                    row["probe_ttft_repeat_ms"] = 1e3 * probe[1]["ttft_s"]
                    row.update(server_metrics(probe[1]["metrics"], requests[-1]["metrics"]))
                rows.append(row)
    return rows


def print_tables(rows, rounds, kinds):
    def values(kind, mode, field):
        return [next(x[field] for x in rows if x["round"] == r and x["kind"] == kind and x["mode"] == mode)
                for r in range(1, rounds + 1)]

    def cell(xs, digits=1):
        return f"{statistics.median(xs):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in xs)})"

    print("| server | mode | decode tok/s | output tok/s | TTFT median ms | tokens | answers that parse |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        for mode in ("free", "schema"):
            print(f"| {kind} | {mode} | {cell(values(kind, mode, 'decode_tok_s'))} | "
                  f"{cell(values(kind, mode, 'output_tok_s'))} | {cell(values(kind, mode, 'ttft_median_ms'))} | "
                  f"{sum(values(kind, mode, 'tokens'))} | {sum(values(kind, mode, 'parsed'))} of "
                  f"{sum(values(kind, mode, 'answers'))} |")
    print()
    print("| ratio (median of the rounds' ratios) | decode tok/s | output tok/s |")
    print("| --- | --- | --- |")
    pairs = [(f"{k} schema / {k} free", (k, "schema"), (k, "free")) for k in kinds]
    if len(kinds) == 2:
        pairs.append((f"{kinds[0]} schema / {kinds[1]} schema", (kinds[0], "schema"), (kinds[1], "schema")))
    for label, a, b in pairs:
        ratio = {f: statistics.median(x / y for x, y in zip(values(*a, f), values(*b, f)))
                 for f in ("decode_tok_s", "output_tok_s")}
        print(f"| {label} | {ratio['decode_tok_s']:.2f}x | {ratio['output_tok_s']:.2f}x |")
    print()
    print("| server | first schema request's TTFT ms | the repeat's TTFT ms | difference ms | compile ms (server) "
          "| compiles, cache hits after the repeat | mask ms per token |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        first, repeat = values(kind, "schema", "probe_ttft_first_ms"), values(kind, "schema", "probe_ttft_repeat_ms")
        server = [next(x for x in rows if x["round"] == r and x["kind"] == kind and x["mode"] == "schema")
                  for r in range(1, rounds + 1)]
        said = "- | - | - |"
        if "compile_ms" in server[0]:
            counts = ", ".join(f"{x['probe_compiles']:.0f}+{x['probe_cache_hits']:.0f}" for x in server)
            said = (f"{cell([x['compile_ms'] for x in server])} | {counts} | "
                    f"{cell([x['mask_ms_per_token'] or 0 for x in server], 3)} |")
        print(f"| {kind} | {cell(first)} | {cell(repeat)} | {cell([a - b for a, b in zip(first, repeat)])} | {said}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf")
    parser.add_argument("outdir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="minfer,llama")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--minfer", default="/tmp/peers/minfer")
    parser.add_argument("--llama", default="/tmp/peers/llama.cpp-build/bin/llama-server")
    parser.add_argument("--minfer-args", default="")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    os.makedirs(args.outdir, exist_ok=True)
    print(f"gguf={args.gguf} threads={args.threads} rounds={args.rounds} prompts={len(PROMPTS)} "
          f"max_tokens={args.max_tokens} minfer={args.minfer} minfer-args={args.minfer_args!r} llama={args.llama}")
    runs = {}
    for r in range(1, args.rounds + 1):
        for kind in kinds:
            runs[(kind, r)] = run_server(kind, r, args)
            print(f"round {r} {kind} done (load {runs[(kind, r)][1][0]['load_1min']:.2f})", flush=True)
    rows = summarize(runs, args.rounds, kinds)
    with open(os.path.join(args.outdir, "requests.json"), "w") as f:
        json.dump({"schema": SCHEMA, "system": SYSTEM, "args": vars(args),
                   "requests": [q for probe, requests in runs.values() for q in probe + requests]}, f, indent=1)
    with open(os.path.join(args.outdir, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(args.outdir, "summary.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted({k for row in rows for k in row}))
        writer.writeheader()
        writer.writerows(rows)
    print_tables(rows, args.rounds, kinds)


if __name__ == "__main__":
    main()
