#!/usr/bin/env python3
"""Writes a random Qwen3-MoE checkpoint of a CPU-realistic shape (issue 56's peer comparison) as a
Hugging Face folder in bf16: hidden 1024, 8 layers, 16/4 heads of 64, 64 experts of width 512 of
which a token takes 4 (renormalised), vocabulary 640 with the byte-level BPE tokenizer of
tests/data/models/qwen3moe-f32. 828M parameters. Weights are normal with standard deviation
1/sqrt(fan_in), the routers 4 times that, norms 1; seed 56. Run it from a virtualenv with torch and
transformers (5.25.0 wrote bench/results/cpu-zen3/issue56-moe/), then convert and quantize with
llama.cpp's own tools:

    python bench/peers/make_moe_model.py OUT_DIR
    python tests/data/convert_with_llama_cpp.py LLAMA_CPP_TREE OUT_DIR --outfile moe-q8_0.gguf --outtype q8_0
    python tests/data/convert_with_llama_cpp.py LLAMA_CPP_TREE OUT_DIR --outfile moe-f16.gguf --outtype f16
    llama-quantize moe-f16.gguf moe-q4_k_m.gguf Q4_K_M
    bench/peers/measure_gguf_pair.sh moe-q8_0.gguf 3 256 128
"""
import math
import os
import shutil
import sys

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "models",
                         "qwen3moe-f32")


def main():
    out = sys.argv[1]
    torch.manual_seed(56)
    config = Qwen3MoeConfig(
        vocab_size=640, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=512, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=64, num_experts_per_tok=4,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=4096,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, hidden_act="silu",
        attention_bias=False)
    config.rope_parameters = {"rope_theta": 1e6, "rope_type": "default"}
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
                continue
            std = 1.0 / math.sqrt(p.shape[-1])
            if ".mlp.gate." in name:  # the router
                std *= 4.0
            p.normal_(0.0, std)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), out)
    print(sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()
