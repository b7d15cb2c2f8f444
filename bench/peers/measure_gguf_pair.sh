#!/usr/bin/env bash
# minfer against llama.cpp on one GGUF file as it is stored, on the CPU: prefill ppP and decode tgN at
# batch 1, interleaved (each round runs both engines back to back at each thread count, the order
# swapped every round), and the per-round ratios' medians.
#
# usage: bench/peers/measure_gguf_pair.sh MODEL.gguf [rounds=4] [prompt=256] [tokens=128]
# env:   PEERS (default /tmp/peers), MINFER (default $PEERS/minfer-pair: a COPY of a built minfer, so that a
#        rebuild mid-run cannot change it), LBIN (default $PEERS/llama.cpp-build/bin: llama-bench and its
#        libraries, built with GGML_NATIVE=OFF and exactly the CPU's ISA flags), THREADS (default "1 2"),
#        OUT (default $PEERS/pair.tsv)
#   minfer:    minfer bench -m MODEL -p P -n N -r 1 -t T   (ppP: the prompt in one pass; tgN: N greedy tokens after it)
#   llama.cpp: llama-bench -m MODEL -p P -n N -r 1 -t T    (its ppP, and its tgN from an empty cache)
# Writes OUT (round, threads, test, engine, tok/s, load1) and prints a table of rates, ratios and medians.
set -u
MODEL=$1
ROUNDS=${2:-4}
PROMPT=${3:-256}
TOKENS=${4:-128}
P=${PEERS:-/tmp/peers}
MINFER=${MINFER:-$P/minfer-pair}
LBIN=${LBIN:-$P/llama.cpp-build/bin}
THREADS=${THREADS:-1 2}
OUT=${OUT:-$P/pair.tsv}
export LD_LIBRARY_PATH="$LBIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for f in "$MODEL" "$MINFER" "$LBIN/llama-bench"; do [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }; done

load1() { cut -d' ' -f1 /proc/loadavg; }
# minfer's table rows end "| ppP | RATE ± 0.00 | ..."; llama-bench's "| ppP | RATE ± 0.00 |".
rate() { awk -F'|' -v t="$1" '{ for (i = 1; i <= NF; ++i) { gsub(/^ +| +$/, "", $i); if ($i == t) { split($(i + 1), r, " "); print r[1]; exit } } }'; }
run_minfer() { "$MINFER" bench -m "$MODEL" -p "$PROMPT" -n "$TOKENS" -r 1 -t "$1" 2>/dev/null; }
run_llama() { "$LBIN/llama-bench" -m "$MODEL" -p "$PROMPT" -n "$TOKENS" -r 1 -t "$1" 2>/dev/null; }

printf 'round\tthreads\ttest\tengine\ttok_s\tload1\n' > "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    engines="minfer llama"
    [ $((round % 2)) -eq 0 ] && engines="llama minfer"
    for e in $engines; do
      l=$(load1)
      table=$(run_$e "$t")
      for test in "pp$PROMPT" "tg$TOKENS"; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$t" "$test" "$e" "$(rate "$test" <<< "$table")" "$l" >> "$OUT"
      done
    done
  done
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("| threads | test | minfer tok/s | llama.cpp tok/s | per-round ratios | median |")
print("| --- | --- | --- | --- | --- | --- |")
for t in sorted({r["threads"] for r in rows}, reverse=True):
    for test in sorted({r["test"] for r in rows}):
        by = lambda e: {r["round"]: float(r["tok_s"]) for r in rows if r["threads"] == t and r["test"] == test and r["engine"] == e and r["tok_s"]}
        m, l = by("minfer"), by("llama")
        rounds = sorted(set(m) & set(l), key=int)
        ratios = [m[k] / l[k] for k in rounds]
        fmt = lambda v: ", ".join(f"{x:.3g}" for x in v)
        print(f"| {t} | {test} | {fmt([m[k] for k in rounds])} | {fmt([l[k] for k in rounds])} | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f}x |")
PY
