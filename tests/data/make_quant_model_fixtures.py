#!/usr/bin/env python3
"""Writes the quantized model fixtures kq-*.gguf of tests/data/models/ (checked by
tests/test_model_fixtures.cpp): one tiny random Llama model quantized by llama.cpp's own
llama-quantize into the common presets, with what a correct implementation computes from each
file (transformers) and what llama.cpp itself computes from it. Run it by hand, never from
`make test`, from a virtualenv that has torch, transformers, safetensors, sentencepiece, numpy and
gguf (the one make_model_fixtures.py runs from):

    /path/to/venv/bin/python tests/data/make_quant_model_fixtures.py --llama-cpp PATH/TO/llama.cpp \\
        --quantize PATH/TO/llama-quantize --llama-cpp-python /path/to/other/venv/bin/python

  --llama-cpp         a llama.cpp source tree (the one inside llama-cpp-python's sdist works): its
                      convert_hf_to_gguf.py writes the F32 GGUF, its gguf-py reads the results back.
  --quantize          a built llama-quantize (its shared libraries beside it or on LD_LIBRARY_PATH:
                      the script adds the binary's folder to LD_LIBRARY_PATH).
  --llama-cpp-python  a Python that imports llama_cpp (llama-cpp-python); the script runs itself
                      under it with --llama-cpp-logits to record llama.cpp's outputs (that mode
                      needs only numpy and llama_cpp, not torch).

The model: hidden 256, intermediate 512, two layers, 4 heads / 2 kv heads (head_dim 64), theta
10000, untied classifier, with the SentencePiece tokenizer of the llama2 fixtures
(tests/data/tokenizers/spm-bpe, vocab 1003). Every matrix input width is a multiple of 256, so
the K-quants apply to every tensor (none falls back to a legacy type), and ffn_down's rows hold
two K-quant super-blocks. llama.cpp's converter writes it as an F32 GGUF (in a temporary folder,
not kept: 7 MB), which llama-quantize turns into kq-<preset>.gguf for the presets Q4_0, Q4_1,
Q5_0, Q5_1, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M and Q6_K. The presets mix types as llama.cpp chooses
(output.weight in Q6_K, some attn_v / ffn_down in a larger K-quant, ...): the script prints how
many tensors of each type every file holds.

For each file, kq-<preset>.reference.json and kq-<preset>.prompt_logits_N.f32, in the format of
make_model_fixtures.py ("dtype": the preset in lower case): transformers in float32 on the
weights read back from that GGUF and dequantized with the gguf package (gguf_weights()), so they
say what a correct implementation computes from the file. Each prompt also gets llama.cpp's own
outputs on the same file (llama-cpp-python, n_threads=2, logits_all=True):
kq-<preset>.llamacpp_logits_N.f32 (its logits at every prompt position, positions x vocab, after
one batched evaluation of the prompt), "llamacpp_greedy" and "llamacpp_margins" (its greedy
continuation fed its own tokens, and the margin between its best and second-best logit at each
step). The seed is the first whose greedy margins are clear (0.01) for every preset (as in
make_model_fixtures.py) and which leaves enough decisive steps for the CPU backend's limits.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
PRESETS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"]
CONFIG = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=False,
              rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2)
DECISIVE = 2.0       # the CPU backend's decisive greedy margin for quantized types (test_model_fixtures.cpp)
MIN_DECISIVE = 8     # steps of each prompt (of 24) whose margin must be at least DECISIVE
# Every greedy margin of every preset (9 x 3 prompts x 24 steps) must be at least this. Lower
# than make_model_fixtures.py's 0.05, which no seed of the first 40 meets in all nine presets at
# once, nor 0.02; the reference backend compares every step whose margin is 1e-3 or more, and
# f32 rounding moves these logits by about 1e-5, so 0.01 is still a thousand times clear.
MIN_MARGIN = 0.01


def tensor_types(path):
    """{type name: number of tensors} of a GGUF file."""
    from gguf import GGUFReader
    counts = {}
    for t in GGUFReader(path).tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


def quantize(binary, src, dst, preset):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(binary)) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    subprocess.run([binary, src, dst, preset, "2"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def write_reference(stem, preset, refs, types, seed):
    import numpy as np
    doc = {"dtype": preset.lower(), "steps": mmf.STEPS, "seed": seed, "tensor_types": types, "prompts": []}
    for i, r in enumerate(refs):
        name = f"prompt_logits_{i}.f32"
        r["logits"].astype(np.float32).tofile(f"{stem}.{name}")
        doc["prompts"].append({"text": r["text"], "ids": r["ids"], "greedy": r["greedy"],
                               "margins": [round(m, 6) for m in r["margins"]], "logits_file": name})
    with open(f"{stem}.reference.json", "w") as f:
        json.dump(doc, f, indent=1)


def build(a):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer_dir = os.path.join(mmf.TOKENIZERS, "spm-bpe")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), **CONFIG)
    tmp = tempfile.mkdtemp(prefix="kq-")
    for seed in range(a.seed, a.seed + 40):
        model = LlamaForCausalLM(config).eval()
        mmf.init_weights(model, seed, gain=a.gain)
        folder = os.path.join(tmp, "f32")
        mmf.save(folder, model, tokenizer_dir, mmf.references(model, tokenizer, config.vocab_size), "f32")
        f32 = os.path.join(tmp, "f32.gguf")
        mmf.convert(a.llama_cpp, folder, f32, "f32")
        results, ok = {}, True
        for preset in PRESETS:
            path = os.path.join(tmp, f"kq-{preset.lower()}.gguf")
            quantize(a.quantize, f32, path, preset)
            state, _ = mmf.gguf_weights(path, config)
            dequantized = LlamaForCausalLM(config).eval()
            dequantized.load_state_dict(state)
            refs = mmf.references(dequantized, tokenizer, config.vocab_size)
            smallest = min(min(r["margins"]) for r in refs)
            decisive = min(sum(m >= DECISIVE for m in r["margins"]) for r in refs)
            if smallest < MIN_MARGIN or decisive < MIN_DECISIVE:
                print(f"seed {seed}: {preset} smallest margin {smallest:.3f}, {decisive} decisive steps: next seed")
                ok = False
                break
            results[preset] = (path, refs, smallest)
        if ok:
            break
    else:
        raise SystemExit("no seed gives clear greedy margins for every preset")
    print(f"seed {seed}, gain {a.gain}, vocab {config.vocab_size}")
    for preset in PRESETS:
        path, refs, smallest = results[preset]
        stem = os.path.join(OUT, f"kq-{preset.lower()}")
        os.replace(path, stem + ".gguf")
        types = tensor_types(stem + ".gguf")
        write_reference(stem, preset, refs, types, seed)
        print(f"kq-{preset.lower()}.gguf: {os.path.getsize(stem + '.gguf')} bytes, tensors {types}, "
              f"smallest greedy margin {smallest:.3f}")
        subprocess.run([a.llama_cpp_python, os.path.abspath(__file__), "--llama-cpp-logits", stem], check=True)
    for f in os.listdir(tmp):
        if os.path.isfile(os.path.join(tmp, f)):
            os.remove(os.path.join(tmp, f))


def llama_cpp_logits(stem):
    """Adds llama.cpp's outputs on STEM.gguf to STEM.reference.json (run under llama-cpp-python)."""
    import numpy as np
    from llama_cpp import Llama

    with open(stem + ".reference.json") as f:
        doc = json.load(f)
    steps = doc["steps"]
    n_ctx = max(len(p["ids"]) for p in doc["prompts"]) + steps + 8
    llm = Llama(model_path=stem + ".gguf", n_ctx=n_ctx, n_threads=2, n_threads_batch=2, logits_all=True,
                verbose=False)
    name = os.path.basename(stem)
    for i, prompt in enumerate(doc["prompts"]):
        ids = llm.tokenize(prompt["text"].encode(), add_bos=True, special=False)
        if ids != prompt["ids"]:
            raise SystemExit(f"{name}: llama.cpp tokenizes {prompt['text']!r} as {ids}, not {prompt['ids']}")
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[:len(ids)], dtype=np.float32)
        file = f"llamacpp_logits_{i}.f32"
        logits.tofile(f"{stem}.{file}")
        greedy, margins = [], []
        for _ in range(steps):
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-last, kind="stable")[:2]
            margins.append(round(float(last[order[0]] - last[order[1]]), 6))
            greedy.append(int(order[0]))
            llm.eval([greedy[-1]])
        prompt["llamacpp_logits_file"] = file
        prompt["llamacpp_greedy"] = greedy
        prompt["llamacpp_margins"] = margins
        same = sum(g == w for g, w in zip(greedy, prompt["greedy"]))
        print(f"  llama.cpp on {name}, prompt {i}: greedy equal to the reference's at {same} of {steps} steps, "
              f"smallest margin {min(margins):.3f}")
    doc["llamacpp"] = {"n_threads": 2, "logits_all": True}
    with open(stem + ".reference.json", "w") as f:
        json.dump(doc, f, indent=1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--llama-cpp-logits":
        llama_cpp_logits(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, help="a llama.cpp source tree (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--quantize", required=True, help="llama.cpp's llama-quantize binary")
    ap.add_argument("--llama-cpp-python", required=True, help="a Python interpreter that imports llama_cpp")
    ap.add_argument("--seed", type=int, default=1, help="the first seed to try")
    ap.add_argument("--gain", type=float, default=2.0, help="scale of the random matrices")
    a = ap.parse_args()
    mmf.LLAMA_CPP = a.llama_cpp
    sys.path.insert(0, os.path.join(a.llama_cpp, "gguf-py"))
    os.makedirs(OUT, exist_ok=True)
    build(a)


if __name__ == "__main__":
    if not (len(sys.argv) == 3 and sys.argv[1] == "--llama-cpp-logits"):
        sys.path.insert(0, HERE)
        import make_model_fixtures as mmf  # noqa: E402  (init_weights, references, save, convert, gguf_weights)
    main()
