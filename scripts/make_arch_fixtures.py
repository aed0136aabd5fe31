#!/usr/bin/env python3
"""Golden fixtures for the architectures beyond LLaMA (tests/fixtures/arch/),
made by other projects' code only:

  - a random-weight GGUF per architecture, written by the `gguf` Python
    package with llama.cpp's tensor names, shapes and metadata (small
    dimensions, every distinctive feature of the architecture on), f32;
  - llama.cpp's answer (llama-cpp-python 0.3.36, F32 KV cache): the top-5
    ids and logits at every position of an 80-token prompt, and the 16
    tokens greedy decoding adds to it.

Not run in CI. Usage:
  python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install gguf numpy llama-cpp-python==0.3.36
  /tmp/refvenv/bin/python scripts/make_arch_fixtures.py tests/fixtures/arch [ARCH ...]
"""
import json
import os
import sys

import gguf
import numpy as np

VOCAB = 320
PROMPT = 80
GREEDY = 16


def byte_vocab(w):
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, 256 bytes, fillers."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    while len(toks) < VOCAB:
        toks.append(f"<fill{len(toks)}>")
        types.append(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


# Each architecture: its llama.cpp name, dimensions, and what its blocks hold
# beyond LLaMA's.
ARCHS = {
    # Qwen3: per-head RMSNorm of q and k before RoPE (NEOX), no biases, and a
    # head width that is not dim / heads (q_dim 128 from dim 64).
    "qwen3": dict(dim=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, theta=10000.0,
                  qk_norm=True),
    # Gemma 3: the embedding scaled by sqrt(dim), q/k norms, norms after
    # attention and after the FFN, GeGLU, tied embeddings; layers 0 and 2
    # attend to a window of 16 positions (shorter than the prompt) with RoPE
    # base 10000, layers 1 and 3 to all of them with base 1e6.
    "gemma3": dict(dim=64, ffn=128, layers=4, heads=4, kv_heads=1, head_dim=32, theta=1e6,
                   qk_norm=True, post_norms=True, tied=True, window=16, pattern=2,
                   theta_swa=10000.0),
    # SmolLM3: LLaMA's block, but every 4th layer (here layer 3) has no RoPE.
    "smollm3": dict(dim=64, ffn=128, layers=4, heads=4, kv_heads=2, head_dim=32, theta=10000.0),
    # Llama 3.2: tied embeddings and Llama 3's RoPE scaling (factor 8 over an
    # original context of 32, so the 80-token prompt reaches the slowed
    # frequencies), the factors as the tensor rope_freqs.weight.
    "llama": dict(dim=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, theta=500000.0,
                  tied=True, llama3_rope=dict(factor=8.0, low=1.0, high=4.0, original=32)),
    # Granite: LLaMA's block with the embedding, residual, attention and logit multipliers.
    "granite": dict(dim=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, theta=10000.0,
                    granite=dict(embedding_scale=6.0, residual_scale=0.3, attention_scale=0.1,
                                 logit_scale=4.0)),
    # OLMo 2: no norms before attention and the FFN, norms after them (as
    # Gemma 3's), and q/k norms over the whole of q and of k (NEOX RoPE).
    "olmo2": dict(dim=128, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, theta=10000.0,
                  qk_norm_full=True, post_norms=True, no_pre_norms=True),
    # Phi-3 / Phi-4-mini: q, k, v fused in attn_qkv and gate, up in ffn_up;
    # partial RoPE (24 of 32 dims turn, NEOX); LongRoPE short and long
    # factors with its attention factor over an original context of 32 (the
    # golden's context of 256 exceeds it: llama.cpp takes the long ones); a
    # sliding window in the file, which llama.cpp 0.3.36 ignores for Phi-3.
    "phi3": dict(dim=128, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=32, theta=10000.0,
                 fused=True, rope_dims=24, phi_window=16,
                 name="random model",  # "phi3" in the name makes llama.cpp look for <|endoftext|>
                 longrope=dict(original=32, attn_factor=1.19)),
}


def llama3_factors(spec):
    """Llama 3's per-frequency divisors, as llama.cpp's converter writes them."""
    r = spec["llama3_rope"]
    hd, out = spec["head_dim"], []
    for i in range(0, hd, 2):
        freq = spec["theta"] ** (-i / hd)
        wavelen = 2 * np.pi / freq
        if wavelen < r["original"] / r["high"]:
            out.append(1.0)
        elif wavelen > r["original"] / r["low"]:
            out.append(r["factor"])
        else:
            smooth = (r["original"] / wavelen - r["low"]) / (r["high"] - r["low"])
            out.append(1.0 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def write_model(arch, spec, path, rng):
    w = gguf.GGUFWriter(path, arch)
    w.add_name(spec.get("name", f"random {arch}"))
    w.add_block_count(spec["layers"])
    w.add_context_length(256)
    w.add_embedding_length(spec["dim"])
    w.add_feed_forward_length(spec["ffn"])
    w.add_head_count(spec["heads"])
    w.add_head_count_kv(spec["kv_heads"])
    w.add_key_length(spec["head_dim"])
    w.add_value_length(spec["head_dim"])
    w.add_rope_freq_base(spec["theta"])
    if spec.get("granite"):
        gr = spec["granite"]
        w.add_embedding_scale(gr["embedding_scale"])
        w.add_residual_scale(gr["residual_scale"])
        w.add_attention_scale(gr["attention_scale"])
        w.add_logit_scale(gr["logit_scale"])
    if spec.get("window"):
        w.add_sliding_window(spec["window"])
        w.add_sliding_window_pattern(spec["pattern"])
        w.add_rope_freq_base_swa(spec["theta_swa"])
    if spec.get("rope_dims"):
        w.add_rope_dimension_count(spec["rope_dims"])
    if spec.get("phi_window"):
        w.add_sliding_window(spec["phi_window"])
    if spec.get("longrope"):
        w.add_rope_scaling_orig_ctx_len(spec["longrope"]["original"])
        w.add_rope_scaling_attn_factors(spec["longrope"]["attn_factor"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    byte_vocab(w)

    dim, ffn, hd = spec["dim"], spec["ffn"], spec["head_dim"]
    q, kv = spec["heads"] * hd, spec["kv_heads"] * hd

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm(n):
        return (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32)

    # Tied (Gemma, whose embedding is scaled up by sqrt(dim)): small rows, so
    # that the logits they give are not saturated.
    # Rows of one norm, so that no token wins by its length alone.
    emb = mat(VOCAB, dim, 1.0)
    if spec.get("tied"):
        emb = (0.5 * emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", norm(dim))
    if spec.get("llama3_rope"):
        w.add_tensor("rope_freqs.weight", llama3_factors(spec))
    if spec.get("longrope"):
        half = spec["rope_dims"] // 2
        w.add_tensor("rope_factors_short.weight", (1.0 + rng.random(half)).astype(np.float32))
        w.add_tensor("rope_factors_long.weight", (1.0 + 7.0 * rng.random(half)).astype(np.float32))
    if not spec.get("tied"):
        w.add_tensor("output.weight", mat(VOCAB, dim, 2.0 / np.sqrt(dim)))
    for l in range(spec["layers"]):
        b = f"blk.{l}."
        if not spec.get("no_pre_norms"):
            w.add_tensor(b + "attn_norm.weight", norm(dim))
        if spec.get("fused"):
            w.add_tensor(b + "attn_qkv.weight", mat(q + 2 * kv, dim, 1.0 / np.sqrt(dim)))
        else:
            w.add_tensor(b + "attn_q.weight", mat(q, dim, 1.0 / np.sqrt(dim)))
            w.add_tensor(b + "attn_k.weight", mat(kv, dim, 1.0 / np.sqrt(dim)))
            w.add_tensor(b + "attn_v.weight", mat(kv, dim, 1.0 / np.sqrt(dim)))
        if spec.get("qk_norm"):
            w.add_tensor(b + "attn_q_norm.weight", norm(hd))
            w.add_tensor(b + "attn_k_norm.weight", norm(hd))
        if spec.get("qk_norm_full"):
            w.add_tensor(b + "attn_q_norm.weight", norm(q))
            w.add_tensor(b + "attn_k_norm.weight", norm(kv))
        w.add_tensor(b + "attn_output.weight", mat(dim, q, 1.0 / np.sqrt(q)))
        if spec.get("post_norms"):
            w.add_tensor(b + "post_attention_norm.weight", norm(dim))
        if not spec.get("no_pre_norms"):
            w.add_tensor(b + "ffn_norm.weight", norm(dim))
        if spec.get("fused"):  # gate rows first, then up (llama.cpp's SwiGLU halves)
            w.add_tensor(b + "ffn_up.weight", mat(2 * ffn, dim, 1.0 / np.sqrt(dim)))
        else:
            w.add_tensor(b + "ffn_gate.weight", mat(ffn, dim, 1.0 / np.sqrt(dim)))
            w.add_tensor(b + "ffn_up.weight", mat(ffn, dim, 1.0 / np.sqrt(dim)))
        w.add_tensor(b + "ffn_down.weight", mat(dim, ffn, 1.0 / np.sqrt(ffn)))
        if spec.get("post_norms"):
            w.add_tensor(b + "post_ffw_norm.weight", norm(dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def golden(path, tokens):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True, n_threads=2,
                type_k=0, type_v=0, flash_attn=False, verbose=False)  # f32 KV cache
    llm.eval(tokens)
    scores = np.array(llm.scores[:len(tokens)], dtype=np.float64)
    top5 = [[int(i) for i in np.argsort(-row, kind="stable")[:5]] for row in scores]
    out = {"tokens": tokens,
           "top5_ids": top5,
           "top5_logits": [[float(scores[p][i]) for i in ids] for p, ids in enumerate(top5)],
           "logit_scale": float(np.max(np.abs(scores)))}
    greedy = []
    nxt = int(np.argmax(scores[-1]))
    for _ in range(GREEDY):
        greedy.append(nxt)
        llm.eval([nxt])
        nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
    out["greedy"] = greedy
    return out


def main():
    out_dir = sys.argv[1]
    archs = sys.argv[2:] or list(ARCHS)
    os.makedirs(out_dir, exist_ok=True)
    for arch in archs:
        rng = np.random.default_rng(sum(map(ord, arch)))
        path = os.path.join(out_dir, f"{arch}.gguf")
        write_model(arch, ARCHS[arch], path, rng)
        tokens = [1] + [int(t) for t in rng.integers(3, VOCAB, size=PROMPT - 1)]
        g = golden(path, tokens)
        g["source"] = (f"llama.cpp (llama-cpp-python 0.3.36, F32 KV cache) on {arch}.gguf, "
                       f"written by the gguf package {gguf.__version__ if hasattr(gguf, '__version__') else ''}"
                       " (scripts/make_arch_fixtures.py)")
        with open(os.path.join(out_dir, f"{arch}.json"), "w") as f:
            json.dump(g, f, indent=1)
        print(arch, "greedy", g["greedy"], "logit scale", round(g["logit_scale"], 3))


if __name__ == "__main__":
    main()
