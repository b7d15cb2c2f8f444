#!/usr/bin/env python3
"""What Hugging Face transformers computes from a real GGUF file: it reads the file itself
(from_pretrained(gguf_file=...), every tensor dequantized to float32) and runs the model in float32.
tests/test_real_models.cpp holds minfer with the same file's weights dequantized (--dtype f32) to
it: a check of the model's arithmetic on the real weights that neither side's quantized products
blur (llama.cpp's own figures differ from transformers' by up to 0.56 in log-probability on these
prompts). Run it by hand (never from `make test`) from a virtualenv with torch, transformers,
accelerate and gguf, after make_server_reference.py has written NAME.reference.json:

    /path/to/venv/bin/python tests/data/real_models/make_transformers_reference.py \\
        ~/.cache/minfer/models/gemma-3-270m-q4_k_m.gguf gemma3-q4_k_m

Writes NAME.transformers.json beside this script: for each prompt of NAME.reference.json (its ids),
the TOP_K most likely next tokens after it as [id, log-probability] pairs.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_K = 64


def main():
    path, name = os.path.expanduser(sys.argv[1]), sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32).eval()
    with open(os.path.join(HERE, name + ".reference.json"), encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    out = []
    with torch.inference_mode():
        for p in prompts:
            logits = model(torch.tensor([p["ids"]])).logits[0, -1].double()
            top = torch.log_softmax(logits, -1).topk(TOP_K)
            out.append({"ids": p["ids"], "top_logprobs": [[int(i), round(float(v), 6)]
                                                          for i, v in zip(top.indices, top.values)]})
    doc = {"model": os.path.basename(path), "transformers": transformers.__version__, "torch": torch.__version__,
           "prompts": out}
    target = os.path.join(HERE, name + ".transformers.json")
    with open(target + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(target + ".tmp", target)
    print(f"wrote {target}: {len(out)} prompts, transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
