#!/usr/bin/env python3
"""The GPU proof's plumbing, tested here before any lease: tools/gpu-check.sh --dry-run runs the
same steps on the CPU build (CUDA tests skipped, the compute-sanitizer pass reduced to checking
that its cases exist, small benches, quick demos) and must bring back exactly one archive and a
summary, as the device tool needs (at most 8 files).

Usage: check_gpu_check.py SOURCE_DIR BUILD_DIR
"""
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile


def main() -> int:
    src, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "out"
        run = subprocess.run([str(src / "tools/gpu-check.sh"), "--dry-run", str(out), "--build-dir", str(build),
                              "--no-build"], capture_output=True, text=True, timeout=600)
        summary = run.stdout
        if run.returncode != 0:
            problems.append(f"exit status {run.returncode}; stderr: {run.stderr[-2000:]}")
        files = sorted(p.name for p in out.iterdir()) if out.exists() else []
        if files != ["gpu-check.tar.gz", "summary.txt"]:
            problems.append(f"OUTDIR holds {files}, expected gpu-check.tar.gz and summary.txt")
        else:
            if (out / "summary.txt").read_text() != summary:
                problems.append("summary.txt differs from what was printed")
            with tarfile.open(out / "gpu-check.tar.gz") as tar:
                names = set(n.lstrip("./") for n in tar.getnames())
            for needed in ["tests.json", "tests.log", "bench-decode.json", "bench-decode.md", "bench-prefill.json",
                           "progress.log", "summary.txt", "devices.txt", "demos.md", "demos/batching.json",
                           "speculative.md", "demos/speculative.json", "serving.md", "sanitizer.md",
                           "bench-quant-rows.json", "bench-quant-rows.md"]:
                if needed not in names:
                    problems.append(f"the archive lacks {needed}")
        for needed in ["== minfer gpu-check: dry run", "build: ", " failed, ", "bench:", "| preset:stories15M",
                       "peer", "demos:", "conclusion:", "timing:", "speculative:", "q8_0-draft: ",
                       "ids equal the plain run's", "serving:", "blocks (64 slots", "| continuous |",
                       "mixed steps (--slots"]:
            if needed not in summary:
                problems.append(f"the summary lacks '{needed}'")
        if "FAIL: bench-serve failed" in summary:
            problems.append("a serving trace failed")
        if "FAIL: ids differ" in summary or "FAIL: generate failed" in summary:
            problems.append("speculative decoding failed or changed the greedy ids")
        # The sanitizer pass cannot run here, but every case it names must exist in this build.
        if not re.search(r"sanitizer:\n  memcheck: skipped: dry run \(no GPU\); [1-9]\d* CUDA cases found\n"
                         r"  racecheck: skipped: dry run \(no GPU\); [1-9]\d* CUDA cases found\n", summary):
            problems.append("the summary lacks the sanitizer's memcheck and racecheck lines")
        if "cases: FAIL" in summary:
            problems.append("a compute-sanitizer case named in tools/gpu-check.sh does not exist")
        if " 0 failed" not in summary:
            problems.append("the dry run reports failed tests")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(summary)
        print("ok: one archive and a summary that stands alone")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
