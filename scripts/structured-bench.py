#!/usr/bin/env python3
"""Structured outputs' cost: output tokens/s of chat completions constrained
by a JSON schema against the same requests unconstrained, at each
concurrency, on one OpenAI-compatible server (lowrank serve, or
llama-server with its `json_schema` field); and, from lowrank's /metrics,
the grammar mask's time per token against the forward step's. Every
request generates exactly --gen tokens (ignore_eos; the schema's strings
are unbounded so that a constrained answer does not end early), with the
same prompts. Standard library only. Not run in CI.

  scripts/structured-bench.py --url http://127.0.0.1:8080 [--concurrency 1,8]
                              [--gen 64] [--requests 16] [--llama-server]
"""
import argparse
import http.client
import json
import re
import sys
import threading
import time
import urllib.parse

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "notes": {"type": "string"}}, "required": ["name", "age", "tags", "notes"],
    "additionalProperties": False}


def post(url, path, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {out}")
    return out


def metrics(url):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for name in ("lowrank_grammar_masks_total", "lowrank_grammar_mask_seconds_total",
                 "lowrank_step_seconds_total", "lowrank_steps_total"):
        m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def run(args, level, constrained):
    bodies = []
    for i in range(args.requests):
        b = {"model": "m", "max_tokens": args.gen, "temperature": 0.8, "seed": i, "ignore_eos": True,
             "messages": [{"role": "user", "content": f"Person {i}: describe someone in JSON."}]}
        if constrained and args.llama_server:
            b["json_schema"] = SCHEMA
        elif constrained:
            b["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
        bodies.append(b)
    done, lock, tokens = [0], threading.Lock(), [0]

    def worker():
        while True:
            with lock:
                if done[0] >= len(bodies):
                    return
                b = bodies[done[0]]
                done[0] += 1
            r = post(args.url, "/v1/chat/completions", b)
            with lock:
                tokens[0] += r["usage"]["completion_tokens"]

    before = None if args.llama_server else metrics(args.url)
    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(level)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    row = {"concurrency": level, "constrained": constrained, "tok_s": tokens[0] / wall, "tokens": tokens[0]}
    if before is not None:
        after = metrics(args.url)
        d = {k: after[k] - before[k] for k in after}
        if d["lowrank_grammar_masks_total"]:
            row["mask_ms"] = 1e3 * d["lowrank_grammar_mask_seconds_total"] / d["lowrank_grammar_masks_total"]
        row["step_ms"] = 1e3 * d["lowrank_step_seconds_total"] / max(1, d["lowrank_steps_total"])
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--llama-server", action="store_true", help="the peer: schemas in its json_schema field")
    args = ap.parse_args()
    post(args.url, "/v1/chat/completions", {"model": "m", "max_tokens": 4,  # warm up
                                            "messages": [{"role": "user", "content": "hi"}]})
    rows = []
    for level in map(int, args.concurrency.split(",")):
        for constrained in (False, True):  # interleaved: plain then constrained at each level
            rows.append(run(args, level, constrained))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print("| concurrency | plain tok/s | json_schema tok/s | ratio | mask ms/token | step ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for plain, con in zip(rows[::2], rows[1::2]):
        print(f"| {plain['concurrency']} | {plain['tok_s']:.1f} | {con['tok_s']:.1f} | "
              f"{con['tok_s'] / plain['tok_s']:.2f} | {con.get('mask_ms', float('nan')):.3f} | "
              f"{con.get('step_ms', float('nan')):.1f} |")


if __name__ == "__main__":
    main()
