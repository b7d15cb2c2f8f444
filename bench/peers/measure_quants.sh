#!/usr/bin/env bash
# minfer against llama.cpp on the CPU for GGUF's quantized weight types: decode and prefill throughput
# (interleaved, per-round ratios) and, on SmolLM2-135M, the KL divergence and perplexity of each quantized
# file against the F32 file it was quantized from.
#
# usage: bench/peers/measure_quants.sh [decode_rounds=5] [prefill_rounds=5] [tokens=64] [steps="setup decode prefill quality summary"]
# env:   PEERS (default /tmp/peers; the models are written there, outside the repository)
#        MINFER (default $PEERS/minfer-quants: a COPY of build/minfer, so that a rebuild mid-run cannot change it)
#        LBIN (default $PEERS/llama.cpp-build/bin: llama-bench, llama-perplexity, llama-quantize and the libraries)
#        PY (default /tmp/venv/bin/python: gguf, numpy, llama-cpp-python; the bindings need no build of their own:
#        CMAKE_ARGS=-DLLAMA_BUILD=OFF pip install llama-cpp-python==0.3.36; LLAMA_CPP_LIB_PATH defaults to $LBIN), SMOL_F32 (default /tmp/smol/smollm2-f32.gguf),
#        SMOL_Q41 (default ~/.cache/minfer/models/SmolLM2-135M-Instruct.Q4_1.gguf), TOKENIZER (llama2.c tokenizer.bin,
#        default <repo>/../shared/golden/tokenizer.bin), THREADS (default "1 2"), TMO (seconds one measurement may
#        take before it is recorded as na, default 90), OUTDIR (default a new $PEERS/quants.XXXXXX),
#        TEXT and CHUNKS (the quality step's text and its windows of 256, default the reference's text.txt and its
#        3 windows; any other text is tokenized by llama-perplexity and its first CHUNKS x 256 ids used by all)
#
# Models (step setup, each made only when missing):
#   stories110M  $PEERS/s110-f32.gguf from `minfer make-model --preset stories110M` (seeded random weights, 768
#                wide, so every matrix takes its K-quant), then llama-quantize to Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0
#   smollm2      $SMOL_F32 (an F32 GGUF dequantized from the shipped Q4_1), llama-quantize'd the same way ($PEERS/smol-*.gguf,
#                576 wide: most matrices fall back to legacy types in the K presets), plus the shipped Q4_1 itself
#
# Written to $OUTDIR: results.tsv (one row per measurement), files.tsv (size, tensor types), summary.md, logs.
# results.tsv columns:
#   kind      decode | prefill | quality
#   round     interleaving round (decode/prefill; each pair runs minfer and llama.cpp back to back on the same
#             file and thread count, the order swapped every round); "-" for quality
#   model, qtype, threads, engine, n (tokens generated, prompt length, or the window for quality)
#   metric    tok_s (speed) | ppl | kl_mean | kl_p99 | top1 | base_ppl (quality)
#   value     decode: minfer bench tgN (-p 0 -n N -r 1: one warm-up, then N single-token steps from an empty
#               cache, avg_ts) vs llama-bench tgN (-p 0 -n N -r 1 -ngl 0, after its own warm-up, avg_ts)
#             prefill: minfer bench ppP (-p P -n 0 -r 1) vs llama-bench ppP (-p P -n 0 -r 1; P fits one batch)
#             quality, engine minfer / llama-cpp-python: windows of 256 of the reference ids (or of TEXT's),
#               each window's first token replaced by BOS, predictions 128..254 scored (CHUNKS x 127); KL(F32 || file) in
#               float64 over the whole vocabulary; minfer `perplexity --bos --kl-base-model`, llama.cpp through
#               llama-cpp-python with logits_all (bench/peers/measure_quants.py lcppkl)
#             quality, engine minfer-nobos / llama-perplexity: the same windows without the BOS replacement,
#               which is what llama-perplexity does for a model whose add_bos_token is false (SmolLM2);
#               llama-perplexity -f "$TEXT" -c 256 --chunks "$CHUNKS" (its tokens checked equal to the ids),
#               --kl-divergence against the F32 run's --kl-divergence-base (which stores base log-probs
#               rounded to 16 bits); minfer `perplexity --no-bos --kl-base-model`
#   load1     the 1-minute load average just before the measurement (the machine is shared)
set -u
DROUNDS=${1:-5}
PROUNDS=${2:-5}
TOKENS=${3:-64}
STEPS=${4:-setup decode prefill quality summary}
PROMPT=256
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
P=${PEERS:-/tmp/peers}
MINFER=${MINFER:-$P/minfer-quants}
LBIN=${LBIN:-$P/llama.cpp-build/bin}
PY=${PY:-/tmp/venv/bin/python}
H="$HERE/measure_quants.py"
SMOL_F32=${SMOL_F32:-/tmp/smol/smollm2-f32.gguf}
SMOL_Q41=${SMOL_Q41:-$HOME/.cache/minfer/models/SmolLM2-135M-Instruct.Q4_1.gguf}
TOKENIZER=${TOKENIZER:-$REPO/../shared/golden/tokenizer.bin}
THREADS=${THREADS:-1 2}
TMO=${TMO:-90}
REF=$REPO/tests/data/real_models/smollm2-q4_1.reference.json
DEFAULT_TEXT=$REPO/tests/data/real_models/text.txt
TEXT=${TEXT:-$DEFAULT_TEXT}
CHUNKS=${CHUNKS:-3}
if [ "$TEXT" = "$DEFAULT_TEXT" ] && [ "$CHUNKS" != 3 ]; then
    echo "CHUNKS=$CHUNKS: the reference text is 3 windows of 256 (its ids are the reference's); give another TEXT" >&2
    exit 2
fi
OUTDIR=${OUTDIR:-$(mktemp -d "$P/quants.XXXXXX")}
mkdir -p "$OUTDIR/logs"
RES=$OUTDIR/results.tsv
export LD_LIBRARY_PATH="$LBIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LLAMA_CPP_LIB_PATH=${LLAMA_CPP_LIB_PATH:-$LBIN}  # llama-cpp-python loads the same build

for f in "$MINFER" "$LBIN/llama-bench" "$LBIN/llama-perplexity" "$LBIN/llama-quantize" "$PY" "$SMOL_F32" "$SMOL_Q41" \
         "$TOKENIZER" "$REF" "$TEXT"; do
    [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }
done
echo "minfer=$MINFER ($(stat -c '%y' "$MINFER" | cut -d. -f1))  llama.cpp=$LBIN  out=$OUTDIR"
echo "decode rounds=$DROUNDS prefill rounds=$PROUNDS tokens=$TOKENS prompt=$PROMPT threads='$THREADS' steps='$STEPS'"

QTYPES="Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0"
lower() { echo "$1" | tr 'A-Z' 'a-z'; }
# "model qtype file" lines, in measuring order
models() {
    echo "stories110M F32 $P/s110-f32.gguf"
    for q in $QTYPES; do echo "stories110M $q $P/s110-$(lower $q).gguf"; done
    echo "smollm2 F32 $SMOL_F32"
    for q in $QTYPES; do echo "smollm2 $q $P/smol-$(lower $q).gguf"; done
    echo "smollm2 Q4_1 $SMOL_Q41"
}
load1() { cut -d' ' -f1 /proc/loadavg; }
[ -s "$RES" ] || printf 'kind\tround\tmodel\tqtype\tthreads\tengine\tn\tmetric\tvalue\tload1\ttime\n' >"$RES"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$(date +%H:%M:%S)" >>"$RES"; }

has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }

# ------------------------------------------------------------------------------------------- setup
if has setup; then
    [ -s "$P/s110-f32.gguf" ] || "$MINFER" make-model --preset stories110M --format gguf -z "$TOKENIZER" \
        -o "$P/s110-f32.gguf" >"$OUTDIR/logs/make-model.log" 2>&1 || { echo "make-model failed" >&2; exit 1; }
    for q in $QTYPES; do
        for pair in "s110:$P/s110-f32.gguf" "smol:$SMOL_F32"; do
            out=$P/${pair%%:*}-$(lower $q).gguf
            [ -s "$out" ] || "$LBIN/llama-quantize" "${pair#*:}" "$out" "$q" >"$OUTDIR/logs/quantize-$(basename "$out").log" 2>&1 \
                || { echo "llama-quantize $q failed" >&2; exit 1; }
        done
    done
    "$PY" "$H" types $(models | cut -d' ' -f3) >"$OUTDIR/files.tsv"
    cat "$OUTDIR/files.tsv"
fi

# ------------------------------------------------------------------------------------------- speed
mf_bench() { # log, file, threads, p, n
    timeout "$TMO" "$MINFER" bench -m "$2" -p "$4" -n "$5" -r 1 --threads "$3" --device cpu -o csv >"$1.csv" 2>"$1.err" \
        && "$PY" "$H" ts "$1.csv" || echo na
}
lc_bench() { # log, file, threads, p, n
    timeout "$TMO" "$LBIN/llama-bench" -m "$2" -p "$4" -n "$5" -r 1 -t "$3" -ngl 0 -o csv >"$1.csv" 2>"$1.err" \
        && "$PY" "$H" ts "$1.csv" || echo na
}
speed() { # kind rounds p n filter(grep -E on "model qtype")
    local kind=$1 rounds=$2 p=$3 n=$4 filter=$5 r t model q f a b la lb size
    size=$([ "$kind" = decode ] && echo "$n" || echo "$p")
    for r in $(seq 1 "$rounds"); do
        echo "--- $kind round $r/$rounds  ($(uptime | sed 's/.*load/load/'))"
        for t in $THREADS; do
            while read -r model q f; do
                lg=$OUTDIR/logs/$kind.r$r.t$t.$model.$q
                if [ $((r % 2)) = 1 ]; then
                    la=$(load1); a=$(mf_bench "$lg.mf" "$f" "$t" "$p" "$n")
                    lb=$(load1); b=$(lc_bench "$lg.lc" "$f" "$t" "$p" "$n")
                else
                    lb=$(load1); b=$(lc_bench "$lg.lc" "$f" "$t" "$p" "$n")
                    la=$(load1); a=$(mf_bench "$lg.mf" "$f" "$t" "$p" "$n")
                fi
                row "$kind" "$r" "$model" "$q" "$t" minfer "$size" tok_s "$a" "$la"
                row "$kind" "$r" "$model" "$q" "$t" llama.cpp "$size" tok_s "$b" "$lb"
                printf '  t=%s %-12s %-7s minfer %9s  llama.cpp %9s\n' "$t" "$model" "$q" "$a" "$b"
            done < <(models | grep -E "$filter")
        done
    done
}
has decode && speed decode "$DROUNDS" 0 "$TOKENS" '.'
has prefill && speed prefill "$PROUNDS" "$PROMPT" 0 '^stories110M (F32|Q4_K_M) '

# ------------------------------------------------------------------------------------------- quality
if has quality; then
    IDS=$OUTDIR/smollm2-text.ids
    KBASE=$OUTDIR/smollm2-f32.kld
    "$LBIN/llama-perplexity" -m "$SMOL_F32" -f "$TEXT" -c 256 -b 256 --chunks "$CHUNKS" -t 2 --kl-divergence-base "$KBASE" \
        >"$OUTDIR/logs/lp.F32.log" 2>&1 || echo "llama-perplexity F32 failed" >&2
    if [ "$TEXT" = "$DEFAULT_TEXT" ]; then
        python3 -c "import json,sys; print('\n'.join(map(str, json.load(open(sys.argv[1]))['perplexity']['ids'])))" "$REF" >"$IDS"
    else
        [ -s "$KBASE" ] || { echo "llama-perplexity saved no tokens of $TEXT ($OUTDIR/logs/lp.F32.log)" >&2; exit 1; }
        "$PY" "$H" lpids "$KBASE" >"$IDS"
    fi
    echo "--- quality on $(wc -l <"$IDS") ids of $TEXT  ($(uptime | sed 's/.*load/load/'))"
    put() { # engine qtype "ppl kl p99 top1 base_ppl"
        set -- "$1" "$2" $3
        local e=$1 q=$2; shift 2
        for m in ppl kl_mean kl_p99 top1 base_ppl; do row quality - smollm2 "$q" 2 "$e" 256 "$m" "$1" "$(load1)"; shift; done
    }
    # llama-perplexity: the F32 run (above) saved the base log-probs and the tokens, checked against the ids
    "$PY" "$H" lptokens "$KBASE" "$IDS" | tee "$OUTDIR/lp-tokens.txt"
    lpf32=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$OUTDIR/logs/lp.F32.log")
    put llama-perplexity F32 "${lpf32:-na} 0 0 1 ${lpf32:-na}"
    for bos in yes no; do
        e=minfer; flag=(--bos); [ $bos = no ] && { e=minfer-nobos; flag=(--no-bos); }
        "$MINFER" perplexity -m "$SMOL_F32" --ids "$IDS" -c 256 --threads 2 --device cpu "${flag[@]}" -o json \
            >"$OUTDIR/logs/$e.F32.json" 2>"$OUTDIR/logs/$e.F32.err"
        v=$("$PY" "$H" mfppl "$OUTDIR/logs/$e.F32.json"); set -- $v
        put "$e" F32 "$1 0 0 1 $1"
    done
    while read -r model q f; do
        [ "$q" = F32 ] && continue
        for bos in yes no; do
            e=minfer; flag=(--bos); [ $bos = no ] && { e=minfer-nobos; flag=(--no-bos); }
            "$MINFER" perplexity -m "$f" --ids "$IDS" -c 256 --kl-base-model "$SMOL_F32" --threads 2 --device cpu \
                "${flag[@]}" -o json >"$OUTDIR/logs/$e.$q.json" 2>"$OUTDIR/logs/$e.$q.err"
            put "$e" "$q" "$("$PY" "$H" mfppl "$OUTDIR/logs/$e.$q.json")"
        done
        "$LBIN/llama-perplexity" -m "$f" -c 256 -b 256 --chunks "$CHUNKS" -t 2 --kl-divergence-base "$KBASE" --kl-divergence \
            >"$OUTDIR/logs/lp.$q.log" 2>&1 || echo "llama-perplexity $q failed" >&2
        put llama-perplexity "$q" "$("$PY" "$H" lpppl "$OUTDIR/logs/lp.$q.log")"
        echo "  $q done"
    done < <(models | grep '^smollm2 ')
    # llama.cpp through llama-cpp-python, BOS-first windows, all files against the F32 in one process
    "$PY" "$H" lcppkl "$IDS" 256 $(models | grep '^smollm2 ' | cut -d' ' -f3) >"$OUTDIR/lcpp-kl.tsv" 2>"$OUTDIR/logs/lcpp-kl.err"
    while read -r model q f; do
        v=$(awk -F'\t' -v b="$(basename "$f")" '$1 == b {print $2, $3, $4, $5, $6}' "$OUTDIR/lcpp-kl.tsv")
        put llama-cpp-python "$q" "${v:-na na na na na}"
    done < <(models | grep '^smollm2 ')
fi

# ------------------------------------------------------------------------------------------- summary
if has summary; then
    "$PY" "$H" summary "$RES" | tee "$OUTDIR/summary.md"
fi
echo "results: $RES"
