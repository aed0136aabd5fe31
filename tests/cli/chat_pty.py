#!/usr/bin/env python3
"""lowrank chat through a pseudo-terminal, as a person types into it.

Checks, on the default model (greedy): an answer to the first turn; the
second turn evaluates only what is new (its stats line counts the first
turn as cached); Ctrl-C stops a long answer and the prompt comes back;
a turn longer than the context is refused with the numbers and the chat
goes on; /clear, then /exit ends the process with status 0.
Usage: chat_pty.py path/to/lowrank  (exit 77: the default model is not cached)
"""
import os
import pty
import re
import select
import sys
import time

BIN = sys.argv[1]
out = b""


def read_until(fd, pattern, timeout):
    """Reads the pty until `pattern` (a regex over the bytes read so far) matches after `start`."""
    global out
    start = len(out)
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, out[start:])
        if m:
            return out[start:start + m.end()].decode("utf-8", "replace")
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            out += data
    sys.exit(f"chat_pty: no {pattern!r} within {timeout} s; the screen so far:\n"
             + out[start:].decode("utf-8", "replace"))


def send(fd, text):
    os.write(fd, text.encode())


pid, fd = pty.fork()
if pid == 0:
    os.execv(BIN, [BIN, "chat", "--temp", "0", "-n", "300", "-c", "512", "--stats", "-t", "2",
                     "--wtype", "f16"])  # as stored (Q4_1), this 135M model does not name Paris)

first = read_until(fd, rb"(> |default model not found[^\n]*\n)", 300)
if "default model not found" in first:
    print("chat_pty: skipped, the default model is not cached (scripts/fetch-model.sh)")
    sys.exit(77)

send(fd, "What is the capital of France?\r")
turn1 = read_until(fd, rb"generated: \d+ tokens[^\n]*\n> ", 300)
m1 = re.search(r"prompt: (\d+) tokens \((\d+) cached\)", turn1)
assert m1, turn1
assert "Paris" in turn1, turn1
assert m1.group(2) == "0", turn1
print("turn 1:", turn1.strip().replace("\r", ""))

send(fd, "And what is the capital of Germany?\r")
turn2 = read_until(fd, rb"generated: \d+ tokens[^\n]*\n> ", 300)
m2 = re.search(r"prompt: (\d+) tokens \((\d+) cached\)", turn2)
assert m2, turn2
# The first turn's prompt (and its answer) stayed in the cache: only the new turn ran.
assert int(m2.group(2)) >= int(m1.group(1)), (m1.groups(), m2.groups())
assert int(m2.group(1)) > int(m2.group(2)), m2.groups()
print("turn 2:", turn2.strip().replace("\r", ""))

send(fd, "/clear\r")
read_until(fd, rb"\(conversation cleared\)\r?\n> ", 30)

send(fd, "Write a very long story about a dragon who learns to read, in many chapters.\r")
read_until(fd, rb"dragon who learns to read, in many chapters\.\r?\n.{40}", 300)  # it is answering
t0 = time.time()
send(fd, "\x03")  # Ctrl-C
turn3 = read_until(fd, rb"\(interrupted\)[^\n]*\n> ", 60)
m3 = re.search(r"generated: (\d+) tokens", turn3)
assert m3 and int(m3.group(1)) < 300, turn3
print(f"Ctrl-C: the answer stopped after {m3.group(1)} tokens, {time.time() - t0:.2f} s after the key")

send(fd, "/clear\r")
read_until(fd, rb"\(conversation cleared\)\r?\n> ", 30)
send(fd, " ".join(["river"] * 600) + "\r")
refused = read_until(fd, rb"context holds 512[^\n]*\n> ", 120)
assert re.search(r"the prompt has \d+ tokens", refused), refused
print("too long:", refused.strip().splitlines()[-2][:160])

send(fd, "/exit\r")
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
assert code == 0, f"lowrank chat exited with {code}"
print("chat_pty: 5 checks passed")
