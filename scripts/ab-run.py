#!/usr/bin/env python3
"""Interleaved A/B of two lowrank binaries' `run`: prompt and decode tok/s.

  scripts/ab-run.py OLD NEW -m MODEL [--rounds 5] [--chars 2000] [-n 64] [-t 2] [-- RUN ARGS]

Each round runs OLD then NEW (then NEW, OLD in the next round) on the same
greedy raw prompt, the first --chars characters of ../shared/data/wiki.eval.raw,
and reads the speeds from the stats line `run` prints. Arguments after `--` go to
both runs (e.g. `-- --cache-type-k svdq`). Prints the medians and
the ratios NEW/OLD.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("old")
ap.add_argument("new")
ap.add_argument("-m", "--model", required=True)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--chars", type=int, default=2000)
ap.add_argument("-n", type=int, default=64)
ap.add_argument("-t", type=int, default=2)
argv = sys.argv[1:]
extra = argv[argv.index("--") + 1:] if "--" in argv else []
a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "..", "..", "shared", "data", "wiki.eval.raw"), encoding="utf-8") as f:
    prompt = f.read()[: a.chars]
stats = re.compile(r"prompt: (\d+) tokens.*?\(([\d.]+) tok/s\) \| generated: (\d+) tokens, decode ([\d.]+) tok/s")
got = {a.old: [], a.new: []}
for r in range(a.rounds):
    for b in ([a.old, a.new] if r % 2 == 0 else [a.new, a.old]):
        p = subprocess.run([b, "run", "--raw", "-m", a.model, "-p", prompt, "-n", str(a.n), "--temp", "0",
                            "-t", str(a.t), "-c", "4096", *extra], capture_output=True, text=True, check=True)
        m = stats.search(p.stderr)
        assert m, p.stderr[-500:]
        got[b].append((int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))))
for name, b in (("old", a.old), ("new", a.new)):
    rows = got[b]
    print(f"{name}: {b}: prompt {rows[0][0]} tokens, generated {rows[0][2]}; prompt tok/s "
          f"{statistics.median(x[1] for x in rows):.1f} (runs {[x[1] for x in rows]}), decode tok/s "
          f"{statistics.median(x[3] for x in rows):.1f} (runs {[x[3] for x in rows]})")
po = statistics.median(x[1] for x in got[a.old])
pn = statistics.median(x[1] for x in got[a.new])
do = statistics.median(x[3] for x in got[a.old])
dn = statistics.median(x[3] for x in got[a.new])
print(f"new/old: prompt {pn / po:.3f}x, decode {dn / do:.3f}x")
