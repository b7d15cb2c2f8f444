#!/usr/bin/env python3
"""Writes tests/data/q8_0/blocks.txt: float32 inputs and the Q8_0 bytes the gguf package's
quantizer (gguf-py, the one llama.cpp's converters use) makes of them. Run by hand in a virtualenv
with `pip install gguf numpy`; make test only reads the output.

Each line is one block: 32 float32 bit patterns in hex, a tab, then the block's 34 bytes in hex.
The blocks cover random normals, values whose scaled form lands on .5 (rounding away from zero),
an all-zero block, a block whose scale is an f16 subnormal, one whose scale rounds up in f16, and
one near the f16 range's top."""
import os
import sys

import numpy as np
from gguf import quants, GGMLQuantizationType

rng = np.random.default_rng(20261130)
blocks = [rng.standard_normal(32).astype(np.float32) for _ in range(4)]
halves = (np.arange(32, dtype=np.float32) - 15.5) * np.float32(127.0 / 15.5)  # |x|max -> 127
halves[3] = np.float32(2.5)  # 2.5 * 127 / 127 lands on .5
blocks.append(halves.astype(np.float32))
blocks.append(np.zeros(32, dtype=np.float32))
blocks.append((rng.standard_normal(32) * 1e-6).astype(np.float32))
blocks.append((rng.uniform(-1, 1, 32) * 3.0).astype(np.float32))
big = (rng.uniform(-1, 1, 32) * 60000.0 * 127).astype(np.float32)
big[0] = np.float32(65000.0 * 127)
blocks.append(big)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "q8_0", "blocks.txt")
os.makedirs(os.path.dirname(out), exist_ok=True)
tmp = out + ".tmp"
with open(tmp, "w") as f:
    for b in blocks:
        q = quants.quantize(b.reshape(1, 32), GGMLQuantizationType.Q8_0).tobytes()
        assert len(q) == 34
        f.write(" ".join(f"{v:08x}" for v in b.view(np.uint32)) + "\t" + q.hex() + "\n")
os.replace(tmp, out)
print(f"wrote {len(blocks)} blocks to {out}", file=sys.stderr)
