#!/usr/bin/env python3
"""llama.cpp's speculative decoding on the prompt sets of `lowrank bench --spec`
(docs/results/speculative.md), for side-by-side tables: each prompt of each set,
in Qwen's ChatML with its default system turn (the token counts lowrank's chat
template gives), answered greedily by llama-speculative-simple in each
configuration, interleaved prompt by prompt. Per set and configuration: decode
tok/s (decoded tokens over decode seconds, summed over the set), drafted and
accepted tokens. Not run in CI.

  scripts/spec-peer.py --bin DIR -m TARGET [-md DRAFT] --prompts A.txt,B.txt
                       [--gen 128] [-t 2] [--configs none,draft-simple:8,ngram-simple]
"""
import argparse
import os
import re
import subprocess
import sys

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def prompt_set(path):
    out = []
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line.startswith("@@@ "):
            out.append([line[4:], []])
        elif out:
            out[-1][1].append(line)
    return [(n, "\n".join(t).rstrip("\n")) for n, t in out]


def chatml(text):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
            "<|im_start|>assistant\n")


def run(a, config, text):
    kind, _, n = config.partition(":")
    cmd = [os.path.join(a.bin, "llama-speculative-simple"), "-m", a.m, "-p", chatml(text), "-n", str(a.gen),
           "--temp", "0", "-t", str(a.t), "-c", "4096", "-fa", "on", "--spec-type", kind]
    if kind.startswith("draft"):
        cmd += ["-md", a.md, "--spec-draft-n-max", n or "8"]
    env = dict(os.environ, LD_LIBRARY_PATH=a.bin)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    log = r.stdout + r.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", log)
    if r.returncode != 0 or not m:
        sys.exit(f"{config}: llama-speculative-simple failed:\n{log[-2000:]}")
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", log)
    return int(m.group(1)), float(m.group(2)), int(drafted.group(1)) if drafted else 0, \
        int(accepted.group(1)) if accepted else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("-m", required=True)
    p.add_argument("-md", default="")
    p.add_argument("--prompts", required=True)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("-t", type=int, default=2)
    p.add_argument("--configs", default="draft-simple:8,ngram-simple,ngram-mod")
    a = p.parse_args()
    configs = a.configs.split(",")
    print("| set | llama.cpp | answers | tokens | decode tok/s | drafted | accepted |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for path in a.prompts.split(","):
        name = os.path.splitext(os.path.basename(path))[0]
        sums = {c: [0, 0.0, 0, 0] for c in configs}
        prompts = prompt_set(path)
        for pname, text in prompts:
            for c in configs:
                got = run(a, c, text)
                print(f"  {pname} {c}: {got[0]} tokens in {got[1]:.2f} s, {got[2]} drafted, {got[3]} accepted",
                      file=sys.stderr)
                sums[c] = [x + y for x, y in zip(sums[c], got)]
        for c in configs:
            n, s, d, acc = sums[c]
            pct = f" ({100 * acc / d:.0f}%)" if d else ""
            print(f"| {name} | {c} | {len(prompts)} | {n} | {n / s:.1f} | {d} | {acc}{pct} |", flush=True)


if __name__ == "__main__":
    main()
