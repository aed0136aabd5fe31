#!/usr/bin/env python3
"""Serving benchmark against any OpenAI-compatible server (lowrank serve,
llama-server, vLLM): at each concurrency, `requests` streamed completions of a
fixed prompt length and a fixed number of generated tokens (ignore_eos), each
client sending its next request when the last one ends. Reports request
throughput, output tokens/s, time to first token and inter-token latency
(p50/p99). Standard library only. Not run in CI.

  scripts/serve-bench.py --url http://127.0.0.1:8080 [--concurrency 1,2,4,8,16]
                         [--prompt-tokens 256] [--gen 64] [--requests N] [--json OUT]
                         [--shared-prefix N]

--shared-prefix N: every prompt begins with the same text of about N tokens
(a system prompt), then its own --prompt-tokens; a server that shares
prefixes across requests evaluates it once.
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("river mill stone bridge orchard lantern harbor meadow signal thunder copper garden "
         "winter candle market ladder compass feather granite violet").split()


def post(url, path, body, timeout=600):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return c, c.getresponse()


def count_tokens(url, text):
    c, r = post(url, "/tokenize", {"content": text})
    n = len(json.loads(r.read())["tokens"])
    c.close()
    return n


def prompt_of(url, n_tokens, seed, head="Request"):
    """A text of about n_tokens tokens (the server's /tokenize counts), distinct per seed
    so that no server reuses another request's prefix."""
    words = [WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n_tokens)]
    text = f"{head} {seed}: " + " ".join(words)
    n = count_tokens(url, text)
    while n > n_tokens:  # trim to the length asked for
        words = words[:-max(1, (n - n_tokens) // 2)]
        text = f"{head} {seed}: " + " ".join(words)
        n = count_tokens(url, text)
    return text, n


def one_request(url, model, text, gen):
    """(ttft_s, [inter-token gaps], output tokens, e2e_s) of one streamed completion."""
    t0 = time.perf_counter()
    body = {"model": model, "prompt": text, "max_tokens": gen, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    c, r = post(url, "/v1/completions", body)
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, last, gaps, chunks, usage = None, None, [], 0, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            usage = d["usage"]["completion_tokens"]
        if not d.get("choices") or not d["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        if ttft is None:
            ttft = now - t0
        else:
            gaps.append(now - last)
        last = now
        chunks += 1
    c.close()
    return ttft or 0.0, gaps, usage if usage is not None else chunks, time.perf_counter() - t0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def level(url, model, prompts, gen, concurrency, requests):
    results, errors, lock = [], [], threading.Lock()
    todo = list(range(requests))

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                res = one_request(url, model, prompts[i % len(prompts)], gen)
                with lock:
                    results.append(res)
            except Exception as e:  # counted, not fatal
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in results]
    gaps = [g for r in results for g in r[1]]
    out = sum(r[2] for r in results)
    return {"concurrency": concurrency, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "req_per_s": len(results) / wall, "output_tok_per_s": out / wall,
            "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
            "itl_p50_ms": 1000 * pct(gaps, 50), "itl_p99_ms": 1000 * pct(gaps, 99),
            "first_errors": errors[:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="model")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--requests", type=int, default=0, help="per level (default: 2 x concurrency, at least 4)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--shared-prefix", type=int, default=0,
                    help="tokens of a text every prompt begins with (a system prompt)")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    counts = [a.requests or max(4, 2 * c) for c in levels]
    # A prompt of its own for every request: no server finds it cached from an earlier one.
    prompts, n = [], 0
    shared = prompt_of(a.url, a.shared_prefix, 1, "System")[0] + "\n" if a.shared_prefix else ""
    for s in range(sum(counts)):
        text, n = prompt_of(a.url, a.prompt_tokens, s)
        prompts.append(shared + text)
    if shared:
        n = count_tokens(a.url, prompts[-1])
        print(f"# every prompt begins with the same {count_tokens(a.url, shared)} tokens", flush=True)
    print(f"# {a.url}: prompts of ~{n} tokens, {a.gen} tokens out (ignore_eos), streamed", flush=True)
    print("| concurrency | requests | errors | req/s | output tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows, offset = [], 0
    for c, count in zip(levels, counts):
        row = level(a.url, a.model, prompts[offset:offset + count], a.gen, c, count)
        offset += count
        rows.append(row)
        print(f"| {c} | {row['requests']} | {row['errors']} | {row['req_per_s']:.3f} | {row['output_tok_per_s']:.1f} | "
              f"{row['ttft_p50_s']:.2f} | {row['ttft_p99_s']:.2f} | {row['itl_p50_ms']:.0f} | {row['itl_p99_ms']:.0f} |",
              flush=True)
        if row["errors"]:
            print(f"errors: {row['first_errors']}", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
