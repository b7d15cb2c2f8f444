#!/usr/bin/env python3
"""Writes the tokenizer fixtures of tests/test_text_tokenizer.cpp into tests/data/tokenizers/.

Run by hand with a Python that has tokenizers, transformers, sentencepiece and protobuf (never by
`make test`, which only reads what this wrote):

    /tmp/venv/bin/python tests/data/make_tokenizer_fixtures.py [--golden ../shared/golden]

Each fixture folder holds a tokenizer.json (and tokenizer_config.json where the family has one),
gguf_vocab.json (the same vocabulary as the GGUF metadata llama.cpp's converter would write) and
cases.json: for every test string the ids of the reference implementation without and with special
tokens, and the decoded text; for random id sequences the decoded text. The references:
  spm-bpe        sentencepiece itself (a BPE model trained here), and the tokenizers library on the
                 tokenizer.json that transformers converted from it, repaired where it disagreed;
  spm-metaspace  the tokenizers library on the same vocabulary with a Metaspace pre-tokenizer;
  llama3-bpe     the tokenizers library (a byte-level BPE trained here with Llama 3's pipeline);
  smollm-bpe     the tokenizers library (GPT-2 pipeline with individual digits, as SmolLM2);
  gpt2-bpe       the tokenizers library (GPT-2's pipeline), same vocabulary as smollm-bpe;
  added-tokens   the tokenizers library: added tokens with lstrip, rstrip and normalized flags;
  llama2         sentencepiece on a model rebuilt from llama2.c's tokenizer.bin (ids only: the
                 vocabulary is not copied; the C++ test reads the golden file).
The script checks transformers' AutoTokenizer against the add_special references too.

What it found with transformers 5.24 (it prints the counts): LlamaTokenizer.from_pretrained on the
sentencepiece model writes merges ordered by the merged piece's id, not its score (the -1e9
whitespace pieces placed after the byte pieces, as in Llama 2, then merge first), a Metaspace
pre-tokenizer with prepend_scheme "first" that adds no "▁" to a text starting with a space or "▁",
no unk_token, and a post-processor without BOS. spm-bpe's tokenizer.json is therefore repaired
(merges by score, Llama 2's Prepend/Replace normalizer, unk_token, BOS template) and must then
agree with sentencepiece on every string; spm-metaspace keeps the Metaspace form. Also,
tokenizer_config.json's add_bos_token / add_eos_token do not change transformers 5's encode: the
tokenizer.json's post-processor decides (llama3-bpe-eos records it).
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as spm_pb2
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, LlamaTokenizer
from transformers.tokenization_utils_base import generate_merges

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's regexes for tokenizer.ggml.pre = "default" (llm_tokenizer_bpe), applied one after another.
LLAMACPP_DEFAULT_PATTERNS = [r"[\p{P}\$\+<=>\^~\|]+",
                             r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                             r"\p{N}+", r"[0-9][0-9][0-9]"]


# --- the test strings --------------------------------------------------------------------------

def base_strings():
    s = [
        "", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n ", "  \n\n  ",
        "Hello world", "Hello, world!", "hello", " hello", "hello ", "  hello  world  ", "HELLO WORLD",
        "The quick brown fox jumps over the lazy dog.",
        "Once upon a time, there was a little girl named Lily. She loved to play in the park.",
        "I'm sure they're here; we've seen it, you'll see, he'd say it's fine.",
        "I'M SURE THEY'RE HERE; WE'VE SEEN IT, YOU'LL SEE, HE'D SAY IT'S FINE.",
        "don't can't won't shan't o'clock", "'s 'S 'ſ 'K", "rock 'n' roll", "''quoted''",
        "1", "12", "123", "1234", "1234567890", "3.14159", "x=1+22-333*4444/55555", "1,000,000.00",
        "in 2024 there were 365 days", "٣٤٥ ١٢", "²³ ½ ¼", "Ⅻ Ⅳ", "0x1F 0b1010",
        "café déjà vu naïve résumé", "cafe\u0301 decomposed", "ÀÉÎÕÜ àéîõü", "ǅ ǈ titlecase",
        "Ελληνικά γράμματα", "Привет, мир!", "नमस्ते दुनिया", "สวัสดีชาวโลก", "مرحبا بالعالم", "שלום עולם",
        "日本語のテキスト", "中文文本测试", "한국어 텍스트", "日本 語 mixed 中文 and English",
        "😀", "😀👍🏽🇫🇷", "👨\u200d👩\u200d👧 family", "emoji😀inside", "∑∫√∞ ≤ ≥ ≠", "┌─┐ box",
        "def f(x):\n\treturn x ** 2\n", "int main() {\n    return 0;\n}\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }", "if x:\n\tif y:\n\t\tpass\n",
        "\t\tindented with tabs", "a    b", "a \n b", "line one\r\nline two\r\n", "trailing newlines\n\n\n",
        "a\u00a0b", "a\u2009b", "a\u3000b", "a\u0085b", "a\u2028b", "a\u200bb", "a\u000bb\u000cc",
        "nul\u0000inside", "\u0001\u007f controls",
        "supercalifragilisticexpialidocious", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "!!!!!!", "...", "--- ***",
        "<html><body class=\"x\">text</body></html>", "http://example.com/path?q=1&r=2#frag",
        "email@example.com", "snake_case_name camelCaseName PascalCase", "$100 + €50 = ¥?",
        "▁ lower one eighth block ▁▁", "<0x41> looks like a byte piece", "Ġ looks like byte-level",
        "Mixed   spacing\tand\ttabs  \n end", "   leading and trailing   ",
    ]
    # Leading and trailing spaces on a few of them.
    for t in ["Hello world", "café", "日本語", "1234", "def f():", "😀", "it's"]:
        s += [" " + t, t + " ", "  " + t + "  ", "\n" + t]
    return s


def unicode_strings():
    """Every 331st code point assigned in this Python's Unicode (14.0, as PCRE2 10.42), between
    letters, digits, spaces and an apostrophe, for the pre-tokenizer regexes' character classes."""
    import unicodedata
    chars = [chr(cp) for cp in range(0x80, 0x30000, 331)
             if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")] + ["\u180e", "\u0085", "\u2028", "\ufeff", "ſ"]
    return ["".join(f"a{c} {c}{c}1{c}'s " for c in chars[i:i + 24]) for i in range(0, len(chars), 24)]


def special_strings(specials):
    a, b = specials[0], specials[-1]
    return [a, a + "Hello", "Hello" + b, "x" + a + "y", " " + a + " ", a + a, a + " " + b,
            "Hello " + a + " world " + b + "\n", a[:-1], a[1:], a + "日本", "😀" + b + "😀"]


def random_id_sequences(vocab_size, byte_ids, count=40, seed=7):
    rng = random.Random(seed)
    seqs = []
    for i in range(count):
        n = rng.randint(1, 12)
        pool = byte_ids if (byte_ids and i % 3 == 0) else None
        seqs.append([rng.choice(pool) if pool and rng.random() < 0.7 else rng.randrange(vocab_size)
                     for _ in range(n)])
    return seqs


# --- writing -----------------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def library_cases(tok, strings):
    cases = []
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({"text": text, "ids": ids, "ids_special": ids_special,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_special": tok.decode(ids_special, skip_special_tokens=False)})
    return cases


def compact(cases):
    """Leaves out what equals its default: decoded = text, decoded_special = decoded,
    ids_special = ids, ids_gguf = ids (the C++ test reads them so)."""
    for c in cases:
        if c.get("decoded") == c["text"]:
            del c["decoded"]
        if c.get("decoded_special") == c.get("decoded", c["text"]):
            del c["decoded_special"]
        if c.get("ids_special") == c.get("ids"):
            del c["ids_special"]
        if "ids" in c and c.get("ids_gguf") == c["ids"]:
            del c["ids_gguf"]
    return cases


def decode_cases(tok, seqs):
    return [{"ids": s, "text": tok.decode(s, skip_special_tokens=False)} for s in seqs]


def check_transformers(folder, cases):
    """AutoTokenizer (with tokenizer_config.json) must agree with the add_special references."""
    tok = AutoTokenizer.from_pretrained(folder)
    bad = [c["text"] for c in cases if tok.encode(c["text"]) != c["ids_special"]]
    if bad:
        sys.exit(f"{folder}: transformers' encode disagrees with the reference on {len(bad)} strings, "
                 f"e.g. {bad[0]!r}")


def gguf_from_hf(tok_json, model, pre, add_bos, add_eos=False):
    """The vocabulary as llama.cpp's convert_hf_to_gguf.py writes it for a byte-level BPE."""
    vocab = dict(tok_json["model"]["vocab"])
    for added in tok_json["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    types = [1] * len(tokens)
    bos = eos = -1
    for added in tok_json["added_tokens"]:
        types[added["id"]] = 3 if added["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]
    return {"model": model, "pre": pre, "tokens": tokens, "scores": [], "token_types": types, "merges": merges,
            "bos_id": bos, "eos_id": eos, "unknown_id": -1, "add_bos": add_bos, "add_eos": add_eos,
            "add_space_prefix": False}


# --- (i) SentencePiece-style BPE ---------------------------------------------------------------

def spm_corpus(rng):
    syll = ["ka", "to", "ri", "me", "su", "na", "lo", "pe", "qu", "an", "ing", "tion", "er", "st", "th", "ch",
            "ou", "ea", "ly", "ed"]
    words = ("the quick brown fox jumps over lazy dog once upon a time there was little girl named lily she "
             "loved to play in park with her friends hello world def return import class self print for while "
             "if else it's I'm they're").split()
    words += ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(600)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(6000)]
    lines += ["café déjà vu naïve résumé", "日本語のテキスト 中文", "x = 1234567890 + 42", "\tindent\n  two  spaces",
              "Привет мир", "    four spaces"] * 40
    return lines


def train_spm(workdir, rng):
    corpus = os.path.join(workdir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(spm_corpus(rng)))
    prefix = os.path.join(workdir, "trained")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=1000, model_type="bpe", byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        character_coverage=1.0, split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
        num_threads=1)
    proto = spm_pb2.ModelProto()
    with open(prefix + ".model", "rb") as f:
        proto.ParseFromString(f.read())
    # As in Llama 2's model: whitespace-run pieces right after the byte pieces, with score -1e9, so
    # that the order of ids and the order of scores disagree (merging must follow scores).
    pieces = list(proto.pieces)
    first_normal = next(i for i, p in enumerate(pieces) if p.type == 1)
    extra = []
    for run in ["▁▁", "▁▁▁▁", "▁▁▁"]:
        p = spm_pb2.ModelProto.SentencePiece(piece=run, score=-1e9, type=1)
        extra.append(p)
    del proto.pieces[:]
    proto.pieces.extend(pieces[:first_normal] + extra + pieces[first_normal:])
    path = os.path.join(workdir, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    return path, proto


def llamacpp_spm_reference(sp, specials, text):
    """llama.cpp's SPM encode: split out special tokens (longest first), each text fragment gets the
    dummy-prefix space and is encoded by sentencepiece (whose add_dummy_prefix does exactly that)."""
    fragments = [text] if text else []
    for sp_text, sp_id in sorted(specials, key=lambda t: -len(t[0])):
        out = []
        for frag in fragments:
            if not isinstance(frag, str):
                out.append(frag)
                continue
            parts = frag.split(sp_text)
            for k, part in enumerate(parts):
                if part:
                    out.append(part)
                if k + 1 < len(parts):
                    out.append(sp_id)
        fragments = out
    ids = []
    for frag in fragments:
        ids += sp.encode(frag) if isinstance(frag, str) else [frag]
    return ids


def make_spm(rng, strings):
    with tempfile.TemporaryDirectory() as work:
        model_path, proto = train_spm(work, rng)
        sp = spm.SentencePieceProcessor(model_file=model_path)
        folder = os.path.join(work, "hf")
        os.makedirs(folder)
        shutil.copy(model_path, os.path.join(folder, "tokenizer.model"))
        converted = LlamaTokenizer.from_pretrained(folder)
        converted.save_pretrained(os.path.join(work, "converted"))
        with open(os.path.join(work, "converted", "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)

    specials = [("<unk>", 0), ("<s>", 1), ("</s>", 2)]
    plain = [t for t in strings if not any(s in t for s, _ in specials)]

    def disagreements(tok):
        return [t for t in plain if tok.encode(t, add_special_tokens=False).ids != sp.encode(t)]

    notes = []
    as_converted = disagreements(Tokenizer.from_str(json.dumps(tj)))
    notes.append(f"transformers' conversion as written: {len(as_converted)} of {len(plain)} strings disagree "
                 f"with sentencepiece, e.g. {as_converted[:3]!r}")
    # Repair 1: merges ordered by the merged piece's score, as sentencepiece merges (the conversion
    # orders them by id, which Llama 2's -1e9 whitespace pieces contradict).
    vocab = tj["model"]["vocab"]
    scores = {p.piece: p.score for p in proto.pieces}
    merges = generate_merges(vocab, {piece: scores[piece] for piece in vocab})
    tj["model"]["merges"] = [[a, b] for a, b in merges]
    after_merges = disagreements(Tokenizer.from_str(json.dumps(tj)))
    fixed = [t for t in as_converted if t not in after_merges]
    notes.append(f"with merges ordered by score: {len(after_merges)} disagree, each starting with white space or "
                 f"'▁' (Metaspace adds no '▁' there): {all(t[:1].isspace() or t[:1] == '▁' for t in after_merges)}; "
                 f"the order fixed {fixed!r}")
    notes.append(f"the conversion also wrote unk_token {tj['model']['unk_token']!r} and a post-processor "
                 f"without BOS: {json.dumps(tj['post_processor']['single'])}")
    metaspace = json.loads(json.dumps(tj))
    # Repair 2: Llama 2's own tokenizer.json form (a Prepend + Replace normalizer, no pre-tokenizer);
    # the converted Metaspace(prepend_scheme "first") adds no "▁" to a text that starts with a space.
    tj["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    tj["pre_tokenizer"] = None
    tj["model"]["unk_token"] = "<unk>"
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    tok = Tokenizer.from_str(json.dumps(tj))
    still = disagreements(tok)
    if still:
        sys.exit(f"spm-bpe: the repaired tokenizer.json still disagrees with sentencepiece on {still!r}")
    notes.append("with Llama 2's Prepend/Replace normalizer too: all agree")

    all_strings = strings + special_strings(["<s>", "</s>"]) + ["<unk>", "a<unk>b"]
    cases = library_cases(tok, all_strings)
    for c in cases:  # sentencepiece (per fragment between special tokens) is the reference too
        expected = llamacpp_spm_reference(sp, specials, c["text"])
        if c["ids"] != expected:
            sys.exit(f"spm-bpe: tokenizers {c['ids']} != sentencepiece {expected} for {c['text']!r}")
        c["ids_gguf"] = expected
    byte_ids = [i for i, p in enumerate(proto.pieces) if p.type == 6]
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "tokenizer_class": "PreTrainedTokenizerFast",
              "clean_up_tokenization_spaces": False}
    gguf = {"model": "llama", "pre": "default", "tokens": [p.piece for p in proto.pieces],
            "scores": [p.score for p in proto.pieces], "token_types": [p.type for p in proto.pieces],
            "merges": [], "bos_id": 1, "eos_id": 2, "unknown_id": 0, "add_bos": True, "add_eos": False,
            "add_space_prefix": True}
    seqs = random_id_sequences(len(proto.pieces), byte_ids)
    write_fixture("spm-bpe", tj, config, gguf, cases, decode_cases(tok, seqs))

    # The same vocabulary behind the Metaspace pre-tokenizer and decoder transformers wrote.
    metaspace["model"]["unk_token"] = "<unk>"
    metaspace["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    mtok = Tokenizer.from_str(json.dumps(metaspace))
    write_fixture("spm-metaspace", metaspace, None, None, library_cases(mtok, all_strings),
                  decode_cases(mtok, seqs))
    return notes


# --- (ii), (iii) byte-level BPE ----------------------------------------------------------------

def bytelevel_corpus(rng):
    words = ("the of and to in is was for that with as on it by at this from be are have not or but an "
             "they you we he she it's I'm don't can't won't we've they're hello world story code function "
             "return value number print while true false import class def self main int char void").split()
    snippets = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < 10; ++i) {\n\tsum += i;\n}\n",
                "if (a && b) { return 1; }", "x = [1, 2, 3]\n", "café déjà vu", "日本語のテキスト", "中文文本",
                "Привет мир", "😀 emoji 👍", "The year 2024 had 366 days.", "Call 555-1234 now!",
                "<html><body>hi</body></html>", "   indented\n\n", "path/to/file.txt", "a\tb\tc"]
    lines = []
    for _ in range(5000):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14)))
        if rng.random() < 0.3:
            line += " " + rng.choice(snippets)
        if rng.random() < 0.2:
            line = line.capitalize() + "."
        lines.append(line)
    return lines


def train_bytelevel(rng, pre_tokenizer, special_tokens):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(bytelevel_corpus(rng), trainer)
    return tok


def make_llama3(rng, strings):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = train_bytelevel(rng, pre, [])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
    tok.add_special_tokens(specials)  # after the trained vocabulary, as in Llama 3
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tj = json.loads(tok.to_str())
    tj["model"]["ignore_merges"] = True  # as Llama 3's tokenizer.json
    tok = Tokenizer.from_str(json.dumps(tj))
    all_strings = strings + special_strings(["<|begin_of_text|>", "<|end_of_text|>"]) + [
        "<|eot_id|>", "a<|reserved_special_token_0|>b", "<|begin_of_text|><|eot_id|>"] + unicode_strings()
    cases = library_cases(tok, all_strings)
    for c in cases:
        c["ids_gguf"] = c["ids"]
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True}
    gguf = gguf_from_hf(tj, "gpt2", "llama-bpe", add_bos=True)
    gguf["bos_id"], gguf["eos_id"] = bos, tok.token_to_id("<|end_of_text|>")
    gguf["eot_ids"] = [tok.token_to_id("<|eot_id|>")]
    write_fixture("llama3-bpe", tj, config, gguf, cases, decode_cases(tok, random_id_sequences(tok.get_vocab_size(), [])))

    # tokenizer_config.json's add_bos_token/add_eos_token rebuild the post-processor in transformers.
    variant = os.path.join(OUT, "llama3-bpe-eos")
    config_eos = dict(config, add_eos_token=True)
    tj_eos = json.loads(json.dumps(tj))
    os.makedirs(variant, exist_ok=True)
    write_json(os.path.join(variant, "tokenizer.json"), tj_eos)
    write_json(os.path.join(variant, "tokenizer_config.json"), config_eos)
    hf = AutoTokenizer.from_pretrained(variant)
    eos_cases = [{"text": t, "ids_special": hf.encode(t)} for t in all_strings[:40]]
    write_json(os.path.join(variant, "cases.json"), {"cases": eos_cases, "decode": []})
    return tok


def make_smollm(rng, strings):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = train_bytelevel(rng, pre, specials)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tj = json.loads(tok.to_str())
    tj["model"]["merges"] = [" ".join(m) for m in tj["model"]["merges"]]  # GPT-2's older "a b" form
    tok = Tokenizer.from_str(json.dumps(tj))
    all_strings = strings + special_strings(["<|im_start|>", "<|im_end|>"]) + ["<|endoftext|>", "a<|endoftext|>b"]
    cases = library_cases(tok, all_strings)
    for c in cases:
        c["ids_gguf"] = c["ids"]
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    gguf = gguf_from_hf(tj, "gpt2", "smollm", add_bos=False)
    gguf["bos_id"] = gguf["eos_id"] = tok.token_to_id("<|endoftext|>")
    seqs = random_id_sequences(tok.get_vocab_size(), [])
    write_fixture("smollm-bpe", tj, config, gguf, cases, decode_cases(tok, seqs))

    # GPT-2's pipeline (no digit split) on the same vocabulary; and llama.cpp's "default" regexes,
    # whose reference is the tokenizers library running them as Split pre-tokenizers.
    gpt2 = json.loads(json.dumps(tj))
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    gtok = Tokenizer.from_str(json.dumps(gpt2))
    gcases = library_cases(gtok, all_strings + unicode_strings())
    dtok = Tokenizer.from_str(json.dumps(gpt2))
    dtok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in LLAMACPP_DEFAULT_PATTERNS] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    for c in gcases:
        c["ids_gguf"] = c["ids"]
        c["ids_gguf_default"] = dtok.encode(c["text"], add_special_tokens=False).ids
    ggguf = gguf_from_hf(gpt2, "gpt2", "gpt-2", add_bos=False)
    ggguf["bos_id"] = ggguf["eos_id"] = tok.token_to_id("<|endoftext|>")
    write_fixture("gpt2-bpe", gpt2, None, ggguf, gcases, [])


def make_added_tokens(strings):
    """Added tokens with the flags the tokenizers library honours: lstrip, rstrip, normalized."""
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    vocab = {c: i for i, c in enumerate(sorted(vocab))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.normalizer = normalizers.Sequence([normalizers.Replace("ß", "ss")])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                            AddedToken("<sep>", rstrip=True, special=True),
                            AddedToken("<pad>", special=True)])
    tok.add_tokens([AddedToken("strasse", normalized=True, special=False),
                    AddedToken("raw word", normalized=False, special=False),
                    AddedToken("<pa", special=False, normalized=False)])
    texts = ["a <mask> b", "a  <mask>  b", "<mask>", " <mask>", "x<sep>  y", "<sep>\n\nz", "<pad><mask><sep>",
             "Straße strasse", "straße", "a raw word here", "raw  word", "<pa <pad> <pa>", "<pad", "ß<mask>ß",
             "\t<mask>\t<sep>\t"] + strings[:20]
    tj = json.loads(tok.to_str())
    write_fixture("added-tokens", tj, None, None, library_cases(tok, texts), [])


# --- Llama 2's vocabulary, from llama2.c's tokenizer.bin ---------------------------------------

def make_llama2(golden, strings):
    path = os.path.join(golden, "tokenizer.bin")
    if not os.path.exists(path):
        print(f"note: {path} is absent; the llama2 reference ids are not rewritten")
        return
    data = open(path, "rb").read()
    offset, pieces, scores = 4, [], []
    while offset < len(data):
        score, length = struct.unpack_from("<fi", data, offset)
        offset += 8
        pieces.append(data[offset:offset + length].decode("utf-8"))
        scores.append(score)
        offset += length
    proto = spm_pb2.ModelProto()
    proto.trainer_spec.model_type = spm_pb2.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id, proto.trainer_spec.pad_id = 0, 1, 2, -1
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    for i, (piece, score) in enumerate(zip(pieces, scores)):
        kind = 2 if i == 0 else 3 if i in (1, 2) else 6 if 3 <= i < 259 else 1
        text = {0: "<unk>", 1: "<s>", 2: "</s>"}.get(i, piece.replace(" ", "▁"))
        proto.pieces.append(spm_pb2.ModelProto.SentencePiece(piece=text, score=score, type=kind))
    sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    specials = [("<unk>", 0), ("<s>", 1), ("</s>", 2)]
    all_strings = strings + special_strings(["<s>", "</s>"])
    cases = [{"text": t, "ids_gguf": llamacpp_spm_reference(sp, specials, t)} for t in all_strings]
    os.makedirs(os.path.join(OUT, "llama2"), exist_ok=True)
    write_json(os.path.join(OUT, "llama2", "cases.json"), {"cases": cases, "decode": []})


def write_fixture(name, tokenizer_json, config, gguf, cases, decodes):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "tokenizer.json"), tokenizer_json)
    if config is not None:
        write_json(os.path.join(folder, "tokenizer_config.json"), config)
        check_transformers(folder, cases)
    if gguf is not None:
        write_json(os.path.join(folder, "gguf_vocab.json"), gguf)
    write_json(os.path.join(folder, "cases.json"), {"cases": compact(cases), "decode": decodes})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--golden", default=os.path.join(HERE, "..", "..", "..", "shared", "golden"))
    args = parser.parse_args()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    strings = base_strings()
    notes = make_spm(random.Random(1), strings)
    make_llama3(random.Random(2), strings)
    make_smollm(random.Random(3), strings)
    make_added_tokens(strings)
    make_llama2(args.golden, strings)
    print("\n".join(notes))
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT}: {total // 1024} KiB, {len(strings)} base strings")


if __name__ == "__main__":
    main()
