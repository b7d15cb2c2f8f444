#!/usr/bin/env python3
"""Writes the model fixtures of tests/test_model_fixtures.cpp into tests/data/models/, with the
reference outputs of Hugging Face transformers. Run it by hand from a virtualenv that has torch,
transformers, safetensors, sentencepiece and numpy (never from `make test`):

    /path/to/venv/bin/python tests/data/make_model_fixtures.py --llama-cpp PATH/TO/llama.cpp \\
        [--llama-cpp-python /path/to/python-with-llama_cpp]

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

Five mixture-of-experts models (hidden 64, two layers but one, 8 experts whose matrices are 32 by
64: both dimensions of every expert matrix a multiple of 32, as Q8_0 rows need; untied classifier),
each of a family whose routing differs:

  qwen3moe  Qwen3MoeForCausalLM: qwen3's attention (4/2 heads of 32, q and k norms per head, theta
            1000000), top-3 of 8 experts (k not a power of two) whose weights are renormalized to sum
            to 1 (norm_topk_prob), moe_intermediate_size 32, the byte-level BPE tokenizer and 640 rows:
            a folder in f32, GGUF F32 and Q8_0 by the converter (qwen3moe). With --llama-cpp-python,
            both GGUF files also get llama.cpp's own outputs, as make_quant_model_fixtures.py's kq-
            files do (llamacpp_logits_N.f32, "llamacpp_greedy", "llamacpp_margins"): on the F32 file
            llama.cpp's greedy ids are the reference's at every step (its logits within NMSE 1.5e-6:
            its KV cache is f16), on the Q8_0 file (int8 activations) within NMSE 1e-3 to 4e-3.
  qwen3moe-dense1
            qwen3moe of 3 layers whose middle one is a dense MLP of intermediate_size 96
            (mlp_only_layers [1]): a folder in f32 only, as llama.cpp's converter cannot write it (it
            has no name for a dense layer's mlp.gate_proj in qwen3moe, nor a key for which layers are
            dense).
  olmoe     OlmoeForCausalLM: q and k norms over the whole projection (q 64 wide, k 32 with 4/2
            heads of 16), top-2 of 8 experts left unnormalized (norm_topk_prob false), expert width
            intermediate_size 32, theta 10000, the byte-level BPE tokenizer and 640 rows: a folder in
            f32, GGUF F32 by the converter (olmoe, attn_k_norm 32 wide). llama.cpp's own loader
            refuses that file: it wants attn_k_norm as wide as the hidden state, which holds only with
            as many KV heads as heads (AllenAI's OLMoE models have 16/16).
  mixtral   MixtralForCausalLM without a sliding window: mistral's attention (8/2 heads, theta
            1000000), top-2 of 8 experts always renormalized, expert width intermediate_size 32, the
            SentencePiece tokenizer: a folder in f32 (saved under Mixtral's names,
            block_sparse_moe.experts.N.w1 / w2 / w3), GGUF F32 by the converter (which writes it as a
            llama with expert tensors).
  qwen2moe  Qwen2MoeForCausalLM: q, k and v biases, 4/2 heads of 16, theta 1000000, top-3 of 8
            experts left unnormalized (norm_topk_prob false, Qwen2-MoE's default), moe_intermediate_size
            32, plus a shared expert of width 64 scaled by sigmoid(shared_expert_gate . x), the
            byte-level BPE tokenizer and 640 rows: a folder in f32, GGUF F32 by the converter
            (qwen2moe).

Their references run transformers' eager loop over the experts (experts_implementation "eager", as
the modeling files write it; its default grouped_mm gives the same logits within 2e-13). The
routers are drawn ROUTER_GAIN (4) times wider than the other matrices (router logits of standard
deviation about 4: the 3 experts chosen carry on average 76%, 16% and 5% of the probability), and a
seed must also keep every top-k choice clear of a tie: at every prompt position of every MoE layer
the k-th router logit leads the (k+1)-th by MIN_ROUTER_GAP (0.02), and at the greedy
continuations' positions by MIN_ROUTER_GAP_CONTINUATION (1e-3). reference.json then says the
smallest of each ("router_min_gap": {"prompts": .., "continuations": ..}). Seeds: qwen3moe 37,
qwen3moe-dense1 10, olmoe 27, mixtral 15, qwen2moe 22.

`--only NAME` builds one of them and leaves the others' files as they are.

Each folder gets reference.json: prompts (ids from the tokenizer), for each the greedy
continuation of transformers on the stored weights computed in float32 (plain argmax, no stop
token), the margin between the best and second-best logit at every step, and the logits of every
prompt position in prompt_logits_N.f32 (float32, positions x vocab). The weights are drawn large
enough that every greedy step's margin is clear; the script checks it and tries other seeds until
it is.

The Q8_0 GGUF files (llama2-q8_0.gguf, llama3-q8_0.gguf, qwen3moe-q8_0.gguf) are the converter's
--outtype q8_0. Their references are transformers on the weights read back from the GGUF file
itself and dequantized with the gguf package (q and k rows permuted back from llama.cpp's order in
a llama file; ffn_gate_exps | ffn_up_exps joined back into transformers' experts.gate_up_proj), so
they say what a correct Q8_0 implementation computes from that file. qwen3moe-q8_0's router gaps
are checked like the folder's (the seed search converts each candidate); its greedy margins are
not, as llama2-q8_0's are not (qwen3moe-q8_0's smallest is 0.042). The converter keeps
ffn_gate_inp (the router) and the norms in F32.
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
                          MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM, OlmoeConfig,
                          OlmoeForCausalLM, Qwen2Config, Phi3Config, Phi3ForCausalLM, Qwen2ForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
TOKENIZERS = os.path.join(HERE, "tokenizers")
PROMPTS = ["Once upon a time, there was a little girl", "The quick brown fox jumps over", "12 + 30 = 42"]
STEPS = 24
LLAMA_CPP = None
MIN_MARGIN = 0.05
LLAMA_CPP_PYTHON = None
# The mixture-of-experts fixtures: at every prompt position, in every MoE layer, the k-th largest
# router logit must exceed the (k+1)-th by this much, so that which experts a token goes to is not
# a near tie that rounding could flip (the fixture tests compare these positions' logits whole,
# within 1e-10 in f32, 5e-3 where a CPU Q8_0 product quantizes its activations to int8); at the
# greedy continuations' positions (where the tests compare decisive greedy steps only) by
# MIN_ROUTER_GAP_CONTINUATION, still a hundred times what f32 rounding moves a router logit.
MIN_ROUTER_GAP = 0.02
MIN_ROUTER_GAP_CONTINUATION = 1e-3
ROUTER_GAIN = 4.0


def init_weights(model, seed, gain, router_gain=None):
    """Draws every parameter from one generator, in named_parameters() order. A matrix (or a stack of
    expert matrices, E x rows x columns) is N(0, 1) x gain / sqrt(its input width); a router
    (mlp.gate.weight) uses router_gain instead, so that its logits are spread apart."""
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
                scale = router_gain if router_gain is not None and name.endswith(".mlp.gate.weight") else gain
                p.copy_(torch.randn(p.shape, generator=g) * (scale / p.shape[-1] ** 0.5))


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


def router_gap(model, refs):
    """The smallest gap between the k-th and (k+1)-th router logit (k = num_experts_per_tok) over
    every MoE layer, at the prompts' positions and at their greedy continuations' (each prompt fed
    with its 24 greedy tokens, as the fixture tests feed them), as {"prompts": .., "continuations":
    ..}; None for a model without experts."""
    k = getattr(model.config, "num_experts_per_tok", None)
    if k is None:
        return None
    gap = {"prompts": float("inf"), "continuations": float("inf")}
    with torch.inference_mode():
        for r in refs:
            out = model(torch.tensor([r["ids"] + r["greedy"]]), output_router_logits=True)
            assert out.router_logits, "no router logits"
            for layer in out.router_logits:
                top = torch.topk(layer.float().reshape(-1, layer.shape[-1]), k + 1, dim=-1).values
                gaps = top[:, k - 1] - top[:, k]
                n = len(r["ids"])
                gap["prompts"] = min(gap["prompts"], float(gaps[:n].min()))
                gap["continuations"] = min(gap["continuations"], float(gaps[n:].min()))
    return gap


def gap_clear(gap):
    return gap is None or (gap["prompts"] >= MIN_ROUTER_GAP and
                           gap["continuations"] >= MIN_ROUTER_GAP_CONTINUATION)


def gap_text(gap):
    return "" if gap is None else (f", smallest router top-k gap {gap['prompts']:.4f} at the prompts' positions, "
                                   f"{gap['continuations']:.4f} at the continuations'")


def save(folder, model, tokenizer_dir, refs, dtype_name, shards=1, tokenizer_class=None, gap=None):
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
    if gap is not None:  # mixture-of-experts models: router_gap() of the model the references ran
        doc["router_min_gap"] = {k: round(v, 6) for k, v in gap.items()}
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
    """The state dict of a GGUF file, dequantized, in Hugging Face's names and row order: q and k
    rows permuted back from llama.cpp's order for the llama architecture (the qwen ones keep
    Hugging Face's), and a mixture-of-experts layer's expert stacks put back as transformers holds
    them, experts.gate_up_proj = gate_exps | up_exps (E x 2 ff x hidden) and experts.down_proj."""
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    from gguf import GGUFReader, quants  # noqa: E402  (the converter's own gguf package)

    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate_inp": "mlp.gate",
             "ffn_down_exps": "mlp.experts.down_proj", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
             "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
             "ffn_gate_inp_shexp": "mlp.shared_expert_gate"}
    reader = GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    state, types, gate_up = {}, {}, {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        w = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        parts = t.name.split(".")
        if parts[0] == "blk":
            if parts[2] in ("ffn_gate_exps", "ffn_up_exps"):  # joined below, gate rows first
                gate_up.setdefault(parts[1], {})[parts[2]] = w
                types[f"model.layers.{parts[1]}.mlp.experts.{parts[2][4:-5]}_proj"] = t.tensor_type.name
                continue
            suffix = "" if names[parts[2]] == "mlp.experts.down_proj" else "." + parts[-1]
            name = f"model.layers.{parts[1]}.{names[parts[2]]}{suffix}"
            if parts[2] in ("attn_q", "attn_k") and arch == "llama":  # undo the permute (rotate-half -> interleaved)
                n = heads if parts[2] == "attn_q" else kv_heads
                w = w.reshape(n, w.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)
            if parts[2] == "ffn_gate_inp_shexp":  # stored as one row of hidden
                w = w.reshape(1, -1)
        else:
            name = names[parts[0]] + ".weight"
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
        types[name] = t.tensor_type.name
    for layer, pair in gate_up.items():
        w = np.concatenate([pair["ffn_gate_exps"], pair["ffn_up_exps"]], axis=1)
        state[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = torch.from_numpy(np.ascontiguousarray(w))
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


def llama_cpp_outputs(stem):
    """Adds llama.cpp's own outputs on STEM.gguf to STEM.reference.json, as make_quant_model_fixtures.py
    does for its kq- files (its --llama-cpp-logits mode, run under LLAMA_CPP_PYTHON)."""
    if LLAMA_CPP_PYTHON is not None:
        subprocess.run([LLAMA_CPP_PYTHON, os.path.join(HERE, "make_quant_model_fixtures.py"), "--llama-cpp-logits",
                        stem], check=True)


def q8_0_model(llama_cpp, folder, gguf, Model, config):
    """The converter's --outtype q8_0 of `folder` as `gguf`, and the model on its weights dequantized."""
    convert(llama_cpp, folder, gguf, "q8_0")
    state, types = gguf_weights(gguf, config)
    dequantized = Model(config).eval()
    dequantized.load_state_dict(state)
    return dequantized, types


def build(name, config_kwargs, tokenizer_name, variants, shards, llama_cpp, ggufs, q8_from,
          classes=(LlamaConfig, LlamaForCausalLM), tokenizer_class=None, prepare=None, router_gain=None,
          with_llama_cpp=False):
    Config, Model = classes
    tokenizer_dir = os.path.join(TOKENIZERS, tokenizer_name)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    # A mixture-of-experts model needs its router gaps clear too, which fewer seeds give: it tries
    # more. Its Q8_0 file's references must have clear router gaps as well (their greedy margins are
    # not checked, as llama2-q8_0's are not): Q8_0 moves the router logits by a few hundredths and
    # often changes a greedy continuation, so the file is made and checked for each candidate seed.
    for seed in range(1, 50 if router_gain is None else 2000):
        config = Config(**dict({"vocab_size": vocab}, **config_kwargs))
        model = Model(config).eval()
        init_weights(model, seed, gain=2.0, router_gain=router_gain)
        ok = True
        for dtype_name, dtype in variants:
            stored = stored_model(Model, config, model, dtype, prepare)
            refs = references(stored, tokenizer, vocab)
            if min(min(r["margins"]) for r in refs) < MIN_MARGIN:
                ok = False
                break
            gap = router_gap(stored, refs)
            if not gap_clear(gap):
                ok = False
                break
            if router_gain is not None and dtype_name == q8_from:
                tmp = os.path.join(OUT, f"{name}-q8_0.tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                save(tmp, stored.to(dtype), tokenizer_dir, refs, dtype_name, shards, tokenizer_class, gap)
                dequantized, _ = q8_0_model(llama_cpp, tmp, os.path.join(tmp, "q8_0.gguf"), Model, config)
                q8_gap = router_gap(dequantized, references(dequantized, tokenizer, vocab))
                shutil.rmtree(tmp)
                if not gap_clear(q8_gap):
                    print(f"{name}: seed {seed} is clear in {dtype_name} but not its q8_0 file{gap_text(q8_gap)}")
                    ok = False
                    break
        if ok:
            break
    else:
        raise SystemExit(f"{name}: no seed gives clear greedy margins" +
                         (" and router gaps" if router_gain is not None else ""))
    print(f"{name}: seed {seed}, vocab {vocab}")
    for dtype_name, dtype in variants:
        stored = stored_model(Model, config, model, dtype, prepare)
        refs = references(stored, tokenizer, vocab)
        gap = router_gap(stored, refs)
        print(f"{name}-{dtype_name}: smallest greedy margin {min(min(r['margins']) for r in refs):.3f}{gap_text(gap)}")
        folder = os.path.join(OUT, f"{name}-{dtype_name}")
        shutil.rmtree(folder, ignore_errors=True)
        save(folder, stored.to(dtype), tokenizer_dir, refs, dtype_name, shards, tokenizer_class, gap)
        for outtype, source in ggufs:
            if source == dtype_name:
                stem = os.path.join(OUT, f"{name}-{outtype}")
                convert(llama_cpp, folder, stem + ".gguf", outtype)
                if prepare is None:
                    copy_references(folder, stem)
                    if with_llama_cpp:
                        llama_cpp_outputs(stem)
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
            dequantized, types = q8_0_model(llama_cpp, folder, gguf, Model, config)
            quantized = sorted(n for n, t in types.items() if t == "Q8_0")
            print(f"{name}-q8_0.gguf: {len(quantized)} of {len(types)} tensors in Q8_0, the rest "
                  f"{sorted(set(t for t in types.values() if t != 'Q8_0'))}")
            assert quantized, "the converter wrote no Q8_0 tensor"
            refs = references(dequantized, tokenizer, vocab)
            margin = min(min(r["margins"]) for r in refs)
            gap = router_gap(dequantized, refs)
            print(f"{name}-q8_0.gguf: smallest greedy margin {margin:.3f}{gap_text(gap)}")
            if not gap_clear(gap):
                raise SystemExit(f"{name}-q8_0.gguf: router gap not clear on the dequantized weights")
            tmp = os.path.join(OUT, f"{name}-q8_0.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            save(tmp, dequantized, tokenizer_dir, refs, "q8_0", gap=gap)
            copy_references(tmp, os.path.join(OUT, f"{name}-q8_0"))
            shutil.rmtree(tmp)
            if with_llama_cpp:
                llama_cpp_outputs(os.path.join(OUT, f"{name}-q8_0"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="a llama.cpp source tree (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--only", choices=["llama2", "llama3", "qwen2", "mistral", "qwen3", "phi3", "gemma3", "qwen2-mqa",
                                       "phi3-gqa", "gemma3-w48", "qwen3moe", "qwen3moe-dense1", "olmoe", "mixtral",
                                       "qwen2moe"],
                    help="build this model's fixtures only")
    ap.add_argument("--llama-cpp-python", help="a Python that imports llama_cpp (llama-cpp-python): qwen3moe's GGUF "
                                               "files then also get llama.cpp's own outputs")
    a = ap.parse_args()
    global LLAMA_CPP, LLAMA_CPP_PYTHON
    LLAMA_CPP = a.llama_cpp
    LLAMA_CPP_PYTHON = a.llama_cpp_python
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
    # Mixture-of-experts models: 8 experts of width 32 (both dimensions of every expert matrix a
    # multiple of 32, as Q8_0 rows need), routers drawn ROUTER_GAIN times wider than the other matrices.
    moe = dict(common, intermediate_size=96, max_position_embeddings=128, tie_word_embeddings=False,
               experts_implementation="eager")  # transformers' loop over the experts, as its modeling files write it
    qwen3moe = dict(moe, num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0,
                    use_sliding_window=False, vocab_size=640, num_experts=8, num_experts_per_tok=3,
                    moe_intermediate_size=32, norm_topk_prob=True)
    if wanted("qwen3moe"):
        build("qwen3moe", qwen3moe, "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], "f32",
              classes=(Qwen3MoeConfig, Qwen3MoeForCausalLM), router_gain=ROUTER_GAIN, with_llama_cpp=True)
    if wanted("qwen3moe-dense1"):  # the converter cannot map a dense layer's mlp.gate_proj in qwen3moe: no GGUF
        build("qwen3moe-dense1", dict(qwen3moe, num_hidden_layers=3, mlp_only_layers=[1]), "llama3-bpe",
              [("f32", torch.float32)], 1, a.llama_cpp, [], None, classes=(Qwen3MoeConfig, Qwen3MoeForCausalLM),
              router_gain=ROUTER_GAIN)
    if wanted("olmoe"):
        build("olmoe", dict(moe, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
                            rope_theta=10000.0, pad_token_id=None, vocab_size=640, num_experts=8,
                            num_experts_per_tok=2, norm_topk_prob=False),
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(OlmoeConfig, OlmoeForCausalLM), router_gain=ROUTER_GAIN)
    if wanted("mixtral"):
        build("mixtral", dict(moe, intermediate_size=32, num_attention_heads=8, num_key_value_heads=2,
                              rope_theta=1000000.0, sliding_window=None, num_local_experts=8, num_experts_per_tok=2),
              "spm-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(MixtralConfig, MixtralForCausalLM), router_gain=ROUTER_GAIN)
    if wanted("qwen2moe"):
        build("qwen2moe", dict(moe, num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
                               use_sliding_window=False, vocab_size=640, num_experts=8, num_experts_per_tok=3,
                               moe_intermediate_size=32, shared_expert_intermediate_size=64, norm_topk_prob=False,
                               qkv_bias=True),
              "llama3-bpe", [("f32", torch.float32)], 1, a.llama_cpp, [("f32", "f32")], None,
              classes=(Qwen2MoeConfig, Qwen2MoeForCausalLM), router_gain=ROUTER_GAIN)


if __name__ == "__main__":
    main()
