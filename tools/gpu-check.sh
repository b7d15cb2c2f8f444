#!/usr/bin/env bash
# The GPU proof in one call: builds minfer for the GPU at hand, runs every CUDA test in one
# process, benchmarks decode and prefill against the measured roofline, times a PyTorch peer on
# the same shapes, runs the demos while time is left, and brings back one archive and a summary
# that is enough alone. Made for a lent GPU machine (docs/gpu.md): a lease of 15 minutes in all,
# one call of at most 6, which may bring back at most 8 files.
#
#   tools/gpu-check.sh --prepare
#       here, before the lease: copies what the GPU machine lacks (it has no package registry)
#       into .gpu-deps/: Eigen's and nlohmann-json's headers, PCRE2's header and static library,
#       GoogleTest's sources, XGrammar's sources (when `make deps` fetched them: structured
#       outputs, and the grammar masks on a GPU's decode), and the stories260K golden files, so
#       that the golden tests run there too.
#   tools/gpu-check.sh OUTDIR
#       there: run(command="tools/gpu-check.sh $OUT", carry=[".gpu-deps"], timeout_s=360).
#       OUTDIR receives gpu-check.tar.gz (every log, JSON and table) and summary.txt.
#   tools/gpu-check.sh --dry-run OUTDIR [--build-dir DIR] [--no-build]
#       here, without a GPU: the same steps with the CPU build in DIR (default build/; CUDA tests
#       skipped, small benches, quick demos), the same archive and summary. `make test` runs it.
#
# The order puts the most valuable results first: the build, the CUDA op and end-to-end tests
# (golden agreement included), a short compute-sanitizer pass (memcheck and racecheck over 17
# op cases), decode and prefill with the roofline, graphs and fusion ratios, the PyTorch
# peer, then demos. Each step gets a time limit from what is left of the budget
# (GPU_CHECK_SECONDS, default 330), so the archive and the summary always come back.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = "--prepare" ]; then
  rm -rf .gpu-deps && mkdir -p .gpu-deps/golden
  cp -r /usr/include/eigen3 .gpu-deps/eigen3
  cp -r /usr/src/googletest .gpu-deps/googletest
  mkdir -p .gpu-deps/json && cp -r /usr/include/nlohmann .gpu-deps/json/nlohmann
  # PCRE2 for the tokenizers' regexes: its header and the static library, linked into minfer there.
  mkdir -p .gpu-deps/pcre2 && cp /usr/include/pcre2.h /usr/lib/x86_64-linux-gnu/libpcre2-8.a .gpu-deps/pcre2/
  # XGrammar's C++ core, as CMakeLists.txt compiles it (its sources, headers, picojson, dlpack).
  xgrammar=$HOME/.cache/minfer/deps/xgrammar-0.2.9
  if [ -f "$xgrammar/cpp/grammar_matcher.cc" ]; then
    mkdir -p .gpu-deps/xgrammar/3rdparty
    cp -r "$xgrammar/cpp" "$xgrammar/include" .gpu-deps/xgrammar/
    cp -r "$xgrammar/3rdparty/picojson" "$xgrammar/3rdparty/dlpack" .gpu-deps/xgrammar/3rdparty/
  else
    echo "note: $xgrammar is absent (make deps): the GPU build goes without structured outputs"
  fi
  golden=${MINFER_GOLDEN_DIR:-../shared/golden}
  for f in stories260K.bin stories260K.greedy.ids stories260K.sample-t1.0-p0.9-s133742.ids \
           stories260K.greedy.logits-8x512.f32 tokenizer.bin tokenizer.cases.tsv; do
    if [ -f "$golden/$f" ]; then cp "$golden/$f" .gpu-deps/golden/; else echo "note: $golden/$f is absent"; fi
  done
  du -sh .gpu-deps
  exit 0
fi

dry=0; build_dir=""; no_build=0; out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --build-dir) build_dir=$2; shift ;;
    --no-build) no_build=1 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "usage: tools/gpu-check.sh [--dry-run [--build-dir DIR] [--no-build]] OUTDIR | --prepare" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
if [ $dry -eq 1 ]; then build_dir=${build_dir:-build}; else build_dir=${build_dir:-build-gpu}; fi
build_dir=$(mkdir -p "$build_dir" && cd "$build_dir" && pwd)
work=$build_dir/gpu-check-work
rm -rf "$work" && mkdir -p "$work"
start=$(date +%s)
total=${GPU_CHECK_SECONDS:-330}
left() { echo $(( total - ($(date +%s) - start) )); }
say() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$work/progress.log" >&2; }
status=0

finish() {  # the summary and the archive, whatever happened before
  /usr/bin/env python3 "$root/tools/gpu_check_summary.py" "$work" > "$work/summary.txt" 2>> "$work/progress.log" \
    || echo "summary failed: see progress.log" > "$work/summary.txt"
  cp "$work/summary.txt" "$out/summary.txt"
  tar czf "$out/gpu-check.tar.gz" -C "$work" . 2>/dev/null
  cat "$out/summary.txt"
  exit $status
}

# --- the machine and the build ---
if [ $dry -eq 1 ]; then
  echo "dry run: no GPU; the CPU build in $build_dir" > "$work/gpu.txt"
  arch=""
else
  nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader \
    > "$work/gpu.txt" 2>&1
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  if [ -z "$arch" ]; then
    say "FAIL: nvidia-smi reports no GPU"; echo "FAIL: nvidia-smi reports no GPU" > "$work/build.txt"; status=1; finish
  fi
fi
say "machine: $(head -1 "$work/gpu.txt")"

if [ $dry -eq 0 ]; then
  deps=$root/.gpu-deps
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DMINFER_BENCH=OFF -DMINFER_WERROR=OFF -DMINFER_EIGEN_INCLUDE="$deps/eigen3" \
    -DMINFER_GTEST_SOURCE="$deps/googletest" -DMINFER_JSON_INCLUDE="$deps/json" \
    -DMINFER_PCRE2_DIR="$deps/pcre2" -DMINFER_XGRAMMAR_DIR="$deps/xgrammar" > "$work/build.log" 2>&1 \
    && timeout "$(left)" cmake --build "$build_dir" -j "$(nproc)" --target minfer minfer_tests >> "$work/build.log" 2>&1
  built=$?
elif [ $no_build -eq 1 ]; then
  echo "reused $build_dir as it is" > "$work/build.log"; built=0
else
  timeout "$(left)" cmake --build "$build_dir" -j "$(nproc)" --target minfer minfer_tests > "$work/build.log" 2>&1
  built=$?
fi
bin=$build_dir/minfer
tests=$build_dir/tests/minfer_tests
if [ $built -ne 0 ] || [ ! -x "$bin" ] || [ ! -x "$tests" ]; then
  say "FAIL: the build failed (build.log)"; tail -30 "$work/build.log" >&2
  echo "FAIL: the build failed" > "$work/build.txt"; status=1; finish
fi
"$bin" devices > "$work/devices.txt" 2>&1
grep -h "minfer: CUDA backend\|minfer: nvcc not found\|minfer: CUDA backend disabled" "$work/build.log" > "$work/build.txt"
head -1 "$work/devices.txt" >> "$work/build.txt"
if [ $dry -eq 0 ]; then
  # A CPU-only build would skip every CUDA test and pass: refuse it loudly.
  if ! grep -q "^build: CUDA backend for .*sm_$arch" "$work/devices.txt" || ! grep -q "^cuda:0:" "$work/devices.txt"; then
    say "FAIL: this build has no CUDA backend for sm_$arch, or sees no GPU (devices.txt)"
    echo "FAIL: no CUDA backend for sm_$arch or no GPU seen" >> "$work/build.txt"; status=1; finish
  fi
fi
say "built: $(tail -1 "$work/build.txt")"

# --- CUDA tests, in one process: every op against its reference, end to end, golden agreement ---
golden=$root/.gpu-deps/golden
[ -f "$golden/stories260K.bin" ] || golden=${MINFER_GOLDEN_DIR:-$root/../shared/golden}
filter='*cuda*:Cuda.*:WholeModel.Cuda*'
MINFER_GOLDEN_DIR=$golden timeout $(( $(left) - 150 > 30 ? $(left) - 150 : 30 )) "$tests" --gtest_filter="$filter" \
  --gtest_output=json:"$work/tests.json" > "$work/tests.log" 2>&1
test_status=$?
[ $test_status -eq 0 ] || status=1
say "CUDA tests: exit $test_status"

# --- compute-sanitizer: memcheck and racecheck over paged attention, Tensor Core prefill, the ---
# quantized products and the mixture of experts' ops, a few op-harness cases each (tests/test_backend_ops.cpp), every one of which
# must exist; sanitizer.md has a line per tool: its error count, the tests passed, the seconds.
sanitizer_cases=(
  cuda_KV_STORE_M3_4x2x10_f16_strided_scattered                    # paged: writes through a scattered table
  cuda_ATTENTION_THREE_PASS_M3_6x3x64_f16_window100_scattered      # paged decode, three passes, a window
  cuda_ATTENTION_ONLINE_SOFTMAX_M3_6x3x64_f16_window100_scattered  # paged decode, flash-decoding, a window
  cuda_ATTENTION_ONLINE_SOFTMAX_M8_8x2x64_f16_strided_scattered
  cuda_ATTENTION_PREFILL_M130_8x2x64_f16_scattered                 # Tensor Core tiles, a partial last tile
  cuda_ATTENTION_PREFILL_M130_4x2x64_f16_window100_shared
  cuda_ATTENTION_PREFILL_M130_4x2x128_bf16_window100
  cuda_MUL_MAT_M1_100x288_q8_0_strided                             # the quantized matvec (M <= 8)
  cuda_MUL_MAT_M3_33x96_q4_0_strided
  cuda_MUL_MAT_M1_33x512_q4_k
  cuda_MUL_MAT_M3_33x512_q6_k_strided
  cuda_MUL_MAT_M8_33x512_q5_k
  cuda_MUL_MAT_M17_33x512_q4_k_strided                             # gemm_quant_rows (9 to 64 rows)
  cuda_ATTENTION_ONLINE_SOFTMAX_M512_8x2x64_f16                    # prefill tiles beside flash-decoding
  cuda_ROUTE_EXPERTS_M100_60x0_f32_top3                            # a mixture of experts' router
  cuda_MUL_MAT_EXPERTS_WEIGHTED_M8_37x96x6_q4_0_strided_top3       # matvec_experts and the weighted sum
  cuda_MUL_MAT_EXPERTS_M100_37x512x6_q4_k_top3                     # K-quant experts, grouped: 67 rows for expert 0, ~58 for 1-4, none for 5
)
sanitize() {
  local filter="" c tool cs listed
  for c in "${sanitizer_cases[@]}"; do filter+="${filter:+:}All/BackendOps.MatchesReference/$c"; done
  listed=$("$tests" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')
  if [ "$listed" -ne ${#sanitizer_cases[@]} ]; then
    echo "cases: FAIL: ${#sanitizer_cases[@]} named, $listed found (renamed in tests/test_backend_ops.cpp?)" >> "$work/sanitizer.md"
    status=1
  fi
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  for tool in memcheck racecheck; do
    local limit=$(( $(left) - 200 )); [ "$limit" -gt 60 ] && limit=60
    if [ $dry -eq 1 ]; then echo "$tool: skipped: dry run (no GPU); $listed CUDA cases found" >> "$work/sanitizer.md"; continue; fi
    if [ -z "$cs" ]; then echo "$tool: skipped: compute-sanitizer not found" >> "$work/sanitizer.md"; continue; fi
    if [ "$limit" -lt 20 ]; then echo "$tool: skipped: out of time" >> "$work/sanitizer.md"; continue; fi
    local log=$work/sanitizer-$tool.log t0 rc errors passed skipped
    t0=$(date +%s)
    timeout "$limit" "$cs" --tool "$tool" --error-exitcode 86 --print-limit 10 "$tests" --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -1)
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    local result="${errors:-?} errors, ${passed:-0} of $listed tests passed, ${skipped:-0} skipped ($(( $(date +%s) - t0 )) s)"
    if [ $rc -eq 124 ] && [ "${errors:-0}" = 0 ]; then  # slow, not wrong: said, not failed
      echo "$tool: stopped at its time limit of $limit s: $result" >> "$work/sanitizer.md"
    elif [ $rc -ne 0 ] || [ "${errors:-?}" != 0 ] || [ "${passed:-0}" != "$listed" ]; then
      echo "$tool: FAIL (exit $rc): $result; first: $(grep -m1 -E '^========= +(Invalid|Error|Race|Program hit|Barrier)' "$log" | cut -c1-160)" >> "$work/sanitizer.md"
      status=1
    else
      echo "$tool: $result" >> "$work/sanitizer.md"
    fi
  done
  say "sanitizer done"
}
sanitize

# --- benches: decode and prefill against the roofline first ---
bench() {  # NAME, then the bench arguments; each gets what is left minus a reserve
  local name=$1; shift
  local limit=$(( $(left) - 60 ))
  if [ "$limit" -lt 15 ]; then say "skipped bench $name: out of time"; echo "skipped: out of time" > "$work/bench-$name.skipped"; return; fi
  timeout "$limit" "$bin" bench "$@" --save-json "$work/bench-$name.json" > "$work/bench-$name.md" 2> "$work/bench-$name.log" \
    || say "bench $name stopped early (exit $?): see bench-$name.log"
  say "bench $name done"
}
if [ $dry -eq 0 ]; then
  bench decode -m preset:llama-1b -m preset:llama-7b -p 0 -n 128 -B 1,8,64 --dtype f16 -r 3 --roofline
  bench decode-q8_0 -m preset:llama-1b -m preset:llama-7b -p 512 -n 128 -B 1,8 --dtype q8_0 -r 3 --roofline
  # GGUF's 4-bit K-quant against Q8_0 and f16 on llama-7b's shape (the presets' q4_k are random blocks)
  bench decode-q4_k -m preset:llama-7b -p 512 -n 128 -B 1 --dtype q4_k,q8_0,f16 -r 3 --roofline
  # llama-quantize's Q4_K_M mix (Q4_K and Q6_K matrices) with the KV cache's default type for it
  # (default_kv_dtype: f16), as a Q4_K_M GGUF file runs
  bench decode-q4_k_m -m preset:llama-1b -p 256 -n 64 -B 1,8 --dtype q4_k_m -r 2
  bench prefill -m preset:llama-1b -m preset:llama-7b -p 2048 -n 0 -B 1 --dtype f16 -r 3 --roofline
  bench graphs-fusion -m preset:stories110M -p 0 -n 128 -B 1 --dtype f16 --kernels fused,unfused --graphs on,off -r 3
  bench decode-f32 -m preset:llama-7b -p 0 -n 64 -B 1 --dtype f32 -r 2 --roofline
  bench gemm-mma -m preset:llama-1b -p 512 -n 0 -B 1 --dtype f16 --gemm mma -r 2
  # Qwen2's shape: q, k and v biases (the broadened add), 14/2 heads, a 151,936 x 896 classifier
  bench qwen2 -m preset:qwen2.5-0.5b -p 512 -n 128 -B 1,8 --dtype f16,q4_k_m -r 2 --roofline
  # Qwen3: per-head q and k norms (rmsnorm over runs), heads of 128
  bench qwen3 -m preset:qwen3-0.6b -p 512 -n 128 -B 1,8 --dtype f16 -r 2 --roofline
  # Gemma 3: GeGLU, post norms, heads of 256 (the exact prefill path), windows of 512 in 5 layers
  # of 6 (a prompt of 1024 crosses them), a 262,144 x 640 classifier
  bench gemma3 -m preset:gemma3-270m -p 1024 -n 128 -B 1,8 --dtype f16,q4_k_m -r 2 --roofline
  # Issue 57's GPU cliffs (the serving trace of mixed steps is in serving(), the activations past
  # f16's range are Cuda.ProductsTakeActivationsPastF16Range among the CUDA tests). Quantized
  # products of a few rows read each weight once: batched decode at 8 rows (matvec), 9 to 64
  # (gemm_quant_rows) and 65 (f16 slabs and cuBLASLt); tok/s should not fall from 8 to 9 rows.
  bench quant-rows -m preset:llama-7b -p 0 -n 32 -B 8,9,16,32,64,65 --dtype q4_k,q8_0 -r 2
  # Flash-decoding's splits by the GPU and the step, not n_ctx / 256: one long sequence, and 16.
  bench flash-splits -m preset:qwen2.5-0.5b -p 4096 -n 64 -B 1,16 --dtype f16 -r 2
else
  bench decode -m preset:stories15M -p 0 -n 8 -B 1,4 -r 1 --device cpu
  bench decode-q8_0 -m preset:stories15M -p 16 -n 8 -B 1 --dtype q8_0 -r 1 --device cpu
  bench decode-q4_k -m preset:stories42M -p 16 -n 8 -B 1 --dtype q4_k -r 1 --device cpu
  bench decode-q4_k_m -m preset:stories42M -p 16 -n 8 -B 1 --dtype q4_k_m -r 1 --device cpu
  bench prefill -m preset:stories15M -p 32 -n 0 -B 1 -r 1 --device cpu
  bench graphs-fusion -m preset:tiny -p 0 -n 8 -B 1 --kernels fused,unfused -r 1 --device cpu
  bench qwen2 -m preset:qwen2.5-0.5b:layers=1 -p 16 -n 8 -B 1 --dtype q8_0 -r 1 --device cpu
  bench gemma3 -m preset:gemma3-270m:layers=1 -p 16 -n 8 -B 1 --dtype q8_0 -r 1 --device cpu
  bench quant-rows -m preset:stories15M -p 0 -n 4 -B 8,9 --dtype q8_0 -r 1 --device cpu
fi

# --- speculative decoding: the same greedy ids with fewer target passes ---
# The model decodes 128 tokens plainly, with its own q8_0 weights as the draft (k = 4), and with
# prompt lookup; speculative.md has each run's decode line and whether its ids equal the plain run's.
speculative() {
  local limit=$(( $(left) - 60 )) model=preset:llama-1b args=(--dtype f16)
  [ $dry -eq 1 ] && { model=preset:tiny; args=(--device cpu); }
  if [ "$limit" -lt 20 ]; then say "skipped speculative: out of time"; echo "skipped: out of time" > "$work/speculative.md"; return; fi
  local name draft
  for name in plain q8_0-draft ngram; do
    case $name in plain) draft=() ;; q8_0-draft) draft=(--draft "$model" --draft-dtype q8_0 --draft-k 4) ;; ngram) draft=(--draft ngram) ;; esac
    local ok=1
    timeout "$limit" "$bin" generate -m "$model" "${args[@]}" --prompt-ids 1,450,49,173 -n 128 --temp 0 --ignore-eos \
      --print-ids "${draft[@]}" > "$work/speculative-$name.ids" 2> "$work/speculative-$name.log" || ok=0
    [ -s "$work/speculative-$name.ids" ] || ok=0
    { echo "$model, $name: $(grep -E 'minfer: +eval time' "$work/speculative-$name.log" | sed 's/minfer: *//')"
      [ $ok -eq 1 ] || echo "  FAIL: generate failed: $(tail -1 "$work/speculative-$name.log")"
      grep -E 'speculative \(' "$work/speculative-$name.log" | sed 's/minfer: /  /'
      [ $name = plain ] || { cmp -s "$work/speculative-plain.ids" "$work/speculative-$name.ids" && echo "  ids equal the plain run's" || echo "  FAIL: ids differ from the plain run's"; }
    } >> "$work/speculative.md"
  done
  grep -q FAIL "$work/speculative.md" && status=1
  say "speculative done"
}
speculative

# --- tensor parallelism at one rank (issue 54): decode under mpirun -np 1, the model's collectives
# through NCCL on the one GPU (MPI on the CPU in a dry run), the same greedy ids as without mpirun.
# NCCL's own cases ran with the CUDA tests (tests/test_cuda_nccl.cpp); nccl.md has this run. ---
nccl() {
  local model="$root/tests/data/models/qwen2-f32.gguf" device=(--device cuda) as_root=()
  [ $dry -eq 1 ] && device=(--device cpu)
  [ "$(id -u)" = 0 ] && as_root=(--allow-run-as-root)
  if ! command -v mpirun > /dev/null; then
    echo "skipped: no mpirun on this machine (the CUDA tests ran NCCL's cases)" > "$work/nccl.md"; return
  fi
  local run=(generate -m "$model" "${device[@]}" --prompt-ids 1,5,9,3,7 -n 24 --temp 0 --print-ids)
  timeout 60 "$bin" "${run[@]}" > "$work/nccl-plain.ids" 2> "$work/nccl-plain.log"
  timeout 60 mpirun "${as_root[@]}" -np 1 "$bin" "${run[@]}" > "$work/nccl-ranks.ids" 2> "$work/nccl-ranks.log"
  { echo "$model under mpirun -np 1:"
    grep -E 'tensor parallel' "$work/nccl-ranks.log" | sed 's/minfer: /  /'
    if [ -s "$work/nccl-plain.ids" ] && cmp -s "$work/nccl-plain.ids" "$work/nccl-ranks.ids"; then
      echo "  ids equal the run without mpirun"
    else
      echo "  FAIL: ids differ from the run without mpirun, or a run failed: $(tail -1 "$work/nccl-ranks.log")"
    fi
  } > "$work/nccl.md"
  grep -q FAIL "$work/nccl.md" && status=1
  say "nccl done"
}
nccl

# --- serving with a pool of KV blocks: one trace in a budget of 4 whole contexts, as 4 slots and ---
# as blocks shared by up to 64 slots (engine/block_pool.h); then (issue 57) mixed steps of more
# than 64 rows, 96 slots decoding beside prompt chunks of 256 rows in contexts of 8192 positions
# that the requests fill a fraction of: the prefill tiles and flash-decoding in one step, and
# flash-decoding's splits sized by the step rather than the context. serving.md has each table.
serving() {
  local limit=$(( $(left) - 60 )) model=preset:llama-1b args=(--dtype f16) requests=128 prompts=16-512 outputs=16-256
  [ $dry -eq 1 ] && { model=preset:tiny; args=(--device cpu); requests=16 prompts=8-64 outputs=8-32; }
  if [ "$limit" -lt 30 ]; then say "skipped serving: out of time"; echo "skipped: out of time" > "$work/serving.md"; return; fi
  local lo=${prompts%-*} hi=${prompts#*-} olo=${outputs%-*} ohi=${outputs#*-}
  local ctx=$(( hi + ohi - 1 ))
  # The budget in MiB: 4 contexts of whole 64-position blocks, as the whole-contexts run reserves them.
  local mib
  mib=$("$bin" bench-serve -m "$model" "${args[@]}" --policy continuous --slots 4 --requests 1 \
          --prompt-len "$lo-$lo" --output-len "$olo-$olo" --ctx "$ctx" 2>&1 >/dev/null \
        | sed -n 's/.*KV cache \([0-9.]*\) \([KMG]\)iB.*/\1 \2/p' | head -1)
  mib=$(echo "${mib:-1 M}" | python3 -c "import math, sys; v, u = sys.stdin.read().split(); print(max(1, math.ceil(float(v) * {'K': 1 / 1024, 'M': 1, 'G': 1024}[u])))")
  local name slots extra
  for name in whole-contexts blocks; do
    case $name in whole-contexts) slots=4 extra=() ;; blocks) slots=64 extra=(--kv-cache-mib "$mib") ;; esac
    { echo "$model, $name ($slots slots, a budget of about $mib MiB):"
      timeout "$limit" "$bin" bench-serve -m "$model" "${args[@]}" --policy continuous --slots "$slots" "${extra[@]}" \
        --requests "$requests" --prompt-len "$prompts" --output-len "$outputs" --ctx "$ctx" 2> "$work/serving-$name.log" \
        | grep -E '^\| continuous' || echo "  FAIL: bench-serve failed: $(tail -1 "$work/serving-$name.log")"
    } >> "$work/serving.md"
  done
  local mixed=(--slots 96 --ctx 8192 --step-tokens 256)
  [ $dry -eq 1 ] && mixed=(--slots 8 --ctx 512 --step-tokens 32)
  { echo "$model, mixed steps (${mixed[*]}):"
    timeout "$limit" "$bin" bench-serve -m "$model" "${args[@]}" --policy continuous "${mixed[@]}" \
      --requests "$requests" --prompt-len "$prompts" --output-len "$outputs" 2> "$work/serving-mixed.log" \
      | grep -E '^\| continuous' || echo "  FAIL: bench-serve failed: $(tail -1 "$work/serving-mixed.log")"
  } >> "$work/serving.md"
  grep -q FAIL "$work/serving.md" && status=1
  say "serving done"
}
serving

# --- the PyTorch peer on the shapes of the decode and prefill rows above ---
if [ "$(left)" -ge 60 ]; then
  if [ $dry -eq 0 ]; then peer_args=(--preset llama-1b --dtype f16 --decode 128 --batch 1,8 --prefill 2048 --device cuda)
  else peer_args=(--preset tiny --dtype f32 --decode 8 --batch 1,2 --prefill 32 --device cpu); fi
  timeout $(( $(left) - 40 )) python3 "$root/tools/torch_peer.py" "${peer_args[@]}" --json "$work/peer.json" \
    > "$work/peer.log" 2>&1 || say "peer stopped (exit $?): see peer.log"
  say "peer done"
else
  echo "skipped: under a minute left" > "$work/peer.log"
fi

# --- demos while time is left ---
limit=$(( $(left) - 20 ))
if [ "$limit" -gt 20 ]; then
  quick=(); [ $dry -eq 1 ] && quick=(--quick)
  timeout "$limit" "$bin" demo all "${quick[@]}" --out "$work/demos" > "$work/demos.md" 2> "$work/demos.log" \
    || say "demos stopped early"
  say "demos done"
fi
say "total $(( $(date +%s) - start )) s"
finish
