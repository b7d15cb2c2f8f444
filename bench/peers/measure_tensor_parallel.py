#!/usr/bin/env python3
"""Issue 54's targets on this machine: one process at --threads 2 against mpirun -np 2 at
--threads 1, on the three real files, in interleaved rounds.

  - decode (tgN) and prefill (ppP) throughput, two ranks over one process, per round, and the
    medians of those ratios; the all-reduce share of a decode step (rank 0's count);
  - the same two ranks over TCP alone (--mca pml ob1 --mca btl tcp,self: loopback, no shared
    memory);
  - greedy ids (32 tokens): how many one process and two ranks share before they first part;
  - each rank's peak resident memory against the file's size, on a file of at least 1 GB
    (make-model at Qwen2.5-1.5B's shape, 28 layers, tied, in Q5_0: 1.06 GB; minfer writes no
    K-quants, so not the issue's Q4_K_M).

Writes OUT/results.json and OUT/README.md (the tables). Run it on an idle machine.
Usage: measure_tensor_parallel.py MINFER MPIRUN OUT [--rounds N] [--quick]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import time

MODELS = os.path.expanduser("~/.cache/minfer/models")
FILES = {
    "SmolLM2-135M Q4_1": MODELS + "/SmolLM2-135M-Instruct.Q4_1.gguf",
    "Gemma 3 270M Q4_K_M": MODELS + "/gemma-3-270m-q4_k_m.gguf",
    "Qwen2.5-Coder-0.5B Q4_K_M": MODELS + "/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
PROMPT = "Once upon a time, in a small village by the sea,"


def mpirun_prefix(args, tcp=False):
    prefix = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
    return prefix + (["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"] if tcp else [])


def bench(args, path, ranks, tcp=False):
    threads = "2" if ranks == 1 else "1"
    command = [args.minfer, "bench", "-m", path, "-p", str(args.n_prompt), "-n", str(args.n_gen), "-r", "3",
               "--threads", threads, "-o", "json"]
    if ranks == 2:
        command = mpirun_prefix(args, tcp) + command
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True).stdout
    rows = {row["test"]: row for row in json.loads(out)}
    return rows


def rounds(args):
    """Interleaved rounds: one process, two ranks, two ranks over TCP, per file, in an order
    rotated each round."""
    kinds = [("one", 1, False), ("two", 2, False), ("tcp", 2, True)]
    results = {name: [] for name in FILES}
    for r in range(args.rounds):
        for name, path in FILES.items():
            run = {}
            for kind, ranks, tcp in kinds[r % 3:] + kinds[:r % 3]:
                run[kind] = bench(args, path, ranks, tcp)
            results[name].append(run)
            print(f"round {r + 1} {name}: done", flush=True)
    return results


def ratio_table(results, args):
    pp, tg = f"pp{args.n_prompt}", f"tg{args.n_gen}"
    lines = ["| file | pp ranks/one | tg ranks/one | tg TCP ranks/one | decode step's all-reduces, shared memory | over TCP |",
             "|---|---:|---:|---:|---|---|"]
    summary = {}
    for name, runs in results.items():
        def ratios(kind, test):
            return [run[kind][test]["avg_ts"] / run["one"][test]["avg_ts"] for run in runs]

        def share(kind):
            rows = [run[kind][tg] for run in runs]
            parts = [row["all_reduce_seconds_per_step"] * row["avg_ts"] for row in rows]
            counts = sorted({row["all_reduces_per_step"] for row in rows})
            kib = sorted({row["all_reduce_bytes_per_step"] / row["all_reduces_per_step"] / 1024 for row in rows})
            return (f'{"/".join(f"{c:.0f}" for c in counts)} of {"/".join(f"{k:.2f}" for k in kib)} KiB, '
                    f'{100 * min(parts):.1f}-{100 * max(parts):.1f}% of a step')

        def cell(values):
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

        pp_r, tg_r, tcp_r = ratios("two", pp), ratios("two", tg), ratios("tcp", tg)
        summary[name] = {"pp": statistics.median(pp_r), "tg": statistics.median(tg_r), "tg_tcp": statistics.median(tcp_r)}
        lines.append(f"| {name} | {cell(pp_r)} | {cell(tg_r)} | {cell(tcp_r)} | {share('two')} | {share('tcp')} |")
    return lines, summary


def greedy_ids(args, path, ranks):
    command = [args.minfer, "generate", "-m", path, "-i", PROMPT, "-n", "32", "--temp", "0", "--print-ids",
               "--threads", "2" if ranks == 1 else "1"]
    if ranks == 2:
        command = mpirun_prefix(args) + command
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True).stdout
    return [int(x) for x in re.findall(r"-?\d+", out)]


def agreement(args):
    lines = ["| file | ids shared before they part | ids made (one process, two ranks) |", "|---|---:|---:|"]
    shared = {}
    for name, path in FILES.items():
        one, two = greedy_ids(args, path, 1), greedy_ids(args, path, 2)
        n = next((i for i, (a, b) in enumerate(zip(one, two)) if a != b), min(len(one), len(two)))
        shared[name] = n
        lines.append(f"| {name} | {n} | {len(one)}, {len(two)} |")
    return lines, shared


def peak_rss_kib(command):
    """Each process's maximum resident set (KiB), from /usr/bin/time -v."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=True)
    return [int(x) for x in re.findall(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)]


def memory(args, folder):
    path = folder + "/qwen2.5-1.5b-shape-q5_0.gguf"
    if not os.path.exists(path):
        subprocess.run([args.minfer, "make-model", "-o", path, "--format", "gguf", "--dtype", "q5_0", "--dim", "1536",
                        "--hidden-dim", "8960", "--layers", "28", "--heads", "12", "--kv-heads", "2", "--vocab",
                        "151936", "--seq-len", "4096"], check=True, timeout=1800)
    size = os.path.getsize(path)
    generate = [args.minfer, "generate", "-m", path, "--prompt-ids", "1,2,3,4", "-n", "8", "--temp", "0"]
    one = peak_rss_kib(["/usr/bin/time", "-v"] + generate + ["--threads", "2"])
    ranks = peak_rss_kib(mpirun_prefix(args) + ["/usr/bin/time", "-v"] + generate + ["--threads", "1"])
    mib = 1024 * 1024
    lines = ["| file | size | one process | each of two ranks |", "|---|---:|---:|---:|",
             f"| Qwen2.5-1.5B's shape (28 layers, tied), Q5_0 | {size / mib:.0f} MiB | {one[0] / 1024:.0f} MiB "
             f"({one[0] * 1024 / size:.2f}x) | " + ", ".join(f"{r / 1024:.0f} MiB ({r * 1024 / size:.2f}x)" for r in ranks) + " |"]
    os.remove(path)
    return lines, {"file_bytes": size, "one_kib": one, "ranks_kib": ranks}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("minfer")
    p.add_argument("mpirun")
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    args.n_prompt, args.n_gen = (16, 8) if args.quick else (64, 64)
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    results = rounds(args)
    table, summary = ratio_table(results, args)
    ids_table, shared = agreement(args)
    memory_table, rss = memory(args, args.out)
    with open(args.out + "/results.json", "w") as f:
        json.dump({"cpu": cpu, "summary": summary, "greedy_shared": shared, "memory": rss, "rounds": results}, f, indent=1)
    with open(args.out + "/README.md", "w") as f:
        f.write(f"# Issue 54's targets: `mpirun -np 2 --threads 1` against one process at `--threads 2`\n\n")
        f.write(f"CPU: {cpu}, {os.cpu_count()} logical CPUs. {args.rounds} interleaved rounds of `bench -p {args.n_prompt} "
                f"-n {args.n_gen} -r 3`; ratios are two ranks over one process per round, medians (range). "
                f"Written by `bench/peers/measure_tensor_parallel.py` in {time.time() - start:.0f} s.\n\n")
        f.write("\n".join(table) + "\n\nGreedy ids, 32 tokens of \"" + PROMPT + "\":\n\n" + "\n".join(ids_table))
        f.write("\n\nPeak resident memory (`/usr/bin/time -v`, `generate -n 8`):\n\n" + "\n".join(memory_table) + "\n")
    print(open(args.out + "/README.md").read())


if __name__ == "__main__":
    main()
