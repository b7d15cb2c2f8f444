#!/usr/bin/env python3
"""Two ranks on two hosts in all but hardware: each in a network namespace of its own, the two
joined by a veth pair, so that every byte between them crosses a network link.

mpirun starts in the first namespace. Its host file names the two addresses, and its launch agent
(plm_rsh_agent, ssh's place) is a script that enters the namespace owning the address it is given
and runs the command there, as ssh would on another machine. OpenMPI's out-of-band channel and its
TCP transport are held to the veth's subnet, and shared memory is left out (pml ob1, btl tcp,self).

  - each rank runs in its own namespace, neither of them the test's;
  - the collectives' tests (minfer_mpi_tests) pass over the link;
  - greedy generate over the two namespaces prints one process's ids.

It needs root and iproute2 (`ip netns`); without them, or where the first namespace cannot be made,
it says so and is skipped (exit 77). Its namespaces are named by its process id: on the way out
(a failure, SIGTERM, a timeout of its own) it kills what runs in them and deletes them with their
link, and it deletes those of an earlier run whose process is gone (one SIGKILLed).
Usage: check_veth_ranks.py MPIRUN MPI_TESTS MINFER SOURCE_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

MPIRUN, MPI_TESTS, MINFER, SOURCE = sys.argv[1:5]
MODEL = SOURCE + "/tests/data/models/qwen2-f32.gguf"  # biases and a split of 2 KV heads
LIMIT = 60  # per command: 4 of them, within ctest's 300 s
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


def names(pid):
    """The namespaces and veth ends of the run whose process is `pid` (veth names: 15 bytes at most)."""
    return "minfer-veth-%da" % pid, "minfer-veth-%db" % pid, "mv%da" % pid, "mv%db" % pid


def remove(pid):
    """Kills what runs in pid's namespaces, then deletes them and their link (each may be absent)."""
    first, second, end_a, _ = names(pid)
    for ns in (first, second):
        for process in ip("netns", "pids", ns).stdout.split():
            try:
                os.kill(int(process), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        ip("netns", "del", ns)  # takes the end of the veth pair inside it
    ip("link", "del", end_a)  # a pair not yet moved into a namespace


def remove_orphans():
    """Deletes the namespaces of earlier runs whose process is gone."""
    for line in ip("netns", "list").stdout.splitlines():
        match = re.match(r"minfer-veth-(\d+)a\b", line)
        if match and not os.path.exists("/proc/" + match.group(1)):
            remove(int(match.group(1)))


def make_link(first, second, end_a, end_b):
    """Two namespaces joined by a veth pair; raises RuntimeError naming the step that failed."""
    steps = [("netns", "add", second),
             ("link", "add", end_a, "type", "veth", "peer", "name", end_b),
             ("link", "set", end_a, "netns", first), ("link", "set", end_b, "netns", second),
             ("-n", first, "addr", "add", SUBNET + ".1/24", "dev", end_a),
             ("-n", second, "addr", "add", SUBNET + ".2/24", "dev", end_b)]
    for ns, end in ((first, end_a), (second, end_b)):
        steps += [("-n", ns, "link", "set", "lo", "up"), ("-n", ns, "link", "set", end, "up")]
    for step in steps:
        result = ip(*step)
        if result.returncode != 0:
            raise RuntimeError("ip " + " ".join(step) + ": " + (result.stderr.strip().splitlines() or ["failed"])[0])


def mpirun(folder, first, command):
    # ob1 with tcp,self: no UCX, which would pick its own transports, shared memory among them.
    launcher = ["ip", "netns", "exec", first, MPIRUN, "--allow-run-as-root", "--hostfile", folder + "/hosts",
                "--mca", "plm_rsh_agent", folder + "/agent", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", SUBNET + ".0/24", "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
                "-np", "2"]
    return subprocess.run(launcher + command, capture_output=True, text=True, timeout=LIMIT)


def checks(folder, first):
    here = os.readlink("/proc/self/ns/net")
    where = mpirun(folder, first, ["sh", "-c", 'echo "$OMPI_COMM_WORLD_RANK $(readlink /proc/self/ns/net)"'])
    spaces = dict(line.split(None, 1) for line in where.stdout.splitlines() if len(line.split()) == 2)
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
    remove_orphans()
    first, second, end_a, end_b = names(os.getpid())
    remove(os.getpid())  # a dead run's, whose process id this one was given again
    tried = ip("netns", "add", first)
    if tried.returncode != 0:
        print("skipped: no network namespaces here (ip netns add: " +
              (tried.stderr.strip().splitlines() or ["failed"])[0] + ")")
        return SKIPPED
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated"))  # runs the finally below
    try:
        try:
            make_link(first, second, end_a, end_b)
        except RuntimeError as e:
            print("FAIL: the second namespace and the link: " + str(e))
            return 1
        with tempfile.TemporaryDirectory() as folder:
            with open(folder + "/agent", "w") as f:
                f.write(AGENT.format(subnet=SUBNET, first=first, second=second))
            os.chmod(folder + "/agent", 0o755)
            with open(folder + "/hosts", "w") as f:
                f.write(f"{SUBNET}.1 slots=1\n{SUBNET}.2 slots=1\n")
            checks(folder, first)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM would cut the cleanup short
        remove(os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
