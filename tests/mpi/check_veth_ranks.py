#!/usr/bin/env python3
"""Two ranks on two hosts in all but hardware: each in a network namespace of its own, the two
joined by a veth pair, so that every byte between them crosses a network link.

mpirun starts in the first namespace. Its host file names the two addresses, and its launch agent
(plm_rsh_agent, ssh's place) is a script that enters the namespace owning the address it is given
and runs the command there, as ssh would on another machine. OpenMPI's out-of-band channel and its
TCP transport are held to the veth's subnet, and shared memory is left out (btl tcp,self).

  - each rank runs in its own namespace, neither of them the test's;
  - the collectives' tests (minfer_mpi_tests) pass over the link;
  - greedy generate over the two namespaces prints one process's ids.

It needs root and iproute2 (`ip netns`); without them it says so and is skipped (exit 77). The
namespaces and their link are deleted whatever happens.
Usage: check_veth_ranks.py MPIRUN MPI_TESTS MINFER SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

MPIRUN, MPI_TESTS, MINFER, SOURCE = sys.argv[1:5]
MODEL = SOURCE + "/tests/data/models/qwen2-f32.gguf"  # biases and a split of 2 KV heads
LIMIT = 120
SKIPPED = 77  # ctest's SKIP_RETURN_CODE
SUBNET = "10.77.0"

# The launch agent: `agent HOST COMMAND...`, as `ssh HOST COMMAND...`, whose remote shell parses the
# command (OpenMPI quotes it for one).
AGENT = """#!/bin/sh
host="$1"
shift
case "$host" in
  {subnet}.1) ns={first} ;;
  {subnet}.2) ns={second} ;;
  *) echo "check_veth_ranks agent: no namespace for host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


def check(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)
    print("ok: " + message)


def ip(*args):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30)


def make_link(first, second, tag):
    """Two namespaces joined by a veth pair; returns an error line, or None."""
    steps = [("netns", "add", first), ("netns", "add", second),
             ("link", "add", "mv" + tag + "a", "type", "veth", "peer", "name", "mv" + tag + "b"),
             ("link", "set", "mv" + tag + "a", "netns", first), ("link", "set", "mv" + tag + "b", "netns", second),
             ("-n", first, "addr", "add", SUBNET + ".1/24", "dev", "mv" + tag + "a"),
             ("-n", second, "addr", "add", SUBNET + ".2/24", "dev", "mv" + tag + "b")]
    for ns, end in ((first, "a"), (second, "b")):
        steps += [("-n", ns, "link", "set", "lo", "up"), ("-n", ns, "link", "set", "mv" + tag + end, "up")]
    for step in steps:
        result = ip(*step)
        if result.returncode != 0:
            return "ip " + " ".join(step) + ": " + (result.stderr.strip().splitlines() or ["failed"])[0]
    return None


def mpirun(folder, first, command):
    launcher = ["ip", "netns", "exec", first, MPIRUN, "--allow-run-as-root", "--hostfile", folder + "/hosts",
                "--mca", "plm_rsh_agent", folder + "/agent", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", SUBNET + ".0/24", "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
                "-np", "2"]
    return subprocess.run(launcher + command, capture_output=True, text=True, timeout=LIMIT)


def checks(folder, first):
    here = os.readlink("/proc/self/ns/net")
    where = mpirun(folder, first, ["sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $(readlink /proc/self/ns/net)"'])
    spaces = dict(line.split() for line in where.stdout.splitlines() if line.strip())
    check(where.returncode == 0 and len(spaces) == 2 and spaces.get("0") != spaces.get("1") and
          here not in spaces.values(), "each rank runs in a namespace of its own: " + str(spaces))

    tests = mpirun(folder, first, [MPI_TESTS])
    check(tests.returncode == 0 and tests.stdout.count("PASSED") == 2,
          "the collectives' tests pass on both ranks over the veth link" +
          ("" if tests.returncode == 0 else ": " + (tests.stdout + tests.stderr)[-2000:]))

    greedy = [MINFER, "generate", "-m", MODEL, "--prompt-ids", "1,5,9,3,7", "-n", "24", "--temp", "0",
              "--print-ids", "--threads", "1"]
    one = subprocess.run(greedy, capture_output=True, text=True, timeout=LIMIT)
    two = mpirun(folder, first, greedy)
    check(one.returncode == 0 and two.returncode == 0 and two.stdout == one.stdout and one.stdout.strip(),
          "greedy generate over the link: one process's ids, " + two.stdout.strip() +
          ("" if two.returncode == 0 else ": " + two.stderr[-2000:]))
    check("tensor parallel over MPI (2 ranks)" in two.stderr, "and the model was split over the two ranks")


def main():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("skipped: two network namespaces need root and iproute2's ip")
        return SKIPPED
    tag = str(os.getpid() % 100000)
    first, second = "minfer" + tag + "a", "minfer" + tag + "b"
    try:
        error = make_link(first, second, tag)
        if error is not None:
            print("skipped: no network namespaces here (" + error + ")")
            return SKIPPED
        with tempfile.TemporaryDirectory() as folder:
            with open(folder + "/agent", "w") as f:
                f.write(AGENT.format(subnet=SUBNET, first=first, second=second))
            os.chmod(folder + "/agent", 0o755)
            with open(folder + "/hosts", "w") as f:
                f.write(f"{SUBNET}.1 slots=1\n{SUBNET}.2 slots=1\n")
            checks(folder, first)
    finally:
        for ns in (first, second):
            ip("netns", "del", ns)  # takes its end of the veth pair with it
    return 0


if __name__ == "__main__":
    sys.exit(main())
