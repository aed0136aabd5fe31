#!/usr/bin/env python3
"""KV-cache bytes a position, in RAM, of each cache type: for every K/V pair,
start `lowrank serve -np 2` with those types, send one completion of a long
prompt, and read lowrank_kv_cache_resident_bytes before and after it (the
caches take RAM as positions are written). Standard library only. Not run in CI.

  scripts/kv-bytes.py -m MODEL [--bin build/lowrank] [--words 1000] [--types f16/f16,q8_0/q8_0,...]
"""
import argparse
import http.client
import json
import re
import subprocess
import time


def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, path, body=json.dumps(body) if body else None, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    d = r.read()
    c.close()
    return d


def metrics(port):
    out = {}
    for line in call(port, "GET", "/metrics").decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def measure(binary, model, k, v, words):
    log = open("/tmp/lowrank-kv-bytes.log", "w+")
    p = subprocess.Popen([binary, "serve", "-m", model, "-np", "2", "-c", "4096", "--port", "0", "-t", "2",
                          "--cache-type-k", k, "--cache-type-v", v], stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(1200):
            text = open(log.name).read()
            m = re.search(r"http://127\.0\.0\.1:(\d+)", text)
            if m and "lowrank serve: ready" in text:
                port = int(m.group(1))
                break
            if p.poll() is not None:
                raise RuntimeError(f"lowrank serve exited {p.returncode}:\n{text}")
            time.sleep(0.5)
        if port is None:
            raise RuntimeError("lowrank serve was not ready in time")
        before = metrics(port)
        prompt = " ".join(f"word{i % 97}" for i in range(words))
        r = json.loads(call(port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0}))
        positions = r["usage"]["prompt_tokens"] + 1
        after = metrics(port)
        added = after["lowrank_kv_cache_resident_bytes"] - before["lowrank_kv_cache_resident_bytes"]
        aside = after["lowrank_kv_cache_bytes"] / 2 / 4096  # two slots of 4096 positions
        return positions, before["lowrank_kv_cache_resident_bytes"], added, aside
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default="build/lowrank")
    ap.add_argument("--words", type=int, default=1000)
    ap.add_argument("--types", default="f32/f32,f16/f16,q8_0/f16,kivi2/f16,svdq/f16,q8_0/q8_0,q4_0/q4_0,q4_0-rot/q4_0-rot")
    a = ap.parse_args()
    print("| keys | values | positions | in RAM at ready MiB | in RAM, bytes a position | set aside, bytes a position |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for kv in a.types.split(","):
        k, v = kv.split("/")
        positions, ready, added, aside = measure(a.bin, a.model, k, v, a.words)
        print(f"| {k} | {v} | {positions} | {ready / 2**20:.2f} | {added / positions:.0f} | {aside:.0f} |", flush=True)


if __name__ == "__main__":
    main()
