#!/usr/bin/env python3
"""Speculative decoding, minfer against plain decoding and against llama.cpp, interleaved.

Every round runs each configuration once, in the same order (A B C ... A B C ...), and the table
gives each configuration's median decode tokens/s over the rounds and, for the ratios, the ratio
inside each round (so that a drift of the shared machine cancels). Greedy throughout.

    measure_speculative.py MINFER LLAMA_BIN TARGET.gguf DRAFT.gguf [ROUNDS=4] > table.md

TARGET.gguf is the f32 model, DRAFT.gguf its Q8_0 (llama-quantize); LLAMA_BIN holds llama.cpp's
llama-speculative and llama-lookup (bench/peers/setup.sh builds them). Prompts: free text, and a
copy-heavy one (a paragraph and the request to repeat it, measured to the model's stop token).
"""
import os
import re
import statistics
import subprocess
import sys

FREE = "Once upon a time, in a village by the sea,"
COPY = ("Repeat the text exactly.\n\nText: The lighthouse keeper climbed the hundred steps every evening at dusk. "
        "He cleaned the great lens, trimmed the wick, and wrote the weather in a small book with a green cover."
        "\n\nRepeat: ")


def minfer_rate(minfer, args):
    run = subprocess.run([minfer, "generate", "--temp", "0", *args], capture_output=True, text=True, check=True)
    return float(re.search(r"minfer: +eval time = [^\n]*?([0-9.]+) tokens per second", run.stderr).group(1))


def llama_rate(binary, args):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(binary))
    run = subprocess.run([binary, "--temp", "0", "-t", "2", "-c", "1024", *args], capture_output=True, text=True,
                         env=env, check=True)
    return float(re.search(r"decoded +\d+ tokens in +[0-9.]+ seconds, speed: +([0-9.]+) t/s", run.stderr).group(1))


def main():
    minfer, llama_bin, target, draft = sys.argv[1:5]
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    spec = os.path.join(llama_bin, "llama-speculative")
    lookup = os.path.join(llama_bin, "llama-lookup")
    free = ["-m", target, "-i", FREE, "-n", "128", "--ignore-eos"]
    copy = ["-m", target, "-i", COPY, "-n", "128"]
    configs = {
        "minfer plain, free text": lambda: minfer_rate(minfer, free),
        "minfer q8_0 draft k=3, free text": lambda: minfer_rate(minfer, free + ["--draft", draft, "--draft-k", "3"]),
        "minfer q8_0 draft k=4, free text": lambda: minfer_rate(minfer, free + ["--draft", draft, "--draft-k", "4"]),
        "minfer q8_0 draft k=6, free text": lambda: minfer_rate(minfer, free + ["--draft", draft, "--draft-k", "6"]),
        "llama.cpp q8_0 draft k=3, free text": lambda: llama_rate(spec, ["-m", target, "-md", draft, "-p", FREE, "-n", "128",
                                                                         "--ignore-eos", "-td", "2", "--spec-draft-n-max", "3"]),
        "llama.cpp q8_0 draft k=4, free text": lambda: llama_rate(spec, ["-m", target, "-md", draft, "-p", FREE, "-n", "128",
                                                                         "--ignore-eos", "-td", "2", "--spec-draft-n-max", "4"]),
        "minfer prompt lookup k=4, free text": lambda: minfer_rate(minfer, free + ["--draft", "ngram", "--draft-k", "4"]),
        "minfer plain, copying": lambda: minfer_rate(minfer, copy),
        "minfer prompt lookup k=8, copying": lambda: minfer_rate(minfer, copy + ["--draft", "ngram", "--draft-k", "8"]),
        "llama.cpp lookup k=8, copying": lambda: llama_rate(lookup, ["-m", target, "-p", COPY, "-n", "128",
                                                                     "--spec-draft-n-max", "8"]),
    }
    rates = {name: [] for name in configs}
    for r in range(rounds):
        for name, run in configs.items():
            rates[name].append(run())
        print(f"round {r + 1} of {rounds} done", file=sys.stderr)

    def ratio(a, b):
        per_round = [x / y for x, y in zip(rates[a], rates[b])]
        return f"{statistics.median(per_round):.2f}x ({', '.join(f'{x:.2f}' for x in per_round)})"

    print(f"| configuration | median tokens/s | rounds ({rounds}) |")
    print("| --- | --- | --- |")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print("\n| ratio (per round, median) | value |")
    print("| --- | --- |")
    for a, b in [("minfer q8_0 draft k=3, free text", "minfer plain, free text"),
                 ("minfer q8_0 draft k=4, free text", "minfer plain, free text"),
                 ("minfer q8_0 draft k=6, free text", "minfer plain, free text"),
                 ("minfer prompt lookup k=4, free text", "minfer plain, free text"),
                 ("minfer prompt lookup k=8, copying", "minfer plain, copying"),
                 ("minfer q8_0 draft k=3, free text", "llama.cpp q8_0 draft k=3, free text"),
                 ("minfer q8_0 draft k=4, free text", "llama.cpp q8_0 draft k=4, free text"),
                 ("minfer prompt lookup k=8, copying", "llama.cpp lookup k=8, copying")]:
        print(f"| {a} / {b} | {ratio(a, b)} |")


if __name__ == "__main__":
    main()
