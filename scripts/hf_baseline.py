#!/usr/bin/env python3
"""The external baseline of the GPU check: HuggingFace transformers' LLaMA with
every attention and MLP projection replaced by two linear layers (the SVD-LLM
module structure: x -> Linear(in, r) -> Linear(r, out)), at the ranks lowrank
gives a keep fraction (rank_for_keep), bf16 on the GPU, decoding with
StaticCache (generate(cache_implementation="static")), greedy, eager (no
torch.compile), random weights. The dense model is measured too.

decode ms/token = (time of generate(gen tokens) - time of generate(1 token)) / (gen - 1),
median over repetitions, so prefill is not counted.

Usage: python3 scripts/hf_baseline.py --shape llama-7b --keep 0.5 --prompt 512,2048 --gen 32,128 [--json out.json]
Needs torch and transformers; nothing is downloaded.
"""
import argparse
import json
import math
import statistics
import sys
import time

SHAPES = {  # as lowrank synth (src/compress/synth_model.cpp)
    "tiny": dict(layers=2, dim=256, ffn=384, heads=4, kv_heads=2, vocab=300, theta=10000.0, eps=1e-5, tied=False),
    "tiny-mha128": dict(layers=2, dim=256, ffn=384, heads=2, kv_heads=2, vocab=300, theta=10000.0, eps=1e-6,
                        tied=False),
    "smollm2-135m": dict(layers=30, dim=576, ffn=1536, heads=9, kv_heads=3, vocab=49152, theta=100000.0, eps=1e-5,
                         tied=True),
    "llama-7b": dict(layers=32, dim=4096, ffn=11008, heads=32, kv_heads=32, vocab=32000, theta=10000.0, eps=1e-6,
                     tied=False),
}


def rank_for_keep(keep, m, n):
    # lowrank's rule (src/compress/factorize.h): r = floor(m n keep / (m + n)), clamped to [1, min(m, n)].
    return max(1, min(min(m, n), int(math.floor(m * n * keep / (m + n)))))


def build(shape, keep, torch, transformers, device):
    s = SHAPES[shape]
    cfg = transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["dim"], intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], max_position_embeddings=4096,
        rms_norm_eps=s["eps"], rope_theta=s["theta"], tie_word_embeddings=s["tied"])
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    if keep < 1:
        nn = torch.nn
        for layer in model.model.layers:
            for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                  (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
                for n in names:
                    lin = getattr(parent, n)
                    out_f, in_f = lin.weight.shape
                    r = rank_for_keep(keep, out_f, in_f)
                    pair = nn.Sequential(nn.Linear(in_f, r, bias=False), nn.Linear(r, out_f, bias=False))
                    setattr(parent, n, pair.to(device=device, dtype=torch.bfloat16))
    model.eval()
    model.generation_config.pad_token_id = 0
    return model


def time_generate(model, ids, new, torch):
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         cache_implementation="static")
    sync()
    assert out.shape[1] == ids.shape[1] + new, out.shape
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama-7b", choices=sorted(SHAPES))
    ap.add_argument("--keep", type=float, default=0.5)
    ap.add_argument("--prompt", default="512,2048")
    ap.add_argument("--gen", default="32,128")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test of this script")
    a = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        sys.exit(f"hf_baseline: needs torch and transformers ({e})")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("hf_baseline: no CUDA device visible to torch")
    prompts = [int(x) for x in a.prompt.split(",")]
    gens = [int(x) for x in a.gen.split(",")]
    if len(prompts) != len(gens):
        sys.exit("hf_baseline: --prompt and --gen need the same number of values")
    rows = []
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    print(f"HF transformers {transformers.__version__}, torch {torch.__version__}, {where}")
    print("| model | shape | parameters | prompt/gen | decode ms/tok | prefill+1 ms |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    for label, keep in (("dense", 1.0), ("lowrank", a.keep)):
        model = build(a.shape, keep, torch, transformers, a.device)
        params = sum(p.numel() for p in model.parameters())  # tied embeddings once
        with torch.inference_mode():
            for p, g in zip(prompts, gens):
                ids = torch.randint(3, SHAPES[a.shape]["vocab"], (1, p), device=a.device)
                time_generate(model, ids, g, torch)  # warm-up: allocates the static cache at its largest
                one, full = [], []
                for _ in range(a.reps):
                    one.append(time_generate(model, ids, 1, torch))
                    full.append(time_generate(model, ids, g, torch))
                t1, tg = statistics.median(one), statistics.median(full)
                ms = (tg - t1) / (g - 1) * 1e3
                rows.append(dict(model=label, keep=keep, shape=a.shape, parameters=params, prompt=p, gen=g,
                                 decode_ms_per_token=ms, prefill_plus_one_ms=t1 * 1e3))
                print(f"| {label} (keep {keep}) | {a.shape} | {params / 1e6:.2f} M | {p}/{g} | {ms:.3f} | "
                      f"{t1 * 1e3:.1f} |", flush=True)
        del model
        if a.device == "cuda":
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
