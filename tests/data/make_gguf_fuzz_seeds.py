#!/usr/bin/env python3
"""Writes two small GGUF seeds for tests/fuzz/fuzz_gguf.cpp into tests/fuzz/corpus/gguf/: a
SentencePiece-style ("llama") and a byte-level BPE ("gpt2", pre "llama-bpe") vocabulary, each
with a few dozen tokens and no tensors, small enough for the fuzzer's 4 KiB inputs. Run by hand
with the gguf package (pip install gguf); make test only reads the output."""
import os

import gguf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "gguf")


def write(name, model, pre, tokens, types, scores=None, merges=None):
    path = os.path.join(OUT, name)
    w = gguf.GGUFWriter(path + ".tmp", "llama")
    w.add_tokenizer_model(model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)
    print(name, os.path.getsize(path), "bytes")


spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(0x20, 0x40)] + \
      ["\u2581", "\u2581H", "el", "lo", "\u2581Hel", "\u2581Hello", "\u2581w", "or", "ld", "\u2581world"]
spm_types = [2, 3, 3] + [6] * 32 + [1] * 10
write("vocab-llama.gguf", "llama", None, spm, spm_types, scores=[0.0] * 35 + [-float(i) for i in range(10)])

byte_level = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"] + \
             [chr(c) for c in range(0x21, 0x7f)] + ["\u0120", "\u0120w", "He", "ll", "Hell", "Hello", "or", "ld"]
bpe_types = [2, 3, 3] + [1] * (len(byte_level) - 3)
write("vocab-gpt2.gguf", "gpt2", "llama-bpe", byte_level, bpe_types,
      merges=["\u0120 w", "H e", "l l", "He ll", "Hell o", "o r", "l d"])
