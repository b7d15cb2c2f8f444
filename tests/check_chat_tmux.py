#!/usr/bin/env python3
"""`minfer chat` in a real terminal (tmux): keys sent, the screen read.

1. Two turns with the chat fixture (tests/data/models/smollm-chat). The second turn prefills only
   what the cache does not hold: --verbose's line says how many tokens each turn prefilled and how
   many came from the cache, and the second turn's cached tokens must cover the first turn's prompt.
   The answers appear on the screen, /reset and /exit work.
2. Ctrl-C during a long answer (a model of stories42M's shape with the fixture's 615 tokens, on
   the reference kernels, slow on purpose)
   stops the answer, not the program: "[stopped]" and a new prompt appear, and the chat goes on.

  check_chat_tmux.py MINFER SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


def tmux(*args, check=True):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=check).stdout


def screen(name):
    return tmux("capture-pane", "-p", "-t", name, "-S", "-200")


def wait_for(what, probe, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    return None


def fail(message, name, log=None):
    text = f"FAIL: {message}\n--- screen ---\n{screen(name) if alive(name) else '(ended)'}"
    if log and os.path.exists(log):
        text += "\n--- stderr ---\n" + open(log).read()
    tmux("kill-session", "-t", name, check=False)
    sys.exit(text)


def alive(name):
    return subprocess.run(["tmux", "has-session", "-t", name], capture_output=True).returncode == 0


def verbose_turns(log, n):
    """--verbose's per-turn lines once there are n of them: (turn, prefilled, total, cached)."""
    if not os.path.exists(log):
        return None
    found = re.findall(r"turn (\d+): prefilled (\d+) of (\d+) tokens, (\d+) from the cache", open(log).read())
    return found if len(found) >= n else None


def prompts_on_screen(name):
    return sum(1 for line in screen(name).splitlines() if line.startswith(">"))


def start(name, command):
    # exec: Ctrl-C reaches minfer alone (a shell around it would die of it); the pane stays after
    # minfer exits (remain-on-exit) so that its screen can still be read.
    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "50", "exec " + command, ";",
         "set-option", "-t", name, "remain-on-exit", "on")


def turns_and_exit(minfer, source, work):
    name, log = "minfer-chat-turns", os.path.join(work, "turns.log")
    model = os.path.join(source, "tests", "data", "models", "smollm-chat")
    start(name, f"'{minfer}' chat -m '{model}' --temp 0 -n 12 --verbose 2>'{log}'")
    if not wait_for("the first prompt", lambda: prompts_on_screen(name) >= 1):
        fail("no prompt appeared", name, log)
    turns = []
    for i, message in enumerate(["Hello there, who are you?", "What can you do?"]):
        tmux("send-keys", "-t", name, message, "Enter")
        lines = wait_for(f"turn {i + 1}", lambda: verbose_turns(log, i + 1))
        if not lines:
            fail(f"turn {i + 1} never ended", name, log)
        turns = [tuple(int(x) for x in t) for t in lines]
        if not wait_for("the next prompt", lambda: prompts_on_screen(name) >= i + 2, 30):
            fail(f"no prompt after turn {i + 1}", name, log)
    (n1, pre1, total1, cached1), (n2, pre2, total2, cached2) = turns[0], turns[1]
    if cached1 != 0 or pre1 != total1:
        fail(f"turn 1 prefilled {pre1} of {total1} with {cached1} cached; an empty cache holds nothing", name, log)
    if pre2 + cached2 != total2 or cached2 < total1 - 2 or pre2 >= total2 - total1 + 2 + 13:
        fail(f"turn 2 prefilled {pre2} of {total2} tokens with {cached2} from the cache; turn 1's prompt was "
             f"{total1} tokens: only the new turn should be prefilled", name, log)
    if "Hello there, who are you?" not in screen(name):
        fail("the typed message is not on the screen", name, log)
    tmux("send-keys", "-t", name, "/reset", "Enter")
    if not wait_for("/reset", lambda: "(a new conversation)" in screen(name), 30):
        fail("/reset did not answer", name, log)
    tmux("send-keys", "-t", name, "/exit", "Enter")
    ended = wait_for("the exit", lambda: prompt_gone(name), 30)
    tmux("kill-session", "-t", name, check=False)
    if not ended:
        sys.exit("FAIL: /exit did not end the chat")
    print(f"chat turns: turn 1 prefilled {pre1} tokens; turn 2 prefilled {pre2} of {total2} "
          f"({cached2} from the cache, turn 1's prompt was {total1})")


def prompt_gone(name):
    """minfer has exited (its pane is dead)."""
    out = subprocess.run(["tmux", "list-panes", "-t", name, "-F", "#{pane_dead}"], capture_output=True,
                         text=True).stdout
    return out.strip() != "0"


def ctrl_c_stops_the_answer(minfer, source, work):
    name, log = "minfer-chat-ctrl-c", os.path.join(work, "ctrl-c.log")
    tokenizer = os.path.join(source, "tests", "data", "models", "smollm-chat", "tokenizer.json")
    # stories42M's shape with the fixture tokenizer's 615 tokens, on the plain-loop kernels.
    model = os.path.join(work, "slow.bin")
    subprocess.run([minfer, "make-model", "-o", model, "--preset", "stories42M", "--vocab", "615"], check=True,
                   capture_output=True)
    start(name, f"'{minfer}' chat -m '{model}' -z '{tokenizer}' --chat-template chatml --device ref "
                f"--temp 0 -n 900 --verbose 2>'{log}'")
    if not wait_for("the first prompt", lambda: prompts_on_screen(name) >= 1):
        fail("no prompt appeared", name, log)
    tmux("send-keys", "-t", name, "Tell me a long story", "Enter")
    time.sleep(3)
    if not alive(name) or "turn 1:" in open(log).read():
        fail("the answer ended before Ctrl-C (it should take far longer)", name, log)
    tmux("send-keys", "-t", name, "C-c")
    if not wait_for("[stopped]", lambda: "[stopped]" in screen(name), 60):
        fail("Ctrl-C did not stop the answer", name, log)
    if not wait_for("a new prompt", lambda: prompts_on_screen(name) >= 2, 30):
        fail("no prompt after Ctrl-C", name, log)
    if prompt_gone(name):
        fail("Ctrl-C ended the program", name, log)
    tmux("send-keys", "-t", name, "/exit", "Enter")
    wait_for("the exit", lambda: prompt_gone(name), 30)
    tmux("kill-session", "-t", name, check=False)
    print("chat Ctrl-C: the answer stopped, the chat went on")


def main():
    minfer, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if shutil.which("tmux") is None:
        print("skipped: tmux is not installed (apt-get install tmux)")
        sys.exit(SKIP)
    with tempfile.TemporaryDirectory() as work:
        os.environ["TMUX_TMPDIR"] = work  # a tmux server of its own
        try:
            turns_and_exit(minfer, source, work)
            ctrl_c_stops_the_answer(minfer, source, work)
        finally:
            subprocess.run(["tmux", "kill-server"], capture_output=True)


if __name__ == "__main__":
    main()
