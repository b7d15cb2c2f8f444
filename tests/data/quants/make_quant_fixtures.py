#!/usr/bin/env python3
"""Writes tests/data/quants/dequantize.bin and quantize.bin: ggml quantized blocks and what the
`gguf` Python package (gguf-py 0.19.0, the one llama.cpp's converters use) makes of them.
tests/test_quants.cpp checks core/quants.cpp against them bit for bit. Run by hand in a virtualenv
with `pip install gguf==0.19.0 numpy`; make test only reads the output. The seed is fixed, so a
rerun writes the same bytes.

Both files are a sequence of sections, all integers little-endian:
  char     name[8]      minfer's type name ("q4_k"), NUL-padded
  uint32   block_size   weights per block   } gguf's GGML_QUANT_SIZES for the type
  uint32   type_size    bytes per block     }
  uint32   n_blocks
  n_blocks records:
    dequantize.bin: type_size bytes of a block, then block_size float32 = gguf.quants.dequantize
    quantize.bin:   block_size float32 inputs, then type_size bytes = gguf.quants.quantize
dequantize.bin has a section for each of q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k,
q6_k; quantize.bin for the five legacy types (gguf quantizes no K-quant; minfer neither).

Dequantization blocks combine, block by block, variants of each field: f16 scales d and dmin that
are random finite values of both signs, +-0, f16 subnormals, 60000, +-65504 (never NaN or Inf);
every sub-scale and sub-min code (Q2_K's 16 nibbles, Q3_K's 64 6-bit codes, Q4_K/Q5_K's 64 scales
and 64 mins, Q6_K's int8 -128..127, Q8_0's int8 codes); code bytes all 0, all 1, random and
patterned; every single-bit high-bit mask and alternating ones.
Quantization inputs: random normals at several magnitudes, all-equal blocks, +0 and -0 blocks,
blocks whose largest magnitude is negative (and +-a ties), blocks whose scaled values land exactly
on .5 ties, tiny values (1e-30) whose f16 scale is subnormal or zero, and values whose scale nears
or passes the f16 maximum."""
import os
import struct

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

rng = np.random.default_rng(20260517)
HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
K_QUANTS = ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]


def f16(x):
    return int(np.array(x, dtype=np.float16).view(np.uint16))


def random_f16(sign):
    bits = int(rng.integers(0, 0x7C00))  # exponent < 31: finite
    return bits | (0x8000 if sign else 0)


# d and dmin side by side: (1, 0) zero dmin alone, (0, 0) both zero, (-0, 65504) zero d with an
# extreme min, then subnormals, large values and random ones of both signs.
D = [0x3C00, 0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, f16(60000), f16(-60000), 0x7BFF,
     0xFBFF, f16(0.0123), f16(-3.5), random_f16(0), random_f16(1), random_f16(0), random_f16(1)]
DMIN = [0x0000, 0x0000, 0x7BFF, 0xFBFF, f16(60000), f16(-60000), 0x8000, 0x0001, 0x83FF, f16(0.5),
        random_f16(0), random_f16(1), 0x3C00, f16(-2.25), 0x0400, random_f16(0), random_f16(1)]


def h(bits):
    return np.array([bits], dtype="<u2").view(np.uint8)


def fill(n, byte):
    return np.full(n, byte, dtype=np.uint8)


def rand_bytes(n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def code_bytes(n):
    """All bits 0, all 1, random, and a few patterns."""
    return [rand_bytes(n), fill(n, 0x00), fill(n, 0xFF), fill(n, 0x0F), fill(n, 0xF0), fill(n, 0xE4),
            fill(n, 0x1B), rand_bytes(n)]


def bit_masks(n):
    """High-bit masks: none, all, each single bit plane, alternating, random."""
    return [fill(n, 0), fill(n, 0xFF)] + [fill(n, 1 << b) for b in range(8)] + \
        [fill(n, 0x55), fill(n, 0xAA), rand_bytes(n)]


def combine(*fields):
    """Block i takes variant i % len of each field (in layout order), for the longest field's count."""
    n = max(len(f) for f in fields)
    return np.stack([np.concatenate([f[i % len(f)] for f in fields]) for i in range(n)])


def legacy_qh():
    words = [0, 0xFFFFFFFF, 0x55555555, 0xAAAAAAAA, 0xFF, 0xFF00, 0xFF0000, 0xFF000000, 0x80000001,
             int(rng.integers(0, 2**32))]
    return [np.array([w], dtype="<u4").view(np.uint8) for w in words]


def nibble_pairs():
    """16 bytes holding every low nibble and every high nibble once."""
    lo = rng.permutation(16)
    hi = rng.permutation(16)
    return (lo | (hi << 4)).astype(np.uint8)


def q8_0_blocks():
    every = rng.permutation(256).astype(np.uint8)  # every int8 code, 32 per block
    qs = [every[32 * i: 32 * i + 32] for i in range(8)] + [fill(32, 0x80), fill(32, 0x7F), fill(32, 0), rand_bytes(32)]
    return combine([h(d) for d in D], qs)


def q4_blocks(with_min, with_qh):
    fields = [[h(d) for d in D]]
    if with_min:
        fields.append([h(m) for m in DMIN])
    if with_qh:
        fields.append(legacy_qh())
    fields.append(code_bytes(16) + [nibble_pairs(), fill(16, 0x88)])
    return combine(*fields)


def q2_k_scales():
    return [nibble_pairs(), (np.arange(16) | (np.arange(15, -1, -1) << 4)).astype(np.uint8), rand_bytes(16),
            fill(16, 0), fill(16, 0xFF)]


def q2_k_blocks():
    return combine(q2_k_scales(), code_bytes(64), [h(d) for d in D], [h(m) for m in DMIN])


def pack_q3_k_scales(codes):
    """16 6-bit codes (scale + 32) into ggml's 12 bytes."""
    s = np.zeros(12, dtype=np.uint8)
    for i, c in enumerate(codes):
        s[i % 8] |= (c & 0xF) << (4 * (i // 8))
        s[8 + i % 4] |= (c >> 4) << (2 * (i // 4))
    return s


def unpack_q3_k_scales(s):
    return [((s[i] if i < 8 else s[i - 8] >> 4) & 0xF) | (((s[8 + i % 4] >> (2 * (i // 4))) & 3) << 4)
            for i in range(16)]


def q3_k_blocks():
    every = rng.permutation(64)
    scales = [pack_q3_k_scales(every[16 * i: 16 * i + 16]) for i in range(4)]
    seen = {c for s in scales for c in unpack_q3_k_scales(s)}
    assert seen == set(range(64)), "the Q3_K scale blocks miss a code"
    scales += [rand_bytes(12), fill(12, 0), fill(12, 0xFF)]
    return combine(bit_masks(32), code_bytes(64), scales, [h(d) for d in D])


def pack_k_scale_min(sc, m):
    """8 6-bit scales and 8 6-bit mins into Q4_K's 12 bytes."""
    s = np.zeros(12, dtype=np.uint8)
    for j in range(4):
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6)
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4)
    return s


def k_scales():
    sc_all, m_all = rng.permutation(64), rng.permutation(64)
    scales = [pack_k_scale_min(sc_all[8 * i: 8 * i + 8], m_all[8 * i: 8 * i + 8]) for i in range(8)]
    sc, m = quants.Q4_K.get_scale_min(np.stack(scales))
    assert set(sc.ravel()) == set(range(64)) and set(m.ravel()) == set(range(64)), "a 6-bit value is missing"
    return scales + [rand_bytes(12), fill(12, 0), fill(12, 0xFF)]


def q4_k_blocks():
    return combine([h(d) for d in D], [h(m) for m in DMIN], k_scales(), code_bytes(128))


def q5_k_blocks():
    return combine([h(d) for d in D], [h(m) for m in DMIN], k_scales(), bit_masks(32), code_bytes(128))


def q6_k_blocks():
    every = rng.permutation(256).astype(np.uint8)  # every int8 scale, 16 per block
    scales = [every[16 * i: 16 * i + 16] for i in range(16)] + [fill(16, 0x80), fill(16, 0x7F), rand_bytes(16)]
    qh = [rand_bytes(64), fill(64, 0), fill(64, 0xFF), fill(64, 0x55), fill(64, 0xAA), fill(64, 0xE4), fill(64, 0x1B)]
    return combine(code_bytes(128), qh, scales, [h(d) for d in D])


DEQUANT_BLOCKS = {
    "q8_0": q8_0_blocks, "q4_0": lambda: q4_blocks(False, False), "q4_1": lambda: q4_blocks(True, False),
    "q5_0": lambda: q4_blocks(False, True), "q5_1": lambda: q4_blocks(True, True), "q2_k": q2_k_blocks,
    "q3_k": q3_k_blocks, "q4_k": q4_k_blocks, "q5_k": q5_k_blocks, "q6_k": q6_k_blocks,
}


def exact_ties(divisor, extremes):
    """Blocks whose first weight sets the scale (d = extreme / divisor for Q4_0 and Q5_0, |extreme| /
    127 for Q8_0) and whose other weights' scaled values x * id are k + 0.5 exactly in float32 where
    some float32 x gives that (most do), so that trunc(x * id + 8.5) and roundf(x * id) sit on ties."""
    out = []
    for extreme in extremes:
        x = np.empty(32, dtype=np.float32)
        x[0] = extreme
        d = (abs(x[0]) if divisor > 0 else x[0]) / np.float32(divisor)
        inv = np.float32(1) / d
        limit = abs(divisor)
        for j in range(1, 32):
            x[j] = tie_value(np.float32(rng.integers(-limit, limit - 1) + 0.5), inv)
        out.append(x)
    return out


def tie_value(k, inv):
    """A float32 v with float32(v * inv) == k exactly, or v = k / inv when none is near."""
    v = np.float32(k / inv)
    for cand in (v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))):
        if np.float32(cand * inv) == k:
            return cand
    return v


def affine_ties(top):
    """min 0 and max `top` (d = 1), the others k + 0.5: (x - min) * id + 0.5 lands on integers."""
    x = (rng.integers(0, top, 32) + 0.5).astype(np.float32)
    x[5], x[17] = 0.0, float(top)
    scaled = x * np.float32(2.0 ** -7)
    return [x, scaled]


def normals(scale, n=2):
    return [(rng.standard_normal(32) * scale).astype(np.float32) for _ in range(n)]


def quantize_inputs():
    blocks = normals(1.0, 4) + normals(1e-3) + normals(100.0) + normals(1e4)
    blocks += [np.full(32, 1.5, np.float32), np.full(32, -2.0, np.float32), np.full(32, 1e-30, np.float32)]
    blocks += [np.zeros(32, np.float32), np.full(32, -0.0, np.float32)]
    neg = normals(1.0, 1)[0]
    neg[11] = np.float32(-7.25)
    pm, mp = (rng.uniform(-3, 3, 32).astype(np.float32) for _ in range(2))
    pm[2], pm[9], mp[2], mp[9] = 3.5, -3.5, -3.5, 3.5  # +-a ties for the largest magnitude
    blocks += [neg, pm, mp]
    q4 = (np.arange(32, dtype=np.float32) % 16) - np.float32(7.5)
    q4[0], q4[31] = -8.0, 8.0  # d = 1: x * id + 8.5 integral, and 8 + 8.5 past the top code
    q5 = np.arange(32, dtype=np.float32) - np.float32(15.5)
    q5[0] = -16.0
    q8 = (rng.integers(-127, 127, 32) + 0.5).astype(np.float32)
    q8[3] = 127.0
    blocks += [q4, q4 * np.float32(2.0 ** -9), q5, q5 * np.float32(64.0), q8, -q8]
    blocks += exact_ties(-8, [-3.7, 0.61]) + exact_ties(-16, [-1.3, 45.2]) + exact_ties(127, [2.9, -0.77])
    blocks += affine_ties(15) + affine_ties(31)
    blocks += normals(1e-30) + normals(1e-5) + normals(1e-8, 1) + normals(3e-6, 1)
    big = rng.uniform(-1, 1, 32).astype(np.float32) * np.float32(4e5)
    big[7] = np.float32(-65504.0 * 8)
    top = rng.uniform(-1, 1, 32).astype(np.float32) * np.float32(8e6)
    top[20] = np.float32(65519.0 * 127)  # q8_0's d rounds to 65504; the 4-bit types' to Inf
    blocks += [big, top]
    return blocks


def section(name, records, block_size, type_size):
    return name.encode().ljust(8, b"\0") + struct.pack("<III", block_size, type_size, len(records)) + b"".join(records)


def gguf_type(name):
    return GGMLQuantizationType[name.upper()]


def dequantize_sections():
    out, counts = [], {}
    for name, make in DEQUANT_BLOCKS.items():
        block_size, type_size = GGML_QUANT_SIZES[gguf_type(name)]
        blocks = make()
        assert blocks.shape[1] == type_size, name
        values = quants.dequantize(blocks, gguf_type(name)).astype("<f4")
        records = [blocks[i].tobytes() + values[i].tobytes() for i in range(len(blocks))]
        out.append(section(name, records, block_size, type_size))
        counts[name] = len(records)
    return out, counts


def quantize_sections():
    inputs = np.stack(quantize_inputs()).astype("<f4")
    assert np.all(np.isfinite(inputs))
    out, counts = [], {}
    for name in LEGACY:
        block_size, type_size = GGML_QUANT_SIZES[gguf_type(name)]
        with np.errstate(over="ignore"):
            q = quants.quantize(inputs, gguf_type(name))
        records = [inputs[i].tobytes() + q[i].tobytes() for i in range(len(inputs))]
        out.append(section(name, records, block_size, type_size))
        counts[name] = len(records)
    return out, counts


def write(name, sections):
    path = os.path.join(HERE, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(sections))
    os.replace(tmp, path)
    return path


def main():
    for file_name, make in (("dequantize.bin", dequantize_sections), ("quantize.bin", quantize_sections)):
        sections, counts = make()
        path = write(file_name, sections)
        print(f"{path}: {os.path.getsize(path)} bytes")
        for name, n in counts.items():
            print(f"  {name}: {n} blocks")


if __name__ == "__main__":
    main()
