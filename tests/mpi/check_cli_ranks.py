#!/usr/bin/env python3
"""minfer's commands under mpirun -np 2 (cli/cli_ranks.h) against one process.

  - generate, greedy: the same ids as one process, and its timing lines printed once (rank 0's);
  - generate under mpirun -np 1 (the split path at one rank): the same ids as without mpirun;
  - generate with a draft model (speculative): the same ids and the same drafts accepted;
  - generate, sampled without --seed: the ranks share rank 0's clock seed, so one process given
    the seed rank 0 printed samples the same text (a rank that drew its own would feed the others
    other tokens, and rank 0's logits would be sums of unrelated parts);
  - perplexity: the one process's value to 1e-5;
  - bench on a model file: a table, printed once, and a decode step's all-reduces counted;
  - a command that does not run across ranks (tokenize): a non-zero exit and one line a rank naming
    it;
  - a rank given another file of the model's shape (MPMD: `-np 1 A : -np 1 B`): a non-zero exit and
    a line naming the rank (the ranks compare their file's header digest);
  - a model that is missing: a non-zero exit and a line naming the rank (the first rank to fail
    ends the other, which may not have printed yet), and no hang.
Usage: check_cli_ranks.py MPIRUN MINFER SOURCE_DIR
"""
import re
import subprocess
import sys

MPIRUN, MINFER, SOURCE = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = SOURCE + "/tests/data/models/qwen2-f32.gguf"  # biases and a split of 2 KV heads
LIMIT = 120


def run(args, ranks, launcher=False):
    command = [MINFER] + args
    if ranks > 1 or launcher:
        command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + command
    return subprocess.run(command, capture_output=True, text=True, timeout=LIMIT)


def check(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)
    print("ok: " + message)


def main():
    greedy = ["generate", "-m", MODEL, "--prompt-ids", "1,5,9,3,7", "-n", "24", "--temp", "0", "--print-ids",
              "--threads", "1"]
    one, two = run(greedy, 1), run(greedy, 2)
    check(one.returncode == 0 and two.returncode == 0, "greedy generate runs in one process and over 2 ranks")
    check(two.stdout == one.stdout and one.stdout.strip(), "over 2 ranks the same ids: " + two.stdout.strip())
    check(two.stderr.count("prompt eval time") == 1, "the timing lines are printed once")
    check("tensor parallel over MPI (2 ranks): rank 0 of 2: heads 1-2 of 4" in two.stderr,
          "the model line names rank 0's part")

    # One rank still runs the split path (how gpu-check exercises NCCL): a tied, packed table
    # (llama3-q8_0's) must be copied, not packed in the file's read-only mapping.
    for file in ("llama3-q8_0.gguf", "qwen2-f32.gguf"):
        model_args = ["-m", SOURCE + "/tests/data/models/" + file if file != "qwen2-f32.gguf" else MODEL]
        one_rank = greedy[:1] + model_args + greedy[3:]
        alone, under_mpirun = run(one_rank, 1), run(one_rank, 1, launcher=True)
        check(alone.returncode == 0 and under_mpirun.returncode == 0 and under_mpirun.stdout == alone.stdout and
              "tensor parallel over MPI (1 rank)" in under_mpirun.stderr,
              f"{file} under mpirun -np 1: split over its one rank, the same ids as without mpirun")

    # Speculative decoding, the draft model split as the target is (in Q8_0: its own cuts, on its blocks).
    speculative = greedy + ["--draft", MODEL, "--draft-dtype", "q8_0"]
    one, two = run(speculative, 1), run(speculative, 2)
    accepted = [re.search(r"speculative \(draft model.*", r.stderr) for r in (one, two)]
    check(one.returncode == 0 and two.returncode == 0 and two.stdout == one.stdout and None not in accepted,
          "speculative generate over 2 ranks: the same ids as one process")
    check(accepted[0].group(0) == accepted[1].group(0), "and the same drafts accepted: " + accepted[1].group(0))

    sampled = ["generate", "-m", MODEL, "--prompt-ids", "1,5,9", "-n", "32", "--temp", "1.0", "--print-ids",
               "--threads", "1"]
    two = run(sampled, 2)
    seed = re.search(r"seed (\d+)", two.stderr)
    check(two.returncode == 0 and seed is not None, "sampled generate over 2 ranks prints its seed")
    one = run(sampled + ["--seed", seed.group(1)], 1)
    check(one.stdout == two.stdout, "one process given rank 0's seed samples the same ids")

    ids = ",".join(str((7 * i) % 600 + 3) for i in range(200))
    with open("/tmp/minfer_check_cli_ranks_ids.txt", "w") as f:
        f.write(ids)
    perplexity = ["perplexity", "-m", MODEL, "--ids", "/tmp/minfer_check_cli_ranks_ids.txt", "-c", "64",
                  "--threads", "1"]
    values = []
    for ranks in (1, 2):
        result = run(perplexity, ranks)
        rows = [line for line in result.stdout.splitlines() if line.startswith("| " + MODEL)]
        check(result.returncode == 0 and len(rows) == 1, f"perplexity over {ranks} rank(s) prints one row")
        values.append(float(rows[0].split("|")[5].split("+/-")[0]))
    check(abs(values[1] - values[0]) <= 1e-5 * values[0], f"perplexity {values[1]} over 2 ranks, {values[0]} in one")

    bench = run(["bench", "-m", MODEL, "-B", "1", "-p", "16", "-n", "8", "-r", "1", "--threads", "1"], 2)
    rows = [line for line in bench.stdout.splitlines() if line.startswith("| " + MODEL)]
    check(bench.returncode == 0 and len(rows) == 2, "bench over 2 ranks prints its pp and tg rows once")
    # 2 layers: the two all-reduces of each
    check("tg8 over ranks: 4.0 all-reduces a step" in bench.stderr,
          "bench counts a decode step's all-reduces: " + bench.stderr.splitlines()[-1])

    tokenize = run(["tokenize", "-m", MODEL, "hello"], 2)
    refusals = tokenize.stderr.count("minfer tokenize does not run across ranks")
    check(tokenize.returncode != 0 and refusals == 2 and "rank 1: minfer tokenize" in tokenize.stderr,
          "tokenize under mpirun: a non-zero exit and one line a rank, naming it")
    # Two files of one shape, in other types: each rank would run its own file's part, silently.
    ranks_args = [MPIRUN, "--allow-run-as-root", "--oversubscribe"]
    for file in ("llama2-f32.gguf", "llama2-f16.gguf"):
        ranks_args += ["-np", "1", MINFER, "generate", "-m", SOURCE + "/tests/data/models/" + file,
                       "--prompt-ids", "1,2", "-n", "4", "--threads", "1"] + ([":"] if file.endswith("f32.gguf") else [])
    differ = subprocess.run(ranks_args, capture_output=True, text=True, errors="replace", timeout=LIMIT)
    check(differ.returncode != 0 and "rank 1: the model file differs from rank 0's" in differ.stderr,
          "a rank given another file: a non-zero exit and a line naming the rank")

    missing = run(["generate", "-m", "/nonexistent/model.gguf", "-n", "4"], 2)
    # The first rank to fail ends the other (MPI_Abort), which may be gone before it prints.
    named = re.findall(r"minfer: error: rank [01]: .*/nonexistent/model.gguf", missing.stderr)
    check(missing.returncode != 0 and 1 <= len(named) <= 2,
          "a missing model: a non-zero exit and a line naming the rank and the file")


if __name__ == "__main__":
    main()
