#!/usr/bin/env bash
# minfer serve against llama.cpp's llama-server on the same GGUF file, with the same KV memory (f16
# cache) and threads, replaying the same seeded trace with `minfer bench-serve --url` against each in
# turn (A B A B ..., a fresh server per run).
# usage: bench/peers/serve_compare.sh GGUF [rounds=3] [slots=4] [ctx=512] [requests=48]
# Two layouts of that memory, slots x ctx positions:
#   default      both give each of `slots` slots its own ctx positions (llama-server --no-kv-unified).
#   KV_MIB=N     llama-server keeps one unified cache of slots x ctx positions (--kv-unified) for
#                LLAMA_SLOTS slots, and minfer a pool of N MiB of blocks (--kv-cache-mib N) that up
#                to MINFER_SLOTS requests decode in at once. Set N to that memory (both caches are
#                f16, the same bytes a position): each run prints minfer's log line "KV cache ... MiB
#                (f16, B blocks of P positions ...)" and llama-server's "n_slots = ..., n_ctx_slot = ...".
# env:   PEERS (default /tmp/peers), MINFER (default $PEERS/minfer: a copy of build/minfer, so that a
#        rebuild mid-run cannot change it), LSERVER (default $PEERS/llama.cpp-build/bin/llama-server),
#        THREADS (2), PROMPTS (16-128), OUTPUTS (16-128), OUTDIR, KV_MIB (unset); with KV_MIB,
#        MINFER_SLOTS (default: requests) and LLAMA_SLOTS (default: slots); CONNECTIONS (requests in
#        flight from the client; default slots, or requests with KV_MIB)
# llama-server is built from llama-cpp-python's source package by bench/peers/setup.sh.
set -euo pipefail
GGUF=$1
ROUNDS=${2:-3}
SLOTS=${3:-4}
CTX=${4:-512}
REQUESTS=${5:-48}
P=${PEERS:-/tmp/peers}
MINFER=${MINFER:-$P/minfer}
LSERVER=${LSERVER:-$P/llama.cpp-build/bin/llama-server}
THREADS=${THREADS:-2}
PROMPTS=${PROMPTS:-16-128}
OUTPUTS=${OUTPUTS:-16-128}
OUTDIR=${OUTDIR:-$(mktemp -d "$P/serve.XXXXXX")}
KV_MIB=${KV_MIB:-}
MINFER_SLOTS=${MINFER_SLOTS:-$REQUESTS}
LLAMA_SLOTS=${LLAMA_SLOTS:-$SLOTS}
if [ -n "$KV_MIB" ]; then CONNECTIONS=${CONNECTIONS:-$REQUESTS}; else CONNECTIONS=${CONNECTIONS:-$SLOTS}; fi
export LD_LIBRARY_PATH="$(dirname "$LSERVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$GGUF" "$MINFER" "$LSERVER"; do [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }; done
mkdir -p "$OUTDIR"
PORT=18093

wait_ready() {  # $1 = pid: until /health answers 200, the process dies, or 120 s pass
  for _ in $(seq 1200); do
    kill -0 "$1" 2>/dev/null || return 1
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

run_one() {  # $1 = minfer|llama, $2 = round
  local log=$OUTDIR/$1-r$2.server.log pid
  if [ "$1" = minfer ] && [ -n "$KV_MIB" ]; then
    "$MINFER" serve -m "$GGUF" --host 127.0.0.1 --port $PORT --slots "$MINFER_SLOTS" --ctx "$CTX" \
      --kv-cache-mib "$KV_MIB" --threads "$THREADS" --kv-dtype f16 >"$log" 2>&1 &
  elif [ "$1" = minfer ]; then
    "$MINFER" serve -m "$GGUF" --host 127.0.0.1 --port $PORT --slots "$SLOTS" --ctx "$CTX" --threads "$THREADS" \
      --kv-dtype f16 >"$log" 2>&1 &
  else
    # -c is the context of all slots together; -np of them share it. f16 KV cache is its default.
    local kv=--no-kv-unified np=$SLOTS
    [ -n "$KV_MIB" ] && kv=--kv-unified np=$LLAMA_SLOTS
    "$LSERVER" -m "$GGUF" --host 127.0.0.1 --port $PORT -np "$np" -c $((SLOTS * CTX)) -t "$THREADS" -tb "$THREADS" \
      $kv --metrics --no-webui >"$log" 2>&1 &
  fi
  pid=$!
  if ! wait_ready $pid; then echo "$1 did not start: $log" >&2; kill $pid 2>/dev/null; exit 1; fi
  "$MINFER" bench-serve --url "http://127.0.0.1:$PORT" --requests "$REQUESTS" --prompt-len "$PROMPTS" \
    --output-len "$OUTPUTS" --seed 1 --connections "$CONNECTIONS" -o json --save-json "$OUTDIR/$1-r$2.json" \
    >"$OUTDIR/$1-r$2.out" 2>"$OUTDIR/$1-r$2.err" || { echo "bench-serve against $1 failed: $OUTDIR/$1-r$2.err" >&2; kill $pid; exit 1; }
  kill -TERM $pid
  wait $pid 2>/dev/null || true
  grep -m1 -E '^minfer: KV cache|initializing, n_slots' "$log" | sed "s/^/  $1 r$2: /" || true
}

echo "gguf=$GGUF slots=$SLOTS ctx=$CTX threads=$THREADS requests=$REQUESTS prompts=$PROMPTS outputs=$OUTPUTS rounds=$ROUNDS"
echo "connections=$CONNECTIONS${KV_MIB:+ unified: llama-server -np $LLAMA_SLOTS -c $((SLOTS * CTX)), minfer --kv-cache-mib $KV_MIB --slots $MINFER_SLOTS}"
echo "minfer=$MINFER  llama-server=$LSERVER  logs in $OUTDIR"
for r in $(seq "$ROUNDS"); do
  run_one minfer "$r"
  run_one llama "$r"
  echo "round $r done"
done
python3 - "$OUTDIR" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rec(name, r):
    data = json.load(open(f"{out}/{name}-r{r}.json"))
    return data[0] if isinstance(data, list) else data
fields = [("output tok/s", lambda j: j["output_tokens_per_second"]),
          ("TTFT median ms", lambda j: 1e3 * j["ttft_seconds"]["median"]),
          ("TTFT p90 ms", lambda j: 1e3 * j["ttft_seconds"]["p90"]),
          ("TPOT median ms", lambda j: 1e3 * j["tpot_seconds"]["median"]),
          ("TPOT p90 ms", lambda j: 1e3 * j["tpot_seconds"]["p90"])]
print("| measure | minfer serve | llama-server | minfer / llama-server (median of the rounds' ratios) |")
print("| --- | --- | --- | --- |")
for label, get in fields:
    m = [get(rec("minfer", r)) for r in range(1, rounds + 1)]
    l = [get(rec("llama", r)) for r in range(1, rounds + 1)]
    ratio = statistics.median(a / b for a, b in zip(m, l))
    print(f"| {label} | {statistics.median(m):.1f} ({', '.join(f'{x:.1f}' for x in m)}) | "
          f"{statistics.median(l):.1f} ({', '.join(f'{x:.1f}' for x in l)}) | {ratio:.2f}x |")
PY
