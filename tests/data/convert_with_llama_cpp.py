#!/usr/bin/env python3
"""Runs llama.cpp's own convert_hf_to_gguf.py on a fixture folder (make_model_fixtures.py calls
it). One thing is changed, and only for byte-level BPE tokenizers llama.cpp does not know: the
converter names a tokenizer's pre-tokenizer by hashing how it splits a test text, and refuses a
hash it has not seen. The fixtures' tokenizers are trained here, so their hash is new; they use
Llama 3's split pattern, and the converter is told so ("llama-bpe"). Everything else is the
converter as llama.cpp ships it.

Usage: convert_with_llama_cpp.py LLAMA_CPP_DIR MODEL_FOLDER [convert_hf_to_gguf.py arguments]
"""
import runpy
import sys

llama_cpp = sys.argv[1]
sys.path.insert(0, llama_cpp)
from conversion import base  # noqa: E402  (llama.cpp's conversion package)

original = base.TextModel.get_vocab_base_pre


def get_vocab_base_pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        return "llama-bpe"


base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = [f"{llama_cpp}/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(f"{llama_cpp}/convert_hf_to_gguf.py", run_name="__main__")
