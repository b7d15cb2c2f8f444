#!/usr/bin/env python3
"""A PyTorch peer for minfer's bench: Hugging Face transformers' LlamaForCausalLM with the shape
of a minfer preset and random weights, timed on the same tests as `minfer bench`:
  tgN  N greedy tokens for each of B sequences from a one-token prompt, with a static KV cache
       (and CUDA Graphs through torch.compile(mode="reduce-overhead") when --mode compile);
  ppP  one forward pass over a P-token prompt (batch 1).
Each test runs once to warm up, then --reps times; the figure is the median tokens/s, all
sequences counted. Needs torch and transformers; without them it records why it was skipped.

  tools/torch_peer.py --preset llama-1b --dtype f16 --decode 128 --batch 1,8 --prefill 2048 \\
      --device cuda --json peer.json
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time

# The presets of model/presets.cpp: dim, hidden, layers, heads, kv heads, vocab, context.
PRESETS = {
    "tiny": (64, 172, 5, 8, 4, 512, 512),
    "stories15M": (288, 768, 6, 6, 6, 32000, 256),
    "stories110M": (768, 2048, 12, 12, 12, 32000, 1024),
    "llama-1b": (2048, 5632, 22, 32, 4, 32000, 2048),
    "llama-7b": (4096, 11008, 32, 32, 32, 32000, 4096),
}


def write(path, doc):
    """Whole or not at all: a temporary file renamed over the target."""
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(path + ".tmp", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama-1b", choices=sorted(PRESETS))
    ap.add_argument("--dtype", default="f16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--decode", type=int, default=128, help="tokens per sequence (tgN)")
    ap.add_argument("--batch", default="1,8", help="batch sizes of the decode test")
    ap.add_argument("--prefill", type=int, default=2048, help="prompt tokens of the prefill test (0: none)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    doc = {"model": "preset:" + a.preset, "dtype": a.dtype, "device": a.device, "mode": a.mode, "rows": []}
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        import transformers
    except ImportError as e:
        doc["skipped"] = f"torch or transformers not importable ({e})"
        print("peer skipped:", doc["skipped"])
        write(a.json, doc)
        return 0
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        doc["skipped"] = "torch sees no CUDA device"
        print("peer skipped:", doc["skipped"])
        write(a.json, doc)
        return 0
    doc["torch"] = torch.__version__
    doc["transformers"] = transformers.__version__
    dim, hidden, layers, heads, kv_heads, vocab, ctx = PRESETS[a.preset]
    config = LlamaConfig(hidden_size=dim, intermediate_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                         max_position_embeddings=max(ctx, a.prefill, a.decode + 1), rms_norm_eps=1e-5,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    torch.manual_seed(0)
    with torch.device(a.device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    if a.mode == "compile":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    def timed(fn):
        fn()
        sync()
        seconds = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            sync()
            seconds.append(time.perf_counter() - t0)
        return statistics.median(seconds)

    with torch.inference_mode():
        for batch in [int(b) for b in a.batch.split(",") if b]:
            if a.decode <= 0:
                break
            prompt = torch.ones((batch, 1), dtype=torch.long, device=a.device)

            def generate():
                model.generate(prompt, max_new_tokens=a.decode, min_new_tokens=a.decode, do_sample=False,
                               cache_implementation="static", pad_token_id=0)

            t = timed(generate)
            row = {"test": f"tg{a.decode}", "batch": batch, "tok_s": batch * a.decode / t}
            doc["rows"].append(row)
            print(f"peer {a.preset} {a.dtype} tg{a.decode} B={batch}: {row['tok_s']:.1f} tok/s", flush=True)
            write(a.json, doc)
        if a.prefill > 0:
            ids = torch.randint(3, vocab, (1, a.prefill), device=a.device)
            # Like minfer's prefill: keys and values cached, logits of the last position only.
            params = inspect.signature(LlamaForCausalLM.forward).parameters
            keep = {k: 1 for k in ("logits_to_keep", "num_logits_to_keep") if k in params}
            t = timed(lambda: model(ids, use_cache=True, **dict(list(keep.items())[:1])))
            row = {"test": f"pp{a.prefill}", "batch": 1, "tok_s": a.prefill / t}
            doc["rows"].append(row)
            print(f"peer {a.preset} {a.dtype} pp{a.prefill} B=1: {row['tok_s']:.1f} tok/s", flush=True)
    write(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
