#!/usr/bin/env bash
# The runs of issue40-paged.md, "How far blocks can go on two cores": from the repository root,
# after `make run` (the minfer executable in build-cpu/) and `make models` (SmolLM2's GGUF).
set -euo pipefail
M=$HOME/.cache/minfer/models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=${OUT:-bench/results/cpu-zen4/issue40-serve-bound}
T="--policy continuous --requests 64 --prompt-len 16-512 --output-len 16-256 --threads 2 -o json"
for r in 1 2 3; do
  ./build-cpu/minfer bench-serve -m $M $T --slots 4 > $OUT/r$r-ctx767-whole.json
  ./build-cpu/minfer bench-serve -m $M $T --slots 64 --kv-cache-mib 135 > $OUT/r$r-ctx767-blocks.json
  ./build-cpu/minfer bench-serve -m $M $T --ctx 4096 --slots 4 > $OUT/r$r-ctx4096-whole.json
  ./build-cpu/minfer bench-serve -m $M $T --ctx 4096 --slots 64 --kv-cache-mib 720 > $OUT/r$r-ctx4096-blocks.json
done
# The prompts alone: every output one token.
P="--policy continuous --requests 64 --prompt-len 16-512 --output-len 1 --threads 2 -o json"
./build-cpu/minfer bench-serve -m $M $P --slots 4 > $OUT/prefill-whole.json
./build-cpu/minfer bench-serve -m $M $P --slots 64 --kv-cache-mib 135 > $OUT/prefill-blocks.json
