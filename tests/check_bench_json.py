#!/usr/bin/env python3
"""Runs `minfer bench -o json` on a small preset and checks the records' schema and consistency,
then turns them into charts with tools/plot_bench.py. Exit 77 (skipped) without matplotlib."""
import json
import os
import subprocess
import sys
import tempfile

minfer, source = sys.argv[1], sys.argv[2]
out = subprocess.run([minfer, "bench", "-m", "preset:tiny", "-p", "16", "-n", "8", "-B", "1,2", "-r", "2",
                      "--device", "cpu", "--roofline", "-o", "json"], capture_output=True, text=True, check=True)
records = json.loads(out.stdout)
assert len(records) == 4, f"expected 4 records (pp16, tg8 at B 1 and 2), got {len(records)}"
fields = {"model": str, "n_params": int, "model_bytes": int, "device": str, "dtype": str, "threads": int,
          "batch": int, "test": str, "n_prompt": int, "n_gen": int, "avg_ts": float, "stddev_ts": float,
          "samples_ts": list, "bytes_per_step": int, "gbps": float, "gflops": float, "build_commit": str,
          "roofline_gbps": float, "roofline_gflops": float, "roofline_level": str, "roofline_level_bytes": int,
          "roofline_over": str, "roofline_levels": list}
for r in records:
    for name, kind in fields.items():
        assert name in r, f"record lacks {name}: {r}"
        assert isinstance(r[name], kind) or (kind is float and isinstance(r[name], int)), f"{name} is not {kind}: {r}"
    assert len(r["samples_ts"]) == 2 and r["avg_ts"] > 0 and r["bytes_per_step"] > 0 and r["gflops"] > 0
    assert abs(sum(r["samples_ts"]) / 2 - r["avg_ts"]) < 1e-3 * r["avg_ts"]
    assert r["model"] == "preset:tiny" and r["device"] == "cpu" and r["dtype"] == "f32"
    assert r["roofline_gflops"] > 0
    # Every memory level the probe found, fastest first, main memory (capacity 0) last; a decode row
    # is compared with the first level that holds its bytes per step, and says why when it reads over it.
    levels = r["roofline_levels"]
    assert levels and levels[-1]["capacity_bytes"] == 0 and all(l["read_gbps"] > 0 for l in levels), levels
    caps = [l["capacity_bytes"] for l in levels[:-1]]
    assert caps == sorted(caps), levels
    if r["test"].startswith("tg"):
        holding = next(l for l in levels if l["capacity_bytes"] == 0 or r["bytes_per_step"] <= l["capacity_bytes"])
        assert r["roofline_level"] == holding["name"] and r["roofline_gbps"] == holding["read_gbps"], r
        assert (r["roofline_fraction"] > 1) == bool(r["roofline_over"]), r
    else:
        assert r["roofline_level"] == "" and r["roofline_gbps"] == 0, r
    assert r["build_commit"] and r["threads"] >= 1
tests = sorted((r["test"], r["batch"]) for r in records)
assert tests == [("pp16", 1), ("pp16", 2), ("tg8", 1), ("tg8", 2)], tests
# tg8 at B=1 of preset:tiny reads the matrices (4 bytes x 259328), norms (2816), one embedding row
# (256) and on average 4.5 positions of KV cache (1280 bytes each): 1045504 bytes.
tg1 = next(r for r in records if r["test"] == "tg8" and r["batch"] == 1)
assert tg1["bytes_per_step"] == 1037312 + 2816 + 256 + 1280 * 45 // 10, tg1["bytes_per_step"]

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: matplotlib is not installed (apt-get install python3-matplotlib)")
    sys.exit(77)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "bench.json")
    with open(path, "w") as f:
        f.write(out.stdout)
    subprocess.run([sys.executable, os.path.join(source, "tools", "plot_bench.py"), path, "-o", tmp], check=True)
    for png in ("bench_throughput.png", "bench_roofline.png", "bench_bandwidth.png"):
        with open(os.path.join(tmp, png), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
print("bench JSON: 4 records, schema and bookkeeping check out; plots written")
