#!/usr/bin/env python3
"""minfer chat and serve under mpirun -np 2, rank 0 leading (Decoder::lead), against one process.

  - chat, greedy, two turns (the second reuses the cache: a rewind) and a /reset: the same text;
  - serve, temperature 0, one server of each kind, the same requests in the same order:
      a prompt of 80 ids (a whole block of 64 and 16 rows of a second), then the same prompt again,
      which finds both blocks cached and copies the partly filled one before writing it (a block
      copy rank 0 must send the other rank, or rank 1's keys there are whatever it held before);
      then two requests at once (one pass with rows of both); every answer's ids equal;
  - SIGTERM to rank 0 (the process it prints) when idle, and while a request streams from a slower
    model: the request is answered whole, every rank exits and mpirun exits 0 (rank 0 drains,
    then ends the other rank's following).
Usage: check_serve_ranks.py MPIRUN MINFER SOURCE_DIR
"""
import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

MPIRUN, MINFER, SOURCE = sys.argv[1], sys.argv[2], sys.argv[3]
SERVE_MODEL = SOURCE + "/tests/data/models/qwen2-f32"  # 2 KV heads, biases; a context of 128
CHAT_MODEL = SOURCE + "/tests/data/models/smollm-chat"  # a chat template and a tokenizer
LIMIT = 120
SERVERS = []  # killed on the way out, a failed check's too
GRACE = 60  # --shutdown-grace: far more than the request in flight needs, even under ASan
TOKENS = 800  # the request in flight: 0.4 s here in the Release build, 10 s or so under ASan


def command(args, ranks):
    line = [MINFER] + args
    if ranks > 1:
        line = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + line
    return line


def check(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)
    print("ok: " + message)


def chat(ranks):
    turns = "Hello there\nTell me more\n/reset\nHello again\n"
    result = subprocess.run(command(["chat", "-m", CHAT_MODEL, "--temp", "0", "-n", "12", "--threads", "1"], ranks),
                            input=turns, capture_output=True, text=True, timeout=LIMIT)
    check(result.returncode == 0, f"chat over {ranks} rank(s) exits 0")
    return result.stdout


def start_server(ranks, model=SERVE_MODEL):
    proc = subprocess.Popen(command(["serve", "-m", model, "--port", "0", "--slots", "2", "--threads", "1",
                                     "--shutdown-grace", str(GRACE)], ranks),
                            stderr=subprocess.PIPE, text=True)
    SERVERS.append(proc)
    deadline = time.time() + LIMIT
    leader = None
    while time.time() < deadline:
        line = proc.stderr.readline()
        pid = re.search(r"rank 0 of 2, process (\d+), leads", line)
        leader = int(pid.group(1)) if pid else leader
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if match:
            # The rest of its log is read as it comes (a full pipe would stall the server).
            proc.log = []
            proc.drain = threading.Thread(target=lambda: proc.log.extend(proc.stderr), daemon=True)
            proc.drain.start()
            return proc, int(match.group(1)), leader
        if not line and proc.poll() is not None:
            break
    proc.kill()
    sys.exit(f"FAIL: minfer serve over {ranks} rank(s) did not start: {proc.stderr.read()}")


def complete(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=LIMIT) as response:
        answer = json.load(response)
    return answer["choices"][0]["token_ids"], answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def at_once(port, prompts, max_tokens):
    answers = [None] * len(prompts)

    def run(i):
        answers[i] = complete(port, prompts[i], max_tokens)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIMIT)
    return answers


def serve_answers(port):
    long_prompt = [(11 * i) % 600 + 3 for i in range(80)]
    first, _ = complete(port, long_prompt, 16)
    again, cached = complete(port, long_prompt, 16)
    both = at_once(port, [[1, 5, 9, 3, 7], [4, 8, 15, 16, 23, 42]], 24)
    return {"first": first, "again": again, "cached": cached, "both": both}


def kill_servers():
    for proc in SERVERS:
        if proc.poll() is None:
            proc.kill()


def main():
    atexit.register(kill_servers)
    one, two = chat(1), chat(2)
    check(one.strip() and two == one, "chat over 2 ranks answers as one process (two turns, a reset)")

    proc, port, _ = start_server(1)
    expected = serve_answers(port)
    proc.send_signal(signal.SIGTERM)
    proc.wait(LIMIT)
    check(expected["cached"] == 64, "one process: the repeated prompt finds a whole block cached")

    proc, port, leader = start_server(2)
    check(leader is not None, "rank 0 prints its process id")
    got = serve_answers(port)
    check(got["first"] == expected["first"], "serve over 2 ranks: the same ids as one process")
    check(got["cached"] == expected["cached"] and got["again"] == expected["again"],
          "the repeated prompt: the same cached rows and ids (its partly filled block copied on both ranks)")
    check(got["both"] == expected["both"], "two requests at once: the same ids")

    os.kill(leader, signal.SIGTERM)
    check(proc.wait(LIMIT) == 0, "SIGTERM to rank 0 when idle: mpirun exits 0")
    sigterm_in_flight()


def stream_tokens(port, prompt, max_tokens, first_token):
    """A streamed completion: sets first_token once a token has come, returns the tokens' count."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    count = 0
    with urllib.request.urlopen(request, timeout=LIMIT) as response:
        for line in response:
            event = json.loads(line[6:]) if line.startswith(b"data: {") else {}
            if event.get("choices"):  # (an error event, such as a cancellation, has none)
                count += len(event["choices"][0]["token_ids"])
                first_token.set()
    return count


def sigterm_in_flight():
    """A model slow enough that TOKENS take a while: SIGTERM lands while they stream."""
    with tempfile.TemporaryDirectory() as folder:
        model = folder + "/slow.gguf"
        subprocess.run([MINFER, "make-model", "-o", model, "--format", "gguf", "--dim", "256", "--hidden-dim", "768",
                        "--layers", "4", "--heads", "4", "--kv-heads", "2", "--vocab", "512", "--seq-len", "4096"],
                       check=True, capture_output=True, timeout=LIMIT)
        proc, port, leader = start_server(2, model)
        first_token, answered = threading.Event(), {}
        worker = threading.Thread(target=lambda: answered.update(n=stream_tokens(port, [1, 2, 3], TOKENS, first_token)))
        worker.start()
        check(first_token.wait(LIMIT), "a long request streams its first token")
        os.kill(leader, signal.SIGTERM)
        started = time.time()
        try:
            status = proc.wait(GRACE + 10)
        except subprocess.TimeoutExpired:
            sys.exit("FAIL: mpirun still running after SIGTERM to rank 0")
        worker.join(LIMIT)
        proc.drain.join(LIMIT)
        log = "".join(proc.log)
        check(status == 0 and "shutting down: 1 requests in flight" in log and "requests finished: 1" in log,
              f"SIGTERM to rank 0 mid-request: it drains, every rank exits, mpirun exits 0 ({time.time() - started:.1f} s)")
        check(answered.get("n") == TOKENS, f"the request in flight was answered whole ({answered.get('n')} tokens)")

if __name__ == "__main__":
    main()
