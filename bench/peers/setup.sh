#!/usr/bin/env bash
# Builds the peers that bench/peers/measure_decode.sh runs minfer against, outside the repository
# (default /tmp/peers), and writes the same seeded stories110M-shaped weights three ways:
#   s110.bin        llama2.c v0 checkpoint (run.c and minfer)
#   s110-f32.gguf   the same weights as GGUF F32 (llama.cpp f32)
#   s110-q8_0.gguf  llama-quantize's Q8_0 of it (llama.cpp Q8_0, and minfer reading llama.cpp's file)
# usage: bench/peers/setup.sh RUN_C LLAMA_CPP_SRC [PEERS=/tmp/peers]
#   RUN_C          karpathy/llama2.c's run.c (commit 350e04f was used), read from the project
#   LLAMA_CPP_SRC  a llama.cpp source tree, e.g. vendor/llama.cpp of `pip download --no-binary :all:
#                  llama-cpp-python==0.3.36` (built here with its tools and llama-server, with OpenMP
#                  and exactly the instruction sets /proc/cpuinfo lists)
set -euo pipefail
RUN_C=$1
LLAMA_SRC=$2
PEERS=${3:-/tmp/peers}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MINFER=$ROOT/build/minfer
TOKENIZER=$ROOT/../shared/golden/tokenizer.bin
mkdir -p "$PEERS"
[ -x "$MINFER" ] || { echo "build minfer first (make)" >&2; exit 1; }
[ -f "$TOKENIZER" ] || { echo "missing $TOKENIZER (llama2.c's tokenizer, from ../shared/golden)" >&2; exit 1; }

# run.c as llama2.c's Makefile builds its fastest OpenMP variant.
gcc -Ofast -march=native -fopenmp -o "$PEERS/run" "$RUN_C" -lm
# llama.cpp's ISA options, each ON where /proc/cpuinfo lists its flag, with GGML_NATIVE=OFF: a build
# that uses an extension the CPU lacks (AMX, AVX512_BF16) dies with SIGILL, so it names exactly
# what this CPU has (rebuild it on another CPU).
ggml_isa_options() {
  local flags pair
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 amx_tile:AMX_TILE \
              amx_int8:AMX_INT8 amx_bf16:AMX_BF16; do
    case $flags in *" ${pair%%:*} "*) echo "-DGGML_${pair#*:}=ON" ;; *) echo "-DGGML_${pair#*:}=OFF" ;; esac
  done
}
# llama.cpp's tools: llama-bench, llama-quantize, llama-perplexity, the speculative decoding examples
# llama-speculative and llama-lookup (bench/peers/measure_speculative.py), and llama-server
# (bench/peers/serve_compare.sh).
# shellcheck disable=SC2046
cmake -S "$LLAMA_SRC" -B "$PEERS/llama.cpp-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF $(ggml_isa_options) \
  -DGGML_OPENMP=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF >/dev/null
cmake --build "$PEERS/llama.cpp-build" -j "$(nproc)" --target llama-bench llama-quantize llama-perplexity \
  llama-speculative llama-lookup llama-server
# One seed, three files: minfer's writers draw the same weights for every format.
"$MINFER" make-model --preset stories110M -o "$PEERS/s110.bin"
"$MINFER" make-model --preset stories110M --format gguf -z "$TOKENIZER" -o "$PEERS/s110-f32.gguf"
LD_LIBRARY_PATH="$PEERS/llama.cpp-build/bin" "$PEERS/llama.cpp-build/bin/llama-quantize" \
  "$PEERS/s110-f32.gguf" "$PEERS/s110-q8_0.gguf" Q8_0 >"$PEERS/quantize.log" 2>&1
echo "peers ready in $PEERS"
