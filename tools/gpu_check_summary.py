#!/usr/bin/env python3
"""The summary of a gpu-check run (tools/gpu-check.sh), from its work folder: enough alone to
judge the run without opening the archive.

Sections, in order:
  machine   the GPU (nvidia-smi) or "dry run"
  build     CMake's CUDA line and `minfer devices`' build line
  tests     passed / failed / skipped counts of the CUDA tests, every failed test with its first
            failure line, and the skipped tests (by family when there are many)
  sanitizer compute-sanitizer's memcheck and racecheck over a dozen CUDA op cases: errors, tests
            passed, seconds (a FAIL names the first report)
  bench     every row of every bench table, with the measured roofline lines
  peer      PyTorch's tok/s beside minfer's for the same shapes, and their ratio
  demos     each demo's conclusion
  timing    the step times

Usage: gpu_check_summary.py WORKDIR
"""
import collections
import json
import pathlib
import re
import sys


def read(path: pathlib.Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def tests_section(work: pathlib.Path):
    lines = []
    path = work / "tests.json"
    if not path.exists():
        log = read(work / "tests.log").strip().splitlines()
        lines.append("tests: no result file (the test process did not finish); last lines of tests.log:")
        lines += ["  " + l for l in log[-10:]]
        return lines
    doc = json.loads(read(path))
    passed, failed, skipped = [], [], []
    for suite in doc.get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = f"{suite['name']}.{test['name']}"
            if test.get("failures"):
                first = test["failures"][0].get("failure", "").strip().splitlines()
                failed.append((name, first[0] if first else ""))
            elif test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                skipped.append(name)
            else:
                passed.append(name)
    lines.append(f"tests: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped "
                 f"(of {len(passed) + len(failed) + len(skipped)} CUDA tests, one process)")
    for name, first in failed:
        lines.append(f"  FAILED {name}: {first[:200]}")
    if len(skipped) <= 25:
        lines += [f"  skipped {name}" for name in skipped]
    else:
        families = collections.Counter(re.sub(r"_M\d+_.*$", "", re.sub(r"^All/", "", n)) for n in skipped)
        for family, count in sorted(families.items()):
            lines.append(f"  skipped {count} x {family}*")
    reasons = collections.Counter(re.findall(r"skipped: [^\n]*", read(work / "tests.log")))
    for reason, count in reasons.most_common(3):
        lines.append(f"  ({count} x {reason.strip()})")
    return lines


def bench_section(work: pathlib.Path):
    lines = []
    header_done = False
    for md in sorted(work.glob("bench-*.md")):
        name = md.stem[len("bench-"):]
        rows = [l for l in read(md).splitlines() if l.startswith("|")]
        for line in read(work / f"bench-{name}.log").splitlines():
            if "roofline on" in line:
                lines.append(f"  {name}: {line.replace('minfer: ', '')}")
        if not rows:
            lines.append(f"  {name}: no rows (see bench-{name}.log)")
            continue
        if not header_done:
            lines += rows[:2]
            header_done = True
        lines += rows[2:]
    for skipped in sorted(work.glob("bench-*.skipped")):
        lines.append(f"  {skipped.stem[len('bench-'):]}: {read(skipped).strip()}")
    return ["bench:"] + (lines or ["  no bench ran"])


def minfer_rate(work: pathlib.Path, model: str, test: str, batch: int):
    for path in work.glob("bench-*.json"):
        try:
            rows = json.loads(read(path))
        except json.JSONDecodeError:
            continue
        for r in rows:
            if r.get("model", "").endswith(model) and r.get("test") == test and r.get("batch") == batch \
                    and r.get("graphs") in ("", "on") and r.get("kernels") == "fused":
                return r.get("avg_ts")
    return None


def peer_section(work: pathlib.Path):
    path = work / "peer.json"
    if not path.exists():
        text = read(work / "peer.log").strip().splitlines()
        return ["peer (PyTorch): " + (text[-1] if text else "did not run")]
    doc = json.loads(read(path))
    if doc.get("skipped"):
        return [f"peer (PyTorch): skipped: {doc['skipped']}"]
    lines = [f"peer: PyTorch {doc.get('torch', '?')} {doc.get('model', '')}, {doc.get('dtype', '')}, "
             f"{doc.get('mode', '')} on {doc.get('device', '')}"]
    lines.append("| test | B | PyTorch t/s | minfer t/s | minfer / PyTorch |")
    lines.append("| ---- | -: | ---------: | ---------: | ---------------: |")
    for r in doc.get("rows", []):
        ours = minfer_rate(work, doc.get("model", ""), r["test"], r["batch"])
        ratio = f"{ours / r['tok_s']:.2f}x" if ours and r["tok_s"] else "-"
        lines.append(f"| {r['test']} | {r['batch']} | {r['tok_s']:.1f} | {ours:.1f} | {ratio} |" if ours else
                     f"| {r['test']} | {r['batch']} | {r['tok_s']:.1f} | - | - |")
    return lines


def demos_section(work: pathlib.Path):
    text = read(work / "demos.md")
    if not text:
        return ["demos: did not run"]
    lines = ["demos:"]
    demo = "?"
    for line in text.splitlines():
        m = re.match(r"## demo (\S+):", line)
        if m:
            demo = m.group(1)
        if "conclusion:" in line or "skipped:" in line:
            lines.append(f"  {demo}: {line.strip()}")
    return lines


def main() -> int:
    work = pathlib.Path(sys.argv[1])
    out = [f"== minfer gpu-check: {read(work / 'gpu.txt').strip().splitlines()[0] if read(work / 'gpu.txt') else '?'} =="]
    build = [re.sub(r"^(build: |-- )", "", l) for l in read(work / "build.txt").strip().splitlines()]
    out += ["build: " + (" | ".join(build) if build else "?")]
    if any(l.startswith("FAIL") for l in build):
        out += ["(stopped after the build)"]
    else:
        out += tests_section(work)
        out += ["sanitizer:"] + ["  " + l for l in (read(work / "sanitizer.md").strip().splitlines() or ["did not run"])]
        out += bench_section(work)
        out += ["speculative:"] + ["  " + l for l in (read(work / "speculative.md").strip().splitlines() or ["did not run"])]
        out += ["serving:"] + ["  " + l for l in (read(work / "serving.md").strip().splitlines() or ["did not run"])]
        out += peer_section(work)
        out += demos_section(work)
    out += ["timing:"] + ["  " + l for l in read(work / "progress.log").splitlines()]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
