#!/usr/bin/env bash
# Interleaved decode-throughput comparison on the CPU: run.c vs minfer (f32, bf16, q8_0) vs llama.cpp
# (f32, Q8_0), on the files bench/peers/setup.sh writes; each round runs all six once, in turn.
# usage: bench/peers/measure_decode.sh [rounds=5] [threads=2] [tokens=200]
# env:   PEERS (default /tmp/peers), MINFER (default $PEERS/minfer: copy build/minfer there, so that a
#        rebuild mid-run cannot change it), RUNC, LBENCH, MODEL_V0, GGUF_F32, GGUF_Q8, TOKENIZER, OUTDIR
#
# What each column measures (all decode-only, batch 1, greedy, from BOS with no text prompt):
#   runc      run.c "achieved tok/s": (steps-1) forward passes / wall time after the first; -n counts
#             positions, and with no -i prompt every position is a generated token (prompt would be counted).
#   mf_*      minfer's "eval time" line: tokens after the first generated one (tokens-1), prompt eval excluded.
#   lc_*      llama-bench tg test (-p 0 -n tokens): tokens single-token decodes (random ids, no sampling),
#             after llama-bench's own warmup; avg_ts column, one repetition (-r 1).
set -u
ROUNDS=${1:-5}
THREADS=${2:-2}
TOKENS=${3:-200}
P=${PEERS:-/tmp/peers}
MINFER=${MINFER:-$P/minfer}
RUNC=${RUNC:-$P/run}
LBENCH=${LBENCH:-$P/llama.cpp-build/bin/llama-bench}
export LD_LIBRARY_PATH="$(dirname "$LBENCH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
MODEL_V0=${MODEL_V0:-$P/s110.bin}
GGUF_F32=${GGUF_F32:-$P/s110-f32.gguf}
GGUF_Q8=${GGUF_Q8:-$P/s110-q8_0.gguf}
TOKENIZER=${TOKENIZER:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/golden/tokenizer.bin}
OUTDIR=${OUTDIR:-$(mktemp -d "$P/measure.XXXXXX")}
mkdir -p "$OUTDIR"
RES=$OUTDIR/results.tsv

case "$THREADS" in 1|2) ;; *) echo "threads must be 1 or 2" >&2; exit 2;; esac
for f in "$MINFER" "$RUNC" "$LBENCH" "$MODEL_V0" "$GGUF_F32" "$GGUF_Q8" "$TOKENIZER"; do
    [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }
done

echo "minfer=$MINFER ($(stat -c '%y' "$MINFER" | cut -d. -f1))  run.c=$RUNC  llama-bench=$LBENCH"
echo "rounds=$ROUNDS threads=$THREADS tokens=$TOKENS  logs in $OUTDIR"

# --- one measurement each; print tok/s or "na" ---
runc() {   # $1 = log file
    OMP_NUM_THREADS=$THREADS "$RUNC" "$MODEL_V0" -t 0 -n "$TOKENS" -z "$TOKENIZER" >"$1.out" 2>"$1" || { echo na; return; }
    sed -n 's/^achieved tok\/s: *\([0-9.]*\).*/\1/p' "$1" | tail -1 | grep . || echo na
}
minfer() { # $1 = log file, $2 = dtype, $3 = model (default MODEL_V0)
    local dt=(--dtype "$2"); [ -n "${3:-}" ] && dt=()
    "$MINFER" generate -m "${3:-$MODEL_V0}" --prompt-ids 1 -n "$TOKENS" --temp 0 --ignore-eos \
        --threads "$THREADS" --device cpu "${dt[@]}" >"$1.out" 2>"$1" || { echo na; return; }
    sed -n 's/^minfer: *eval time =.*, *\([0-9.]*\) tokens per second.*/\1/p' "$1" | tail -1 | grep . || echo na
}
lcpp() {   # $1 = log file, $2 = gguf
    "$LBENCH" -m "$2" -p 0 -n "$TOKENS" -t "$THREADS" -r 1 -ngl 0 -o csv >"$1.out" 2>"$1" || { echo na; return; }
    python3 - "$1.out" <<'EOF' || echo na
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("n_gen", "0") != "0"]
print(rows[-1]["avg_ts"])
EOF
}

printf 'round\trunc\tmf_f32\tmf_bf16\tmf_q8_0\tlc_f32\tlc_q8_0\n' >"$RES"
for r in $(seq 1 "$ROUNDS"); do
    a=$(runc   "$OUTDIR/r$r.runc.log")
    b=$(minfer "$OUTDIR/r$r.mf_f32.log"  f32)
    c=$(minfer "$OUTDIR/r$r.mf_bf16.log" bf16)
    d=$(minfer "$OUTDIR/r$r.mf_q8_0.log" q8_0 "$GGUF_Q8")
    e=$(lcpp   "$OUTDIR/r$r.lc_f32.log"  "$GGUF_F32")
    f=$(lcpp   "$OUTDIR/r$r.lc_q8_0.log" "$GGUF_Q8")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f" >>"$RES"
    echo "--- round $r/$ROUNDS (tok/s) ---"
    printf '%-6s %10s %10s %10s %10s %10s %10s\n' round run.c mf_f32 mf_bf16 mf_q8_0 lc_f32 lc_q8_0
    printf '%-6s %10s %10s %10s %10s %10s %10s\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f"
    [ "$d" = na ] && { echo -n "  minfer q8_0 refused: "; grep -m1 -i 'error' "$OUTDIR/r$r.mf_q8_0.log" || tail -1 "$OUTDIR/r$r.mf_q8_0.log"; }
done

python3 - "$RES" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cols = ["runc", "mf_f32", "mf_bf16", "mf_q8_0", "lc_f32", "lc_q8_0"]
med = {}
for c in cols:
    v = [float(r[c]) for r in rows if r[c] not in ("na", "")]
    med[c] = statistics.median(v) if v else None
fmt = lambda x: "na" if x is None else f"{x:.2f}"
print("=== medians over %d rounds (tok/s) ===" % len(rows))
print("  ".join(f"{c}={fmt(med[c])}" for c in cols))
def ratio(name, a, b):
    x = None if med[a] is None or med[b] is None else med[a] / med[b]
    print(f"  {name:28s} {'na' if x is None else f'{x:.3f}'}")
print("ratios (of medians):")
ratio("minfer f32 / run.c f32", "mf_f32", "runc")
ratio("minfer q8_0 / minfer f32", "mf_q8_0", "mf_f32")
ratio("minfer q8_0 / minfer bf16", "mf_q8_0", "mf_bf16")
ratio("minfer q8_0 / llama.cpp q8_0", "mf_q8_0", "lc_q8_0")
ratio("minfer f32 / llama.cpp f32", "mf_f32", "lc_f32")
ratio("minfer bf16 / minfer f32", "mf_bf16", "mf_f32")
EOF
