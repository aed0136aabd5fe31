#!/usr/bin/env python3
"""Which compressed form of a model is worth serving: builds every candidate
with lowrank's own commands, measures perplexity, weight bytes per token and
decode speed, and writes a table and an SVG of perplexity against bytes per
token with the Pareto frontier marked. Standard library only; not run in CI.

  scripts/frontier.py -m MODEL.gguf --out DIR [--calib ../shared/data/wiki.calib.raw]
      [--eval ../shared/data/wiki.eval.raw] [--chunks 32] [--threads 2]
      [--calib-samples 64] [--set full|quick] [--only NAME,...] [--lowrank build/lowrank]
      [--reps 3] [--remeasure]

Candidates (--set full): the source file; `lowrank quantize` to q8_0, q6_k,
q5_k, q4_k, q3_k, q2_k, plain and activation-weighted (`-aw`; rows a K-quant
does not fit fall back as llama.cpp does); `lowrank compress` whitened low
rank at keep 0.5 and 0.8 with f16, q8_0 and q4_k factors, plain and pivoted
(`--storage pivoted`, `lowrank-piv-*`), all twelve from as few compress
runs as memory allows (one calibration and decomposition each); the residual form `--residual q2_k`, `q3_k` and `q4_k` (2, 3
and 4 bits) with corrections of keep 0.05 and 0.1 (q8_0 factors), and two
whose correction `--allocate all` spreads over the matrices at 3.5 bits per
weight or less (`residual-q3_k-0.007-alloc`, `residual-q2_k-0.1-alloc`). Everything lands in DIR and DIR/frontier.json caches each
measurement: a rerun skips what exists, so an interrupted run resumes.
Decode speed: one `lowrank bench` over all candidates (per-token plan,
--prompt 64 --gen 64, median of --reps), the source as the `dense` row;
--remeasure runs it again over a cached set.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

FORMATS = ["q8_0", "q6_k", "q5_k", "q4_k", "q3_k", "q2_k"]


def lowrank_name(a):
    """A low-rank candidate's name from its build arguments."""
    return f"lowrank-{'piv-' if a['pivoted'] else ''}{a['factor']}-{a['keep']}"


def candidates(kind, rounds=1):
    """(name, command builder kind, args) in build order."""
    c = [("source", "source", {})]
    types = FORMATS if kind == "full" else ["q8_0", "q4_k", "q3_k"]
    c += [(t, "quantize", {"type": t}) for t in types]
    c += [(t + "-aw", "quantize", {"type": t, "aw": True}) for t in types]
    keeps = ["0.5", "0.8"] if kind == "full" else ["0.8"]
    for piv in (False, True):
        for ft in (["f16", "q8_0", "q4_k"] if kind == "full" else ["q8_0"]):
            c += [(lowrank_name(a), "compress", a)
                  for a in ({"keep": k, "factor": ft, "pivoted": piv} for k in keeps)]
    for q in (["q2_k", "q3_k", "q4_k"] if kind == "full" else ["q2_k"]):
        for k in (["0.05", "0.1"] if kind == "full" else ["0.1"]):
            c.append((f"residual-{q}-{k}" + (f"-r{rounds}" if rounds > 1 else ""), "residual",
                      {"type": q, "keep": k, "rounds": rounds}))
    # The correction spread by `--allocate all` (one round), at budgets that
    # keep the whole at or below 3.5 bits per weight with q8_0 factors (8.5
    # bits per kept parameter): q3_k's 3.4375 + 0.007 * 8.5, q2_k's 2.625 +
    # 0.1 * 8.5.
    if kind == "full":
        for q, k in (("q3_k", "0.007"), ("q2_k", "0.1")):
            c.append((f"residual-{q}-{k}-alloc", "residual", {"type": q, "keep": k, "rounds": 1, "allocate": True}))
    return c


class Frontier:
    def __init__(self, a):
        self.a = a
        os.makedirs(a.out, exist_ok=True)
        self.cache_path = os.path.join(a.out, "frontier.json")
        self.cache = json.load(open(self.cache_path)) if os.path.exists(self.cache_path) else {}
        self.t0 = time.time()

    def save(self):
        json.dump(self.cache, open(self.cache_path, "w"), indent=1, sort_keys=True)

    def file(self, name):
        return self.a.model if name == "source" else os.path.join(self.a.out, name + ".gguf")

    def run(self, cmd, retry_on=None):
        """stdout; on failure exits, or returns None when stderr holds retry_on."""
        print("  $ " + " ".join(cmd), file=sys.stderr, flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            if retry_on and retry_on in r.stderr:
                print("  (" + r.stderr.strip().splitlines()[-1] + ")", file=sys.stderr, flush=True)
                return None
            sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
        return r.stdout

    def progress(self, done, total, what):
        el = time.time() - self.t0
        eta = el / done * (total - done) if done else float("nan")
        print(f"[{done}/{total}] {what}  elapsed {el/60:.1f} min, ETA {eta/60:.1f} min",
              file=sys.stderr, flush=True)

    def calib(self):
        return ["--calib", self.a.calib, "--calib-samples", str(self.a.calib_samples), "--calib-len", "512"]

    def build(self, cands):
        """Builds the missing files; quantized ones in two runs (plain, weighted)."""
        lr, t = self.a.lowrank, ["-t", str(self.a.threads)]
        for aw in (False, True):
            todo = [a["type"] for n, k, a in cands
                    if k == "quantize" and bool(a.get("aw")) == aw and not os.path.exists(self.file(n))]
            if todo:
                out = os.path.join(self.a.out, "{type}" + ("-aw" if aw else "") + ".gguf")
                self.run([lr, "quantize", "-m", self.a.model, "--type", ",".join(todo), "-o", out,
                          "--fallback"] + (self.calib() if aw else []) + t)
        # The missing low-rank files from as few runs as memory allows (one
        # calibration and decomposition serve a run's keeps, factor types and
        # storages): all at once, else one run per factor type, per factor
        # type and storage, per file (compress refuses, before calibrating,
        # a run whose factors would not fit).
        todo = [a for n, k, a in cands if k == "compress" and not os.path.exists(self.file(n))]
        levels = [lambda a: 0, lambda a: a["factor"], lambda a: (a["factor"], a["pivoted"]),
                  lambda a: (a["factor"], a["pivoted"], a["keep"])]
        self.build_lowrank(todo, levels, t)
        for q, alloc in sorted({(a["type"], bool(a.get("allocate"))) for n, k, a in cands if k == "residual"}):
            todo = [(n, a["keep"]) for n, k, a in cands
                    if k == "residual" and a["type"] == q and bool(a.get("allocate")) == alloc
                    and not os.path.exists(self.file(n))]
            # One run per residual type (its quantization differs) and way of
            # spreading the correction, for every keep; with several rounds one
            # per keep (the quantized W follows the correction).
            runs = [todo] if self.a.residual_rounds == 1 or alloc else [[x] for x in todo]
            for run in runs:
                if not run:
                    continue
                suffix = "-alloc" if alloc else ""
                out = self.file(run[0][0]) if len(run) == 1 else self.file(f"residual-{q}-{{keep}}{suffix}")
                extra = ["--allocate", "all"] if alloc else \
                    ["--residual-rounds", str(self.a.residual_rounds)] if self.a.residual_rounds > 1 else []
                self.run([lr, "compress", "-m", self.a.model, "--residual", q, "--keep",
                          ",".join(k for _, k in run)] + extra + ["-o", out] + self.calib() + t)

    def build_lowrank(self, todo, levels, t):
        groups = {}
        for a in todo:
            groups.setdefault(levels[0](a), []).append(a)
        for group in groups.values():
            uniq = lambda key: sorted({a[key] for a in group})
            pattern = os.path.join(self.a.out, "lowrank-{storage}-{factor}-{keep}.gguf")
            cmd = [self.a.lowrank, "compress", "-m", self.a.model, "--keep", ",".join(uniq("keep")),
                   "--factor-type", ",".join(uniq("factor")), "--storage",
                   ",".join("pivoted" if p else "plain" for p in uniq("pivoted")), "-o", pattern] \
                + self.calib() + t
            if self.run(cmd, retry_on="write fewer at once" if len(levels) > 1 else None) is None:
                self.build_lowrank(group, levels[1:], t)
                continue
            for a in group:  # each lands under its name; combinations no candidate asked for go
                made = pattern.format(storage="pivoted" if a["pivoted"] else "plain", factor=a["factor"],
                                      keep=a["keep"])
                os.replace(made, self.file(lowrank_name(a)))
            for left in [f for f in os.listdir(self.a.out)
                         if f.startswith("lowrank-plain-") or f.startswith("lowrank-pivoted-")]:
                os.remove(os.path.join(self.a.out, left))

    def perplexity(self, name):
        out = self.run([self.a.lowrank, "perplexity", "-m", self.file(name), "-f", self.a.eval, "-c",
                        "512", "--chunks", str(self.a.chunks), "--no-progress", "-t",
                        str(self.a.threads)])
        m = re.search(r"ppl = ([0-9.]+) \+/- ([0-9.]+)", out)
        if not m:
            sys.exit(f"no perplexity in: {out}")
        return float(m.group(1)), float(m.group(2))

    def speed(self, names):
        js = os.path.join(self.a.out, "bench.json")
        others = [self.file(n) for n in names if n != "source"]
        self.run([self.a.lowrank, "bench", "-m", ",".join(others), "--dense", self.a.model, "--modes",
                  "dense,per-token", "--prompt", "64", "--gen", "64", "--reps", str(self.a.reps), "-t",
                  str(self.a.threads), "--json", js])
        self.read_speeds(names)

    def read_speeds(self, names):
        """Decode speeds from DIR/bench.json. `lowrank bench` runs the candidates one
        after another, each interleaved with the source (its `dense` row just before
        its own): a candidate's speed relative to the source is taken against that
        paired row (dense_tok_s), which cancels the machine's drift over the run."""
        rows = json.load(open(os.path.join(self.a.out, "bench.json")))
        paired, dense = {}, []
        last_dense = None
        for r in rows["rows"]:
            if r["mode"] == "dense":
                last_dense = r
                dense.append(r)
            else:
                paired[r["model"]] = (r, last_dense)
        for n in names:
            if n == "source":
                r = dense[-1]
                tok = sorted(d["tokens_per_s"] for d in dense)[len(dense) // 2]
                self.cache.setdefault(n, {}).update(tok_s=tok, dense_tok_s=tok,
                                                    weight_mb_per_token=r["weight_mb_per_token"],
                                                    read_gbs=rows["read_bandwidth_gbs"])
                continue
            r, d = paired[self.file(n)]
            self.cache.setdefault(n, {}).update(
                tok_s=r["tokens_per_s"], dense_tok_s=d["tokens_per_s"],
                weight_mb_per_token=r["weight_mb_per_token"], read_gbs=rows["read_bandwidth_gbs"])
        self.save()


def pareto(points):
    """Names on the lower-left frontier of (bytes, ppl)."""
    best, out = math.inf, set()
    for name, x, y in sorted(points, key=lambda p: (p[1], p[2])):
        if y < best:
            best = y
            out.add(name)
    return out


def write_svg(path, rows, front, title):
    W, H, L, R, T, B = 760, 480, 70, 20, 40, 50
    xs = [r["weight_mb_per_token"] for r in rows]
    ys = [math.log10(r["ppl"]) for r in rows]
    x0, x1 = min(xs) * 0.9, max(xs) * 1.05
    y0, y1 = min(ys) - 0.05, max(ys) + 0.05
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    py = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">weight MB read per token</text>',
         f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" text-anchor="middle">perplexity (log scale)</text>']
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        s.append(f'<text x="{px(x):.1f}" y="{H-B+15}" text-anchor="middle">{x:.0f}</text>')
        y = y0 + (y1 - y0) * i / 5
        s.append(f'<text x="{L-5}" y="{py(y)+4:.1f}" text-anchor="end">{10**y:.3g}</text>')
    fr = sorted([r for r in rows if r["name"] in front], key=lambda r: r["weight_mb_per_token"])
    s.append('<polyline fill="none" stroke="#2a7" stroke-width="2" points="' + " ".join(
        f'{px(r["weight_mb_per_token"]):.1f},{py(math.log10(r["ppl"])):.1f}' for r in fr) + '"/>')
    colors = {"source": "#000", "quantize": "#36c", "compress": "#c63", "residual": "#939"}
    for r in rows:
        x, y = px(r["weight_mb_per_token"]), py(math.log10(r["ppl"]))
        s.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colors[r["kind"]]}"/>')
        s.append(f'<text x="{x+6:.1f}" y="{y-4:.1f}">{r["name"]} ({r["tok_s"]:.0f} tok/s)</text>')
    for i, (k, c) in enumerate(colors.items()):
        s.append(f'<circle cx="{W-150}" cy="{T+10+i*15}" r="4" fill="{c}"/><text x="{W-140}" y="{T+14+i*15}">{k}</text>')
    s.append(f'<text x="{W-150}" y="{T+14+4*15+5}" fill="#2a7">— frontier</text>')
    s.append("</svg>")
    open(path, "w").write("\n".join(s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--calib", default="../shared/data/wiki.calib.raw")
    ap.add_argument("--eval", default="../shared/data/wiki.eval.raw")
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3,
                    help="decode repetitions per candidate and per source run beside it (this host's "
                         "read rate switches between two levels: 9 or more steady the ratios)")
    ap.add_argument("--remeasure", action="store_true", help="measure the decode speeds again")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib-samples", type=int, default=64)
    ap.add_argument("--set", choices=["full", "quick"], default="full")
    ap.add_argument("--only", help="a comma-separated subset of the set's candidate names (the source is always in)")
    ap.add_argument("--residual-rounds", type=int, default=1,
                    help="rounds of the residual form's alternating fit (compress --residual-rounds; "
                         "names gain -rN)")
    ap.add_argument("--lowrank", default="build/lowrank")
    a = ap.parse_args()
    cands = candidates(a.set, a.residual_rounds)
    if a.only:
        names = {n for n, _, _ in cands}
        want = set(a.only.split(",")) | {"source"}
        if want - names:
            sys.exit(f"frontier: --only names no candidate of --set {a.set}: {', '.join(sorted(want - names))} "
                     f"(the set's names: {', '.join(n for n, _, _ in cands)})")
        cands = [c for c in cands if c[0] in want]
    f = Frontier(a)
    kinds = {n: k for n, k, _ in cands}
    f.progress(0, len(cands) + 1, "building candidates")
    f.build(cands)
    for i, (n, _, _) in enumerate(cands):
        if "ppl" not in f.cache.get(n, {}):
            f.progress(i, len(cands) + 1, f"perplexity of {n}")
            p, e = f.perplexity(n)
            f.cache.setdefault(n, {}).update(ppl=p, ppl_err=e, file_bytes=os.path.getsize(f.file(n)))
            f.save()
    missing = [n for n, _, _ in cands if a.remeasure or "tok_s" not in f.cache.get(n, {})]
    if missing:
        f.progress(len(cands), len(cands) + 1, "decode speed of every candidate")
        f.speed([n for n, _, _ in cands])
    elif any("dense_tok_s" not in f.cache[n] for n, _, _ in cands):
        f.read_speeds([n for n, _, _ in cands])  # a cache from before the pairing
    rows = [dict(name=n, kind=kinds[n], **f.cache[n]) for n, _, _ in cands]
    front = pareto([(r["name"], r["weight_mb_per_token"], r["ppl"]) for r in rows])
    src = f.cache["source"]
    # vs source speed: against the source's run interleaved with this candidate
    # (read_speeds). speed x bytes: that ratio times the candidate's bytes
    # relative to the source's; 1.0 when decode speed follows the bytes read
    # exactly (the target: >= 0.9 on the frontier).
    lines = ["| candidate | ppl | ± | weight MB/token | vs source bytes | decode tok/s | source alongside "
             "| vs source speed | speed x bytes | frontier |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"]
    for r in sorted(rows, key=lambda r: r["weight_mb_per_token"]):
        speed = r["tok_s"] / r["dense_tok_s"]
        size = r["weight_mb_per_token"] / src["weight_mb_per_token"]
        lines.append(f'| {r["name"]} | {r["ppl"]:.3f} | {r["ppl_err"]:.3f} | {r["weight_mb_per_token"]:.1f} | '
                     f'{size:.3f} | {r["tok_s"]:.1f} | {r["dense_tok_s"]:.1f} | {speed:.2f}x | {speed * size:.2f} | '
                     f'{"yes" if r["name"] in front else ""} |')
    table = "\n".join(lines)
    open(os.path.join(a.out, "frontier.md"), "w").write(table + "\n")
    write_svg(os.path.join(a.out, "frontier.svg"), rows, front,
              f"{os.path.basename(a.model)}: perplexity vs bytes per token")
    print(table)
    f.progress(len(cands) + 1, len(cands) + 1, "done")


if __name__ == "__main__":
    main()
