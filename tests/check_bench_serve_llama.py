#!/usr/bin/env python3
"""`minfer bench-serve --url` against a server that speaks as llama.cpp's llama-server does.

A stand-in for llama-server on a loopback port: its /v1/models carries the model's meta (n_vocab,
n_ctx), /props its slots, /tokenize the BOS id, and /v1/completions streams one chunk per token
with no token ids, some tokens' text held back into the next chunk (as llama-server holds bytes that
end inside a character), and usage in the last chunk. bench-serve must take the trace's shape from
those routes, count every request's tokens to its max_tokens, and report them.

  check_bench_serve_llama.py MINFER
"""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

N_VOCAB, N_CTX, SLOTS, BOS = 1000, 512, 3, 7
seen = {"requests": 0, "tokens": 0, "bad": []}
lock = threading.Lock()


class LlamaLike(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, value):
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json({"object": "list", "data": [{"id": "fake.gguf", "object": "model", "owned_by": "llamacpp",
                                                        "meta": {"n_vocab": N_VOCAB, "n_ctx": N_CTX, "n_ctx_train": 2048}}]})
        elif self.path == "/props":
            self.send_json({"default_generation_settings": {"n_ctx": N_CTX}, "total_slots": SLOTS})
        elif self.path == "/metrics":
            text = b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self.send_error(404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            self.send_json({"tokens": [BOS] if body.get("add_special") else []})
            return
        prompt, n = body["prompt"], body["max_tokens"]
        with lock:
            seen["requests"] += 1
            seen["tokens"] += n
            if not (isinstance(prompt, list) and prompt and prompt[0] == BOS and all(0 <= t < N_VOCAB for t in prompt)
                    and body.get("stream") and body.get("ignore_eos")):
                seen["bad"].append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(value):
            data = ("data: " + json.dumps(value) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        for i in range(n):
            if i % 5 == 3:
                continue  # this token's bytes go out with the next one's
            event({"choices": [{"text": "x", "index": 0, "finish_reason": None}], "object": "text_completion"})
        event({"choices": [{"text": "", "index": 0, "finish_reason": "length"}], "object": "text_completion",
               "usage": {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}})
        data = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))


class Server(ThreadingHTTPServer):
    # bench-serve opens up to 12 connections at once here; socketserver's default backlog of 5 can
    # refuse some of them on a loaded machine (seen once under ctest -j2 as "request 5 failed: Read").
    request_queue_size = 64


def main():
    server = Server(("127.0.0.1", 0), LlamaLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    run = subprocess.run([sys.argv[1], "bench-serve", "--url", url, "--requests", "12", "--prompt-len", "8-32",
                          "--output-len", "4-40", "-o", "json"], capture_output=True, text=True, timeout=120)
    server.shutdown()
    assert run.returncode == 0, run.stderr
    record = json.loads(run.stdout)
    record = record[0] if isinstance(record, list) else record
    assert seen["requests"] == 12 and not seen["bad"], seen
    assert record["slots"] == SLOTS, record
    assert record["model"] == "fake.gguf", record
    # Every token counted, those held back into a later chunk too.
    assert record["output_tokens"] == seen["tokens"] and record["output_tokens_per_second"] > 0, (record, seen)
    assert record["ttft_seconds"]["median"] > 0 and record["tpot_seconds"]["median"] >= 0, record
    print(f"bench-serve against a llama-server stand-in: 12 requests, {record['output_tokens']} tokens, "
          f"slots {record['slots']} from /props")


if __name__ == "__main__":
    main()
