#!/usr/bin/env bash
# Checks that run without a GPU:
#   1. the Tensor Core kernels compile to PTX that contains Tensor Core instructions
#      (mma.sync, which WMMA lowers to as wmma.mma.sync, or wgmma) for sm_80 and sm_90;
#   2. ptxas compiles at least one kernel of each file and reports no register spills in the hot kernels (decode matvec, attention, RMSNorm,
#      RoPE, the Tensor Core GEMM, prefill attention and the quantized rows product) for sm_80 and sm_90.
# Usage: check_cuda_ptx.sh NVCC SOURCE_DIR
set -euo pipefail
nvcc=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++17 -I"$src" -DMINFER_HAVE_CUDA=1 -Xcompiler -w)
status=0

for arch in 80 90; do
  for file in gemm_mma attention_prefill; do
    "$nvcc" "${flags[@]}" -arch=sm_$arch --ptx "$src/kernels/cuda/$file.cu" -o "$work/$file.$arch.ptx"
    count=$(grep -cE '(^|[^a-z])(wmma\.)?mma\.sync|wgmma' "$work/$file.$arch.ptx" || true)
    if [ "$count" -gt 0 ]; then
      echo "ok: $file.cu for sm_$arch has $count Tensor Core instructions in its PTX"
    else
      echo "FAIL: $file.cu for sm_$arch has no mma.sync / wgmma in its PTX"
      status=1
    fi
  done
done

for arch in 80 90; do
  for file in matvec attention_decode attention_prefill rmsnorm rope gemm_mma gemm_quant_rows; do
    "$nvcc" "${flags[@]}" -arch=sm_$arch -Xptxas -v -c "$src/kernels/cuda/$file.cu" -o "$work/$file.o" \
      2> "$work/$file.$arch.log"
    functions=$(grep -c "Compiling entry function" "$work/$file.$arch.log" || true)
    if [ "$functions" -eq 0 ]; then
      echo "FAIL: $file.cu for sm_$arch: ptxas compiled no kernel, so nothing was checked"
      status=1
      continue
    fi
    spilling=$(grep -E "bytes spill (stores|loads)" "$work/$file.$arch.log" | grep -vE "^ptxas info\s*: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" | grep -vE " 0 bytes spill stores, 0 bytes spill loads" || true)
    if [ -n "$spilling" ]; then
      echo "FAIL: $file.cu for sm_$arch spills registers:"
      echo "$spilling"
      status=1
    else
      echo "ok: $file.cu for sm_$arch: $functions kernels, no spills"
    fi
  done
done
exit $status
