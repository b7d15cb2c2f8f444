#!/usr/bin/env python3
"""Runs `minfer demo all --quick` and checks that every demo wrote a JSON file that parses, has
rows from its CPU half, a conclusion, and a visible "skipped" for a GPU half that could not run;
then draws every PNG with tools/plot_demos.py (exit 77, skipped, without matplotlib)."""
import json
import os
import subprocess
import sys
import tempfile

minfer, source = sys.argv[1], sys.argv[2]
demos = ["divergence", "sequential", "crossover", "transfer", "roofline", "tensor-cores", "launch", "batching", "bytes", "continuous", "speculative", "prompt-cache", "paged-kv", "experts", "tensor-parallel"]
with tempfile.TemporaryDirectory() as out:
    run = subprocess.run([minfer, "demo", "all", "--quick", "--out", out], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    for name in demos:
        with open(os.path.join(out, name + ".json")) as f:
            demo = json.load(f)
        assert demo["demo"] == name, demo["demo"]
        cpu_rows = [r for r in demo["rows"] if r["half"] == "cpu"]
        assert cpu_rows, f"{name}: no CPU rows"
        # A timeline of busy slots or of KV memory ends at zero when the last request retires; every
        # other y is a rate.
        floor_ok = (lambda y: y >= 0) if name in ("continuous", "paged-kv") else (lambda y: y > 0)
        assert all(isinstance(r["y"], (int, float)) and floor_ok(r["y"]) for r in cpu_rows), f"{name}: a row without a value"
        assert any(r["y"] > 0 for r in cpu_rows), f"{name}: every value is zero"
        assert demo["halves"].get("cpu") == "ran", f"{name}: {demo['halves']}"
        cuda = demo["halves"].get("cuda", "")
        assert cuda == "ran" or cuda.startswith("skipped: no CUDA device") or (
            name == "tensor-parallel" and cuda.startswith("skipped: a GPU pair's all-reduces")), f"{name}: cuda half {cuda!r}"
        assert any(c["half"] == "cpu" and c["text"] for c in demo["conclusions"]), f"{name}: no conclusion"
        assert f"## demo {name}" in run.stdout and "conclusion:" in run.stdout
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skipped: matplotlib is not installed (apt-get install python3-matplotlib)")
        sys.exit(77)
    subprocess.run([sys.executable, os.path.join(source, "tools", "plot_demos.py"), out], check=True)
    for name in demos:
        with open(os.path.join(out, name + ".png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
print(f"{len(demos)} demos: JSON parsed, rows, conclusions and PNGs checked")
