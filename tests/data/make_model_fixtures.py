#!/usr/bin/env python3
"""Writes the model fixtures of tests/test_model_fixtures.cpp into tests/data/models/, with the
reference outputs of Hugging Face transformers. Run it by hand from a virtualenv that has torch,
transformers, safetensors, sentencepiece and numpy (never from `make test`):

    /path/to/venv/bin/python tests/data/make_model_fixtures.py --llama-cpp PATH/TO/llama.cpp

PATH/TO/llama.cpp is a llama.cpp source tree (the one inside llama-cpp-python's sdist works):
its convert_hf_to_gguf.py writes the GGUF fixtures, so that they are files llama.cpp's own
converter made. torch 2.15.0, transformers 5.25.0 and llama-cpp-python 0.3.36's source, from PyPI
(pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36), rewrite the
weights and GGUF files of phi3, llama3 and gemma3 byte for byte, and phi3's references too; llama3's
and gemma3's logits came out different in float32's last digits (NMSE about 2e-13, the same greedy
ids).

Ten tiny models (hidden 64 but one, two layers; Gemma 3 six), with the tokenizers of
tests/data/tokenizers/ (written by make_tokenizer_fixtures.py):

  llama2    SentencePiece BPE tokenizer, grouped-query attention 4/2, untied classifier,
            theta 10000: folders in f32, f16 and bf16, GGUF F32 and F16 by the converter.
  llama3    byte-level BPE tokenizer, multi-query attention 4/1 with head_dim 32 (not 64 / 4),
            theta 500000, Llama 3.1 rope scaling, tied embeddings: bf16 in two shards with an
            index, GGUF F16 by the converter (which stores the scaling as rope_freqs).
  qwen2     Qwen2ForCausalLM: q, k and v biases, grouped-query attention 4/2, theta 1000000,
            untied classifier, Llama 3's byte-level BPE tokenizer and a vocabulary padded to 640
            rows (transformers' Qwen2Tokenizer adds <|endoftext|> as id 637): a folder in f32, GGUF
            F32 by the converter (architecture qwen2, whose q and k rows stay in rotate-half order).

  mistral   MistralForCausalLM without a sliding window (v0.2 and later): Llama's layer under
            Mistral's name, 8/2 heads, theta 1000000, the SentencePiece tokenizer: a folder in f32,
            GGUF F32 by the converter (which writes it as a llama).

  qwen3     Qwen3ForCausalLM: an RMSNorm of every head of q and k, 4/2 heads of 32 (not 64 / 4),
            theta 1000000, tied embeddings, the byte-level BPE tokenizer and 640 rows as qwen2:
            a folder in f32, GGUF F32 by the converter (architecture qwen3).

  phi3      Phi3ForCausalLM: q | k | v in one qkv_proj and gate | up in one gate_up_proj, 4/4
            heads, a sliding window of 96 positions in a context of 128 (every layer; the prompts and
            their continuations stay inside it),
            the byte-level BPE tokenizer under GPT2Tokenizer's name (Phi-4's, which tells the
            converter to write it as one) and 640 rows: a folder in f32, GGUF F32 by the converter
            (phi3).

  gemma3    Gemma3ForCausalLM: q and k norms, post norms, GeGLU, embeddings scaled by sqrt(64), RMSNorm
            weights stored as w for x (1 + w), 6 layers of which the first 5 attend in a window of 8
            positions (the prompts and their continuations reach 34) rotating by base 10000, the 6th
            global by 1e6, 4/2 heads of 32 (query_pre_attn_scalar 32: GGUF does not store it, and
            llama.cpp scales by the head width), tied embeddings, the byte-level BPE tokenizer: a
            folder in f32, GGUF F32 by the converter (gemma3, which stores the norms as 1 + w).

Three more give each split and scale a shape that shows it, in the 16-bit types:

  qwen2-mqa   qwen2 with one KV head of 32 (not 64 / 4): a folder in bf16, GGUF F16 by the converter.
  phi3-gqa    phi3 with 4/2 heads, so that q | k | v are 64, 32 and 32 rows: a folder in f16, GGUF
              F16 by the converter.
  gemma3-w48  gemma3 of hidden 48, 4/2 heads of 16 (not 48 / 4; query_pre_attn_scalar 16),
              intermediate 96: folders in bf16 and f16, GGUF F16 by the converter. sqrt(48) =
              6.9282 is not exact in 16 bits, and transformers multiplies the embeddings by it
              rounded to the table's type (6.9375 in bf16, 6.9296875 in f16): the folders'
              references run in float32 with that rounded scale. llama.cpp scales by sqrt(48) in
              float32 whatever the type, and so does the GGUF file's reference, with the file's own
              norms (the converter adds Gemma's 1 in f16, rounding w + 1 again).

`--only NAME` builds one of them and leaves the others' files as they are.

Each folder gets reference.json: prompts (ids from the tokenizer), for each the greedy
continuation of transformers on the stored weights computed in float32 (plain argmax, no stop
token), the margin between the best and second-best logit at every step, and the logits of every
prompt position in prompt_logits_N.f32 (float32, positions x vocab). The weights are drawn large
enough that every greedy step's margin is clear; the script checks it and tries other seeds until
it is.

The Q8_0 GGUF files (llama2-q8_0.gguf, llama3-q8_0.gguf) are the converter's --outtype q8_0. Their
references are transformers on the weights read back from the GGUF file itself and dequantized
with the gguf package (q and k rows permuted back from llama.cpp's order), so they say what a
correct Q8_0 implementation computes from that file.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import (AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Phi3Config, Phi3ForCausalLM, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
TOKENIZERS = os.path.join(HERE, "tokenizers")
PROMPTS = ["Once upon a time, there was a little girl", "The quick brown fox jumps over", "12 + 30 = 42"]
STEPS = 24
LLAMA_CPP = None
MIN_MARGIN = 0.05


def init_weights(model, seed, gain):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (gain / p.shape[1] ** 0.5))


def references(model, tokenizer, vocab):
    """Greedy ids, margins and prompt logits for each prompt, in float32."""
    out = []
    with torch.inference_mode():
        for text in PROMPTS:
            ids = tokenizer(text)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].float()
            seq, greedy, margins = list(ids), [], []
            for _ in range(STEPS):
                last = model(torch.tensor([seq])).logits[0, -1].float()
                top = torch.topk(last, 2)
                margins.append(float(top.values[0] - top.values[1]))
                greedy.append(int(top.indices[0]))
                seq.append(greedy[-1])
            out.append({"text": text, "ids": ids, "greedy": greedy, "margins": margins,
                        "logits": logits.numpy().astype(np.float32)})
    return out


def save(folder, model, tokenizer_dir, refs, dtype_name, shards=1, tokenizer_class=None):
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, max_shard_size="1GB" if shards == 1 else "200KB")
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tokenizer_dir, f)):
            shutil.copy(os.path.join(tokenizer_dir, f), folder)
    if tokenizer_class is not None:  # the class a converter reads to choose how it writes the vocabulary
        path = os.path.join(folder, "tokenizer_config.json")
        with open(path) as f:
            tokenizer_config = json.load(f)
        tokenizer_config["tokenizer_class"] = tokenizer_class
        with open(path, "w") as f:
            json.dump(tokenizer_config, f)
    doc = {"dtype": dtype_name, "steps": STEPS, "prompts": []}
    for i, r in enumerate(refs):
        name = f"prompt_logits_{i}.f32"
        r["logits"].tofile(os.path.join(folder, name))
        doc["prompts"].append({"text": r["text"], "ids": r["ids"], "greedy": r["greedy"],
                               "margins": [round(m, 6) for m in r["margins"]], "logits_file": name})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(doc, f, indent=1)


def copy_references(folder, stem):
    """A folder's reference.json and prompt logits, as STEM.reference.json and STEM.prompt_logits_N.f32."""
    shutil.copy(os.path.join(folder, "reference.json"), f"{stem}.reference.json")
    for i in range(len(PROMPTS)):
        shutil.copy(os.path.join(folder, f"prompt_logits_{i}.f32"), f"{stem}.prompt_logits_{i}.f32")


GEMMA_NORMS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}


def gemma_norms_from_gguf(model, path):
    """Puts the RMSNorm weights of a Gemma 3 GGUF file into `model`: the converter stores w + 1 and
    adds the 1 in the checkpoint's type, so that a 16-bit w + 1 is rounded again (by up to half a
    16-bit step, 0.001 for f16 in [1.5, 2.5])."""
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    from gguf import GGUFReader  # noqa: E402  (the converter's own gguf package)

    params = dict(model.named_parameters())
    with torch.no_grad():
        for t in GGUFReader(path).tensors:
            parts = t.name.split(".")
            if parts[0] == "output_norm":
                name = "model.norm.weight"
            elif parts[0] == "blk" and parts[2] in GEMMA_NORMS:
                name = f"model.layers.{parts[1]}.{GEMMA_NORMS[parts[2]]}.weight"
            else:
                continue
            params[name].copy_(torch.from_numpy(np.array(t.data, dtype=np.float32)) - 1.0)


def gguf_weights(path, config):
    """The state dict of a llama GGUF file, dequantized, in Hugging Face's names and row order."""
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    from gguf import GGUFReader, quants  # noqa: E402  (the converter's own gguf package)

    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    state, types = {}, {}
    for t in GGUFReader(path).tensors:
        if t.name == "rope_freqs.weight":
            continue
        w = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        parts = t.name.split(".")
        if parts[0] == "blk":
            name = f"model.layers.{parts[1]}.{names[parts[2]]}.weight"
            if parts[2] in ("attn_q", "attn_k"):  # undo llama.cpp's permute (rotate-half -> interleaved)
                n = heads if parts[2] == "attn_q" else kv_heads
                w = w.reshape(n, w.shape[0] // n // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
        else:
            name = names[parts[0]] + ".weight"
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
        types[name] = t.tensor_type.name
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state, types


def convert(llama_cpp, folder, outfile, outtype):
    env = dict(os.environ, PYTHONPATH=os.path.join(llama_cpp, "gguf-py"))
    cmd = [sys.executable, os.path.join(HERE, "convert_with_llama_cpp.py"), llama_cpp, folder, "--outfile", outfile,
           "--outtype", outtype]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def stored_model(Model, config, model, dtype, prepare):
    """`model` as its folder stores it in `dtype`, computing in float32; prepare(stored, dtype), if
    given, sets what transformers derives from the stored type (Gemma 3's embedding scale)."""
    stored = Model(config).eval()
    stored.load_state_dict({k: v.to(dtype).float() for k, v in model.state_dict().items()})
    if prepare is not None:
        prepare(stored, dtype)
    return stored


def gemma_scale_in(stored, dtype):
    """Gemma 3's embeddings are multiplied by sqrt(hidden) rounded to the weights' type
    (Gemma3TextScaledWordEmbedding: embed_scale.to(weight.dtype)): in a model run in float32 on the
    stored weights that rounding would be lost, so it is put back."""
    embed = stored.model.embed_tokens
    with torch.no_grad():
        embed.embed_scale.fill_(float(embed.embed_scale.to(dtype).float()))


def build(name, config_kwargs, tokenizer_name, variants, shards, llama_cpp, ggufs, q8_from,
          classes=(LlamaConfig, LlamaForCausalLM), tokenizer_class=None, prepare=None):
    Config, Model = classes
    tokenizer_dir = os.path.join(TOKENIZERS, tokenizer_name)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    for seed in range(1, 50):
        config = Config(**dict({"vocab_size": vocab}, **config_kwargs))
        model = Model(config).eval()
        init_weights(model, seed, gain=2.0)
        ok = True
        for dtype_name, dtype in variants:
            stored = stored_model(Model, config, model, dtype, prepare)
            refs = references(stored, tokenizer, vocab)
            if min(min(r["margins"]) for r in refs) < MIN_MARGIN:
                ok = False
                break
        if ok:
            break
    else:
        raise SystemExit(f"{name}: no seed gives clear greedy margins")
    print(f"{name}: seed {seed}, vocab {vocab}")
    for dtype_name, dtype in variants:
        stored = stored_model(Model, config, model, dtype, prepare)
        refs = references(stored, tokenizer, vocab)
        folder = os.path.join(OUT, f"{name}-{dtype_name}")
        shutil.rmtree(folder, ignore_errors=True)
        save(folder, stored.to(dtype), tokenizer_dir, refs, dtype_name, shards, tokenizer_class)
        for outtype, source in ggufs:
            if source == dtype_name:
                stem = os.path.join(OUT, f"{name}-{outtype}")
                convert(llama_cpp, folder, stem + ".gguf", outtype)
                if prepare is None:
                    copy_references(folder, stem)
                else:  # llama.cpp derives nothing from the stored type (Gemma 3: sqrt(hidden) in float32)
                    plain = stored_model(Model, config, model, dtype, None)
                    gemma_norms_from_gguf(plain, stem + ".gguf")
                    plain_refs = references(plain, tokenizer, vocab)
                    margin = min(min(r["margins"]) for r in plain_refs)
                    if margin < MIN_MARGIN:
                        raise SystemExit(f"{name}-{outtype}.gguf: greedy margin {margin:.3f} as llama.cpp computes")
                    save(stem + ".tmp", plain, tokenizer_dir, plain_refs, dtype_name)
                    copy_references(stem + ".tmp", stem)
                    shutil.rmtree(stem + ".tmp")
        if dtype_name == q8_from:
            gguf = os.path.join(OUT, f"{name}-q8_0.gguf")
            convert(llama_cpp, folder, gguf, "q8_0")
            state, types = gguf_weights(gguf, config)
            quantized = sorted(n for n, t in types.items() if t == "Q8_0")
            print(f"{name}-q8_0.gguf: {len(quantized)} of {len(types)} tensors in Q8_0, the rest "
                  f"{sorted(set(t for t in types.values() if t != 'Q8_0'))}")
            assert quantized, "the converter wrote no Q8_0 tensor"
            dequantized = LlamaForCausalLM(config).eval()
            dequantized.load_state_dict(state)
            refs = references(dequantized, tokenizer, vocab)
            margin = min(min(r["margins"]) for r in refs)
            print(f"{name}-q8_0.gguf: smallest greedy margin {margin:.3f}")
            tmp = os.path.join(OUT, f"{name}-q8_0.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            save(tmp, dequantized, tokenizer_dir, refs, "q8_0")
            copy_references(tmp, os.path.join(OUT, f"{name}-q8_0"))
            shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="a llama.cpp source tree (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--only", choices=["llama2", "llama3", "qwen2", "mistral", "qwen3", "phi3", "gemma3", "qwen2-mqa",
                                       "phi3-gqa", "gemma3-w48"],
                    help="build this model's fixtures only")
    a = ap.parse_args()
    global LLAMA_CPP
    LLAMA_CPP = a.llama_cpp
    os.makedirs(OUT, exist_ok=True)
    common = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, rms_norm_eps=1e-5, hidden_act="silu",
                  bos_token_id=1, eos_token_id=2)
    wanted = lambda name: a.only in (None, name)  # noqa: E731
    if wanted("llama2"):
        build("llama2", dict(common, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             rope_theta=10000.0, tie_word_embeddings=False),
              "spm-bpe", [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)], 1, a.llama_cpp,
              [("f32", "f32"), ("f16", "f16")], "f32")
    if wanted("llama3"):
        build("llama3", dict(common, num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                             rope_theta=500000.0, tie_word_embeddings=True,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
              "llama3-bpe", [("bf16", torch.bfloat16)], 2, a.llama_cpp, [("f16", "bf16")], "bf16")
    if wanted("qwen2"):
        build("qwen2", dict(common, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                            rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
                            vocab_size=640),  # padded past the tokenizer, as Qwen's are
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(Qwen2Config, Qwen2ForCausalLM))
    if wanted("mistral"):
        build("mistral", dict(common, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
                              rope_theta=1000000.0, tie_word_embeddings=False, sliding_window=None),
              "spm-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(MistralConfig, MistralForCausalLM))
    if wanted("qwen3"):
        build("qwen3", dict(common, num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                            rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                            vocab_size=640),
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(Qwen3Config, Qwen3ForCausalLM))
    if wanted("phi3"):
        build("phi3", dict(common, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                           original_max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=False,
                           sliding_window=96, pad_token_id=0, vocab_size=640),
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(Phi3Config, Phi3ForCausalLM), tokenizer_class="GPT2Tokenizer")
    if wanted("gemma3"):
        gemma = {k: v for k, v in common.items() if k != "hidden_act"}  # Gemma's is hidden_activation
        build("gemma3", dict(gemma, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             query_pre_attn_scalar=32, sliding_window=8, max_position_embeddings=128,
                             tie_word_embeddings=True),
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(Gemma3TextConfig, Gemma3ForCausalLM))
    # The shapes that make each split and scale visible, in bf16 and f16.
    if wanted("qwen2-mqa"):
        build("qwen2-mqa", dict(common, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                                max_position_embeddings=128, rope_theta=1000000.0, tie_word_embeddings=False,
                                use_sliding_window=False, vocab_size=640),
              "llama3-bpe", [("bf16", torch.bfloat16)], 1, a.llama_cpp, [("f16", "bf16")], None,
              classes=(Qwen2Config, Qwen2ForCausalLM))
    if wanted("phi3-gqa"):
        build("phi3-gqa", dict(common, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                               original_max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=False,
                               sliding_window=96, pad_token_id=0, vocab_size=640),
              "llama3-bpe", [("f16", torch.float16)], 1, a.llama_cpp, [("f16", "f16")], None,
              classes=(Phi3Config, Phi3ForCausalLM), tokenizer_class="GPT2Tokenizer")
    if wanted("gemma3-w48"):
        gemma = {k: v for k, v in common.items() if k != "hidden_act"}
        build("gemma3-w48", dict(gemma, hidden_size=48, intermediate_size=96, num_hidden_layers=6,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                                 sliding_window=8, max_position_embeddings=128, tie_word_embeddings=True),
              "llama3-bpe", [("bf16", torch.bfloat16), ("f16", torch.float16)], 1, a.llama_cpp, [("f16", "f16")], None,
              classes=(Gemma3TextConfig, Gemma3ForCausalLM), prepare=gemma_scale_in)


if __name__ == "__main__":
    main()
