#!/usr/bin/env bash
# The GPU check: one prepared script for a machine with an NVIDIA GPU (DEVELOPERS.md: the device
# tool). It builds minfer for that GPU only, runs the CUDA tests, benchmarks decode and prefill
# against the measured roofline, runs the demos, and writes logs, JSON and markdown to OUTDIR,
# then prints a one-screen summary. Designed to finish within 8 minutes on an H100/H200.
#
#   tools/gpu-check.sh --prepare      here, before: copies Eigen's headers and GoogleTest's
#                                     sources into .gpu-deps/ (the GPU machine has no packages)
#   tools/gpu-check.sh OUTDIR         there: carry .gpu-deps, e.g. with the device tool's
#                                     run(command="tools/gpu-check.sh $OUT/gpu", carry=[".gpu-deps"])
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  rm -rf .gpu-deps && mkdir -p .gpu-deps
  cp -r /usr/include/eigen3 .gpu-deps/eigen3
  cp -r /usr/src/googletest .gpu-deps/googletest
  du -sh .gpu-deps
  exit 0
fi

out=${1:?usage: tools/gpu-check.sh OUTDIR | --prepare}
mkdir -p "$out"
start=$(date +%s)
say() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$out/progress.log"; }
budget() { echo $(( 480 - ($(date +%s) - start) )); }  # seconds left of the 8 minutes

nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$out/gpu.csv" 2>&1
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$arch" ] || arch=90
say "GPU: $(tail -1 "$out/gpu.csv"), building for sm_$arch only"

generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DMINFER_BENCH=OFF -DMINFER_WERROR=OFF -DMINFER_EIGEN_INCLUDE="$PWD/.gpu-deps/eigen3" -DMINFER_GTEST_SOURCE="$PWD/.gpu-deps/googletest" \
  > "$out/build.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >> "$out/build.log" 2>&1
if [ $? -ne 0 ]; then say "BUILD FAILED"; tail -40 "$out/build.log"; exit 1; fi
say "built"
bin=build-gpu/minfer
"$bin" devices > "$out/devices.txt" 2>&1

# CUDA tests: every op on CUDA against its reference, and end to end against run.c and the CPU.
timeout 150 ctest --test-dir build-gpu -R 'cuda|Cuda' -j 4 --output-on-failure > "$out/tests.log" 2>&1
tests=$(grep -E "tests passed|tests failed" "$out/tests.log" | tail -1)
say "CUDA tests: $tests"

bench() {  # name, then bench arguments; each bench gets a time limit from what is left
  local name=$1; shift
  local limit=$(( $(budget) - 60 ))
  if [ "$limit" -lt 20 ]; then say "skipped $name: out of time"; return; fi
  timeout "$limit" "$bin" bench "$@" --save-json "$out/$name.json" > "$out/$name.md" 2> "$out/$name.log" \
    || say "$name stopped early (exit $?): see $name.log"
  say "bench $name done"
}
bench decode-7b -m preset:llama-7b -m preset:llama-1b -p 0 -n 128 -B 1,8,64 --dtype f16 -r 3 --roofline
bench prefill-7b -m preset:llama-7b -p 2048 -n 0 -B 1 --dtype f16 -r 3 --roofline
bench kernels-110m -m preset:stories110M -p 512 -n 128 -B 1,8,64 --dtype f32,f16 --kernels fused,unfused \
  --graphs on,off -r 3
bench f32-7b -m preset:llama-7b -p 0 -n 64 -B 1 --dtype f32 -r 2
bench gemm-1b -m preset:llama-1b -p 512 -n 64 -B 1,8 --dtype f16 --gemm mma -r 2

limit=$(( $(budget) - 20 ))
if [ "$limit" -gt 20 ] && "$bin" help 2>/dev/null | grep -q demo; then
  timeout "$limit" "$bin" demo all --out "$out/demos" > "$out/demos.md" 2> "$out/demos.log" || say "demos stopped early"
  say "demos done"
fi

summary() {
  echo "== minfer gpu-check summary ($(tail -1 "$out/gpu.csv")) =="
  echo "CUDA tests: $tests"
  grep -h "roofline on" "$out"/*.log 2>/dev/null | sort -u | head -3
  echo "-- decode (tg) and prefill (pp), f16, graphs on, fused:"
  grep -h "| preset:llama-7b\|| preset:llama-1b" "$out/decode-7b.md" "$out/prefill-7b.md" 2>/dev/null | cut -c1-160
  echo "-- stories110M, f16 tg128 at B=1: graphs and fusion:"
  grep -h "| 1 | tg128" "$out/kernels-110m.md" 2>/dev/null | grep " f16 " | cut -c1-160
  echo "total $(( $(date +%s) - start )) s; files in $out"
}
summary | tee "$out/summary.txt"
