#!/usr/bin/env python3
"""How often greedy answers change with the shape of the forward passes, in minfer and llama.cpp.

The same GGUF file, the same prompt ids (minfer's tokenizer, in the model's ChatML template) and
16 greedy tokens each, one request at a time, under four shapes:
  one-by-one  the prompt read a row per pass   (minfer --step-tokens 1;  llama-server -ub 1)
  chunks-16   16 rows per pass                 (minfer --step-tokens 16; llama-server -ub 16)
  whole       the prompt in one pass           (minfer --step-tokens 512; llama-server -ub 512)
(llama-server's logical batch -b stays 512: at -b 1 it aborts in get_sub_batch; -ub is the rows
of each pass.)
  cached      the system prompt from a cache, the rest in one pass (a request for the system
              prompt alone first; minfer's slot cache, llama-server's cache_prompt)
minfer runs twice: as it is, and with --batch-invariant (every row computed as decode computes it).
An answer "changed" when its ids differ from the same engine's whole-prompt answer. Prints a table,
and writes it with every answer as JSON (--out).

usage: greedy_shapes.py --minfer BIN --model GGUF [--llama-server BIN] [--threads 2] [--out FILE]
"""
import argparse
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTIONS = [
    "What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?",
    "What is 12 times 12?", "Write a haiku about the sea.", "Who wrote Romeo and Juliet?",
    "What is the boiling point of water?", "Give me a synonym for happy.", "What is photosynthesis?",
    "Translate 'good morning' to Spanish.", "What is the largest planet?", "Explain gravity in one sentence.",
    "List two fruits that are red.", "What day comes after Monday?", "What is the square root of 81?",
    "Why is the sky blue?", "Name a famous painter.", "What language is spoken in Brazil?",
    "How many continents are there?", "What is a noun?", "Suggest a name for a cat.",
    "What is the opposite of cold?", "How do bees make honey?", "What is the speed of light?",
    "Tell me a fun fact about owls.", "What is 7 plus 8?", "Who was Albert Einstein?",
    "What is the chemical symbol for gold?", "Describe a rainbow.", "What do plants need to grow?",
    "Recommend a book for children.", "What is the tallest mountain?",
]
N_TOKENS = 16
SHAPES = ["one-by-one", "chunks-16", "whole", "cached"]


def chatml(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def tokenize(minfer, model, text):
    out = subprocess.run([minfer, "tokenize", "-m", model, "--no-special", "-i", text], check=True,
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.strip().split(",")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.loads(answer.read())


def wait_ready(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            sys.exit(f"the server exited: {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("the server did not come up in 120 s")


class Server:
    def __init__(self, argv, port):
        self.port = port
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(port, self.proc)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def minfer_answers(args, prompts, prefix, shape, flags=()):
    port = free_port()
    step = {"one-by-one": 1, "chunks-16": 16}.get(shape, 512)
    argv = [args.minfer, "serve", "-m", args.model, "--port", str(port), "--slots", "1", "--ctx", "1024",
            "--threads", str(args.threads), "--step-tokens", str(step), *flags]
    if shape != "cached":
        argv.append("--no-prompt-cache")
    server = Server(argv, port)
    try:
        answers = []
        for ids in prompts:
            if shape == "cached":
                post(port, "/v1/completions", {"prompt": prefix, "max_tokens": 1, "temperature": 0})
            a = post(port, "/v1/completions", {"prompt": ids, "max_tokens": N_TOKENS, "temperature": 0,
                                               "ignore_eos": True})
            answers.append(a["choices"][0]["token_ids"])
        return answers
    finally:
        server.close()


def llama_answers(args, prompts, prefix, shape):
    port = free_port()
    batch = {"one-by-one": 1, "chunks-16": 16}.get(shape, 512)
    argv = [args.llama_server, "-m", args.model, "--port", str(port), "-np", "1", "-c", "1024",
            "-t", str(args.threads), "-b", "512", "-ub", str(batch), "--no-warmup"]
    server = Server(argv, port)
    try:
        answers = []
        for ids in prompts:
            cache = shape == "cached"
            if cache:
                post(port, "/completion", {"prompt": prefix, "n_predict": 1, "temperature": 0,
                                           "cache_prompt": True})
            a = post(port, "/completion", {"prompt": ids, "n_predict": N_TOKENS, "temperature": 0,
                                           "cache_prompt": cache, "ignore_eos": True, "return_tokens": True})
            answers.append(a["tokens"])
        return answers
    finally:
        server.close()


def changed(answers):
    whole = answers["whole"]
    return {shape: sum(1 for a, b in zip(answers[shape], whole) if a != b) for shape in SHAPES}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minfer", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--llama-server")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    prompts = [tokenize(args.minfer, args.model, chatml(q)) for q in QUESTIONS]
    prefix = tokenize(args.minfer, args.model, f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")
    assert all(p[:len(prefix)] == prefix for p in prompts), "the system prompt is not a prefix of every prompt"
    engines = {"minfer": minfer_answers,
               "minfer --batch-invariant": functools.partial(minfer_answers, flags=["--batch-invariant"])}
    if args.llama_server:
        engines["llama.cpp"] = llama_answers
    result = {"model": os.path.basename(args.model), "prompts": len(prompts), "tokens": N_TOKENS, "engines": {}}
    print(f"| engine | {' | '.join(s for s in SHAPES if s != 'whole')} (answers of {len(prompts)} that differ "
          f"from the whole prompt's) |")
    print("| --- |" + " --- |" * (len(SHAPES) - 1))
    for name, run in engines.items():
        answers = {shape: run(args, prompts, prefix, shape) for shape in SHAPES}
        counts = changed(answers)
        result["engines"][name] = {"changed": counts, "answers": answers}
        print(f"| {name} | " + " | ".join(str(counts[s]) for s in SHAPES if s != "whole") + " |")
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
