#!/usr/bin/env bash
# Issue 57's measurement: two minfer binaries (BASE, before the repacked weights; NEW, with them)
# against each other and against llama.cpp's repacked CPU build, on the same GGUF files, in
# interleaved rounds; decode's bytes per second from DRAM against f32's; and how often greedy
# answers change with the shape of the passes. Writes results.tsv, summary.md and summary.json.
#
# usage: bench/peers/measure_layout.sh BASE NEW [rounds=3] [steps="setup speed dram ops greedy summary"]
#   BASE, NEW  minfer binaries (copied into $OUTDIR/bin first, so that a rebuild mid-run cannot change them)
# env:   PEERS (default /tmp/peers), LBIN (default $PEERS/llama.cpp-build/bin: llama-bench, llama-quantize,
#        llama-server; bench/peers/setup.sh builds it), MODELS (default ~/.cache/minfer/models: `make models`),
#        PY (default /work/venv-measure/bin/python, with gguf==0.19.0: the tensor types of each file),
#        BASE_AVX2, NEW_AVX2 (optional: the same two commits built for AVX2 alone, e.g.
#        cmake -DMINFER_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=haswell; measured in the same rounds),
#        OPS_BASE, OPS_NEW (optional: minfer_microbench binaries for step ops; OPS_NEW_AVX2 NEW's commit built
#        for AVX2 alone, measured in the same rounds as engine new-avx2), OPS_FILTER (their
#        --benchmark_filter; default BM_MatmulFromDram at 2048x768 and BM_QuantLayoutFromDram, M=1), THREADS (default 2),
#        PROMPT (256), GEN (128), REPS (timed repetitions per measurement, after one warm-up; default 1),
#        DRAM_X (the DRAM step's models hold at least this many times the last cache; default 8),
#        DRAM_TYPES (default "f32 q8_0 q4_0 q4_1 q4_k"), DRAM_GEN (default 64), DRAM_ROUNDS (default rounds),
#        DRAM_ENGINES (the binaries the dram step runs, default "new": each load makes ~4 GB of weights,
#        about a minute on 2 cores, so base's figures come from a run of their own),
#        GREEDY (the binaries greedy_shapes.py runs, of base new base-avx2 new-avx2; default "new"),
#        GREEDY_LLAMA (1: llama-server's answers too; default 0), TMO (seconds one measurement may take
#        before it is recorded as na; default 600), OUTDIR (default a new $PEERS/layout.XXXXXX)
#
# Files (step setup makes the missing Qwen rewrites, and lists every file's tensor types in files.tsv):
#   qwen-q4_k_m   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, as `make models` downloads it
#   qwen-q8_0, qwen-q4_0, qwen-q4_1   llama-quantize --allow-requantize of that file (so requantized from
#                 Q4_K_M: the types' speed, not their quality), in $PEERS/models
#   smollm2-q4_1  SmolLM2-135M-Instruct.Q4_1.gguf, as `make models` downloads it
# Steps:
#   speed   each round, each file: every minfer binary's `bench -p PROMPT -n GEN` and llama-bench's
#           (-p PROMPT -n GEN -ngl 0, its default repacked buffers; once as it is and once with
#           OMP_WAIT_POLICY=passive), the engines' order rotated each round
#   dram    each round, DRAM_ENGINES' decode (tgDRAM_GEN) on preset:stories110M (BM_MatmulFromDram's
#           shapes; Qwen's 896 is no whole K-quant super-block, so minfer's q4_k of that shape is q5_0) with as
#           many layers as make DRAM_X times the last cache in each of DRAM_TYPES (at most 1024); bench's GB/s
#           (bytes a step reads x steps per second) against f32's in the same round and binary
#   ops     each round, BM_MatmulFromDram (stories110M's 2048x768) and BM_QuantLayoutFromDram (Qwen's MLP, file
#           layout and packed) at M=1, working sets of 4x the last cache, in OPS_BASE and OPS_NEW: weight bytes per
#           second against f32's in the same benchmark, shape and threads
#   greedy  bench/peers/greedy_shapes.py on smollm2-q4_1 and qwen-q4_k_m for each binary in GREEDY
#   summary medians and medians of per-round ratios, and the issue's targets (measure_layout.py summary)
# results.tsv columns: kind (speed|dram|ops), round, engine, model, test, tok_s, gbps, bytes_per_step,
#   model_bytes, isa (bench's device name), load1 (the 1-minute load average before the run), time
set -u
BASE=${1:?usage: measure_layout.sh BASE NEW [rounds] [steps]}
NEW=${2:?usage: measure_layout.sh BASE NEW [rounds] [steps]}
ROUNDS=${3:-3}
STEPS=${4:-setup speed dram ops greedy summary}
HERE=$(cd "$(dirname "$0")" && pwd)
P=${PEERS:-/tmp/peers}
LBIN=${LBIN:-$P/llama.cpp-build/bin}
MODELS=${MODELS:-$HOME/.cache/minfer/models}
PY=${PY:-/work/venv-measure/bin/python}
H="$HERE/measure_layout.py"
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-256}
GEN=${GEN:-128}
REPS=${REPS:-1}
DRAM_X=${DRAM_X:-8}
DRAM_TYPES=${DRAM_TYPES:-f32 q8_0 q4_0 q4_1 q4_k}
DRAM_GEN=${DRAM_GEN:-64}
DRAM_ROUNDS=${DRAM_ROUNDS:-$ROUNDS}
DRAM_ENGINES=${DRAM_ENGINES:-new}
GREEDY=${GREEDY:-new}
GREEDY_LLAMA=${GREEDY_LLAMA:-0}
TMO=${TMO:-600}
OPS_FILTER=${OPS_FILTER:-^BM_(MatmulFromDram/M:1/N:2048/K:768|QuantLayoutFromDram/M:1/)}
OUTDIR=${OUTDIR:-$(mktemp -d "$P/layout.XXXXXX")}
mkdir -p "$OUTDIR/logs" "$OUTDIR/bin" "$P/models"
RES=$OUTDIR/results.tsv
export LD_LIBRARY_PATH="$LBIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
load1() { cut -d' ' -f1 /proc/loadavg; }

QWEN=$MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
# "label file" lines, in measuring order
files() {
    echo "qwen-q4_k_m $QWEN"
    for q in q8_0 q4_0 q4_1; do echo "qwen-$q $P/models/qwen2.5-coder-0.5b-instruct-$q.gguf"; done
    echo "smollm2-q4_1 $SMOL"
}

# The binaries, copied; engine names as results.tsv and the summary use them.
declare -A BIN
ENGINES=()
add_engine() { # name path
    [ -x "$2" ] || { echo "missing: $2 ($1)" >&2; exit 2; }
    cp "$2" "$OUTDIR/bin/minfer-$1"
    BIN[$1]=$OUTDIR/bin/minfer-$1
    ENGINES+=("$1")
}
add_engine base "$BASE"
add_engine new "$NEW"
[ -n "${BASE_AVX2:-}" ] && add_engine base-avx2 "$BASE_AVX2"
[ -n "${NEW_AVX2:-}" ] && add_engine new-avx2 "$NEW_AVX2"
# llama.cpp twice: OpenMP's default wait (threads spin between ops) and OMP_WAIT_POLICY=passive. On a
# quiet machine spinning is its best; where other work shares the cores a spinning thread holds a core
# its partner needs, and its decode falls up to 10x (SmolLM2 Q4_1 tg32 2.3-4.0 against 31-57 tok/s at a
# load average of 4.6 on the 2-core Xeon). The summary compares minfer with the better of the two.
ENGINES+=(llama.cpp llama.cpp-passive)
for f in "$LBIN/llama-bench" "$LBIN/llama-quantize" "$QWEN" "$SMOL"; do
    [ -e "$f" ] || { echo "missing: $f" >&2; exit 2; }
done

# The last cache: the largest the OS reports for CPU 0 (lscpu's L3 on one socket).
# meta.tsv: what the run was; a later run into the same OUTDIR adds its lines (the summary reads the last of each key).
L3=$(for s in /sys/devices/system/cpu/cpu0/cache/index*/size; do numfmt --from=iec "$(cat "$s")"; done | sort -n | tail -1)
{
    printf 'cpu\t%s, %s cores\n' "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)"
    printf 'flags\t%s\n' "$(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_int8' | tr '\n' ' ')"
    printf 'threads\t%s\nrounds\t%s\nreps\t%s\ndate\t%s\nl3_mib\t%s\ndram_gen\t%s\n' "$THREADS" "$ROUNDS" "$REPS" \
        "$(date -u '+%Y-%m-%d %H:%M UTC')" "$((L3 >> 20))" "$DRAM_GEN"
    printf 'base\t%s\nnew\t%s\n' "$BASE" "$NEW"
    [ -n "${BASE_AVX2:-}" ] && printf 'base-avx2\t%s\n' "$BASE_AVX2"
    [ -n "${NEW_AVX2:-}" ] && printf 'new-avx2\t%s\n' "$NEW_AVX2"
    printf 'llama\t%s (%s)\n' "$LBIN" "$("$LBIN/llama-bench" --version 2>&1 | grep -m1 version)"
} >>"$OUTDIR/meta.tsv"
cat "$OUTDIR/meta.tsv"
echo "out=$OUTDIR rounds=$ROUNDS steps='$STEPS'"
echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg) (anything above ~0.5 before the run is someone else's work on these cores)"
[ -s "$RES" ] || printf 'kind\tround\tengine\tmodel\ttest\ttok_s\tgbps\tbytes_per_step\tmodel_bytes\tisa\tload1\ttime\n' >"$RES"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$(date +%H:%M:%S)" >>"$RES"; }

# ------------------------------------------------------------------------------------------- setup
if has setup; then
    for q in q8_0 q4_0 q4_1; do
        out=$P/models/qwen2.5-coder-0.5b-instruct-$q.gguf
        [ -s "$out" ] || "$LBIN/llama-quantize" --allow-requantize "$QWEN" "$out" "${q^^}" >"$OUTDIR/logs/quantize-$q.log" 2>&1 \
            || { echo "llama-quantize $q failed ($OUTDIR/logs/quantize-$q.log)" >&2; exit 1; }
    done
    # size, tensors, tensor types (the types each file exercises), and size against the last cache
    "$PY" "$HERE/measure_quants.py" types $(files | cut -d' ' -f2) | awk -F'\t' -v l3="$L3" -v OFS='\t' \
        '{ print $0, sprintf("%.2fx the last cache", $2 / l3) }' >"$OUTDIR/files.tsv"
    cat "$OUTDIR/files.tsv"
    # the bandwidth of each working set, once, as new's roofline probe reads it
    "${BIN[new]}" bench --roofline -m preset:stories15M -p 0 -n 1 -r 1 -t "$THREADS" --device cpu -o json \
        >"$OUTDIR/logs/probe.json" 2>"$OUTDIR/logs/probe.err"
    printf 'probe\t%s\n' "$(sed -n 's/^minfer: streaming reads by working set: //p' "$OUTDIR/logs/probe.err")" >>"$OUTDIR/meta.tsv"
fi

# One measurement; "row" lines into results.tsv.
mf_run() { # kind round engine label model-spec p n [extra bench args...]
    local kind=$1 r=$2 e=$3 label=$4 spec=$5 p=$6 n=$7 lg la
    shift 7
    lg=$OUTDIR/logs/$kind.r$r.$label.$e
    la=$(load1)
    timeout "$TMO" "${BIN[$e]}" bench -m "$spec" -p "$p" -n "$n" -r "$REPS" -t "$THREADS" --device cpu -o json "$@" \
        >"$lg.json" 2>"$lg.err" || echo "  $e $label failed: $(tail -1 "$lg.err")" >&2
    "$PY" "$H" minfer "$lg.json" | while read -r test ts gbps bps mb isa; do
        row "$kind" "$r" "$e" "$label" "$test" "$ts" "$gbps" "$bps" "$mb" "$isa" "$la"
        printf '  %-10s %-14s %-7s %10s tok/s %8s GB/s\n' "$e" "$label" "$test" "$ts" "$gbps"
    done
}
lc_run() { # round engine label file
    local r=$1 e=$2 label=$3 f=$4 lg=$OUTDIR/logs/speed.r$1.$3.$2 la wait=()
    [ "$e" = llama.cpp-passive ] && wait=(env OMP_WAIT_POLICY=passive)
    la=$(load1)
    timeout "$TMO" "${wait[@]}" "$LBIN/llama-bench" -m "$f" -p "$PROMPT" -n "$GEN" -r "$REPS" -t "$THREADS" -ngl 0 -o json \
        >"$lg.json" 2>"$lg.err" || echo "  $e $label failed: $(tail -1 "$lg.err")" >&2
    "$PY" "$H" llama "$lg.json" | while read -r test ts; do
        row speed "$r" "$e" "$label" "$test" "$ts" na na na llama.cpp "$la"
        printf '  %-10s %-14s %-7s %10s tok/s\n' "$e" "$label" "$test" "$ts"
    done
}
rotated() { # round, then the names: the names rotated by the round
    local r=$1; shift
    local a=("$@") n=$# i
    for ((i = 0; i < n; i++)); do echo "${a[$(((i + r - 1) % n))]}"; done
}

# ------------------------------------------------------------------------------------------- speed
if has speed; then
    for r in $(seq 1 "$ROUNDS"); do
        echo "--- speed round $r/$ROUNDS  ($(uptime | sed 's/.*load/load/'))"
        while read -r label f; do
            [ -s "$f" ] || { echo "  missing $f" >&2; continue; }
            for e in $(rotated "$r" "${ENGINES[@]}"); do
                if [ "${e#llama.cpp}" != "$e" ]; then lc_run "$r" "$e" "$label" "$f"; else mf_run speed "$r" "$e" "$label" "$f" "$PROMPT" "$GEN"; fi
            done
        done < <(files)
    done
fi

# ------------------------------------------------------------------------------------------- dram
if has dram; then
    # layers of preset:stories110M (768 and 2048 wide, whole K-quant super-blocks, so every matrix takes the
    # type asked for) for DRAM_X times the last cache in each type, from new's sizes at 1 and 2 layers (at most 1024)
    declare -A SPEC
    for d in $DRAM_TYPES; do
        for l in 1 2; do
            "${BIN[new]}" bench -m "preset:stories110M:layers=$l" --dtype "$d" -p 1 -n 0 -r 1 -t "$THREADS" --device cpu -o json \
                >"$OUTDIR/logs/size.$d.$l.json" 2>"$OUTDIR/logs/size.$d.$l.err"
        done
        b1=$("$PY" "$H" minfer "$OUTDIR/logs/size.$d.1.json" | awk '{print $5}')
        b2=$("$PY" "$H" minfer "$OUTDIR/logs/size.$d.2.json" | awk '{print $5}')
        [ -n "$b1" ] && [ -n "$b2" ] || { echo "  no preset of $d: $(tail -1 "$OUTDIR/logs/size.$d.1.err")" >&2; continue; }
        SPEC[$d]="preset:stories110M:layers=$("$PY" "$H" layers "$b1" "$b2" "$((DRAM_X * L3))")"
        echo "  dram $d: ${SPEC[$d]}"
    done
    printf 'f32_model\t%s\n' "${SPEC[f32]:-none}" >>"$OUTDIR/meta.tsv"
    dram_engines=()
    for e in $DRAM_ENGINES; do [ -n "${BIN[$e]:-}" ] && dram_engines+=("$e"); done
    for r in $(seq 1 "$DRAM_ROUNDS"); do
        echo "--- dram round $r/$DRAM_ROUNDS  ($(uptime | sed 's/.*load/load/'))"
        for d in $DRAM_TYPES; do
            [ -n "${SPEC[$d]:-}" ] || continue
            for e in $(rotated "$r" "${dram_engines[@]}"); do
                mf_run dram "$r" "$e" "$d" "${SPEC[$d]}" 0 "$DRAM_GEN" --dtype "$d"
            done
        done
    done
fi

# ------------------------------------------------------------------------------------------- ops
if has ops && { [ -n "${OPS_BASE:-}" ] || [ -n "${OPS_NEW:-}" ] || [ -n "${OPS_NEW_AVX2:-}" ]; }; then
    declare -A OPS
    [ -n "${OPS_BASE:-}" ] && cp "$OPS_BASE" "$OUTDIR/bin/microbench-base" && OPS[base]=$OUTDIR/bin/microbench-base
    [ -n "${OPS_NEW:-}" ] && cp "$OPS_NEW" "$OUTDIR/bin/microbench-new" && OPS[new]=$OUTDIR/bin/microbench-new
    [ -n "${OPS_NEW_AVX2:-}" ] && cp "$OPS_NEW_AVX2" "$OUTDIR/bin/microbench-new-avx2" &&
        OPS[new-avx2]=$OUTDIR/bin/microbench-new-avx2
    for r in $(seq 1 "$ROUNDS"); do
        echo "--- ops round $r/$ROUNDS"
        for e in $(rotated "$r" "${!OPS[@]}"); do
            lg=$OUTDIR/logs/ops.r$r.$e
            la=$(load1)
            timeout "$TMO" "${OPS[$e]}" --benchmark_filter="$OPS_FILTER" \
                --benchmark_format=json >"$lg.json" 2>"$lg.err" || echo "  ops $e failed" >&2
            "$PY" "$H" ops "$lg.json" | while read -r label t gbps; do
                row ops "$r" "$e" "$label" "$t" na "$gbps" na na na "$la"
                printf '  %-5s %-40s threads %s %8s GB/s\n' "$e" "$label" "$t" "$gbps"
            done
        done
    done
fi

# ------------------------------------------------------------------------------------------- greedy
if has greedy; then
    first=1
    for e in $GREEDY; do
        [ -n "${BIN[$e]:-}" ] || { echo "  greedy: no binary $e" >&2; continue; }
        for label in smollm2-q4_1 qwen-q4_k_m; do
            f=$(files | awk -v l="$label" '$1 == l {print $2}')
            lflag=()
            [ "$GREEDY_LLAMA" = 1 ] && [ $first = 1 ] && lflag=(--llama-server "$LBIN/llama-server")
            echo "--- greedy_shapes $e $label  ($(uptime | sed 's/.*load/load/'))"
            # passive OpenMP waits for llama-server: the answers are the same, and a spinning server on shared
            # cores takes many minutes a shape (see ENGINES above)
            timeout 3600 env OMP_WAIT_POLICY=passive python3 "$HERE/greedy_shapes.py" --minfer "${BIN[$e]}" --model "$f" --threads "$THREADS" \
                "${lflag[@]}" --out "$OUTDIR/greedy.$e.$label.json" 2>"$OUTDIR/logs/greedy.$e.$label.err" \
                || echo "  greedy_shapes $e $label failed: $(tail -1 "$OUTDIR/logs/greedy.$e.$label.err")" >&2
        done
        first=0
    done
fi

# ------------------------------------------------------------------------------------------- summary
has summary && "$PY" "$H" summary "$OUTDIR"
echo "results: $OUTDIR (summary.md, summary.json, results.tsv, files.tsv)"
