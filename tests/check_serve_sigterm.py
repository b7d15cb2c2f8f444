#!/usr/bin/env python3
"""`minfer serve` exits 0 after SIGTERM however the requests in flight stand (issue 20).

Each round starts `minfer serve -m preset:tiny` on a free loopback port, opens a mix of clients
(whole answers, streams, a client that half-closes, one that trickles its headers, one that
trickles a body, idle keep-alive connections), sends SIGTERM at a random moment and requires exit
status 0 within the grace period plus the 4 s the shutdown may take after it.

  check_serve_sigterm.py MINFER [ROUNDS] [SEED]
"""
import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

GRACE = 0.5
BOUND = GRACE + 4 + 2  # grace, 2 s to cancel, 2 s to cut connections, 2 s for a loaded machine


def start(minfer):
    proc = subprocess.Popen([minfer, "serve", "-m", "preset:tiny", "--host", "127.0.0.1", "--port", "0",
                             "--slots", "2", "--max-queue", "8", "--shutdown-grace", str(GRACE)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if match:
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    sys.exit(f"minfer serve did not start: {proc.stderr.read()}")


def request_bytes(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data


def client(s, kind, stop):
    """One misbehaving or ordinary client on its connected socket; ends quietly whatever the server does."""
    try:
        s.settimeout(0.2)
        body = {"prompt": [1, 7], "max_tokens": 500, "temperature": 1, "ignore_eos": True, "stream": kind == "stream"}
        if kind in ("whole", "stream", "half"):
            s.sendall(request_bytes(body))
            if kind == "half":
                s.shutdown(socket.SHUT_WR)
        elif kind == "slow-head":
            for ch in b"GET /health HTTP/1.1\r\nX-Slow: " + b"x" * 1000:
                if stop.is_set():
                    break
                s.send(bytes([ch]))
                time.sleep(0.02)
        elif kind == "slow-body":
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
            while not stop.is_set():
                s.send(b"x")
                time.sleep(0.02)
        while not stop.is_set():  # read whatever comes, until the server closes
            try:
                if not s.recv(65536):
                    break
            except socket.timeout:
                continue
        s.close()
    except OSError:
        pass


def main():
    minfer = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    kinds = ["whole", "whole", "stream", "stream", "half", "slow-head", "slow-body", "idle"]
    slowest = 0.0
    for r in range(rounds):
        proc, port = start(minfer)
        stop = threading.Event()
        # note: every client connects here, before the signal: a thread that connected late (on a
        # loaded machine) would reach whatever next listens on the freed port, another test's server.
        socks = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in kinds]
        threads = [threading.Thread(target=client, args=(s, k, stop), daemon=True) for s, k in zip(socks, kinds)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.05, 0.6))
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(BOUND)
        except subprocess.TimeoutExpired:
            proc.kill()
            stop.set()
            sys.exit(f"round {r + 1}: still running {BOUND} s after SIGTERM")
        took = time.time() - t0
        slowest = max(slowest, took)
        stop.set()
        log = proc.stderr.read()
        if status != 0 or "Sanitizer" in log or "runtime error" in log:
            sys.exit(f"round {r + 1}: exit status {status}\n{log}")
        for t in threads:
            t.join(5)
    print(f"{rounds} rounds: {rounds} SIGTERMs under load, {rounds} exits with status 0; slowest {slowest:.2f} s "
          f"(bound {BOUND:.1f} s)")


if __name__ == "__main__":
    main()
