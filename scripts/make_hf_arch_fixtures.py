#!/usr/bin/env python3
"""HuggingFace directories of the architecture fixtures (tests/fixtures/hf_arch/),
made from tests/fixtures/arch/<arch>.gguf by other code than lowrank's:

  - the GGUF read with the `gguf` package;
  - config.json as transformers writes it for the model_type (Gemma3ForCausalLM:
    gemma3_text, SmolLM3ForCausalLM, GraniteForCausalLM, Phi3ForCausalLM,
    Olmo2ForCausalLM), each value the one llama.cpp's convert_hf_to_gguf.py
    turns into the GGUF's metadata;
  - model.safetensors (written here with numpy: an 8-byte little-endian header
    length, the JSON header, the data) under HuggingFace's names and in its
    layout, undoing what the converter does: q/k rows back in rotate-half
    order for the LLaMA-style blocks (SmolLM3, Granite: the converter's
    permute), Gemma's norms minus 1 (Gemma3RMSNorm scales by 1 + w, the
    converter adds 1), Phi-3's attn_qkv / ffn_up as qkv_proj / gate_up_proj,
    no lm_head where the embedding is tied;
  - tokenizer.json: the fixtures' byte vocabulary as a SentencePiece-style BPE
    with byte fallback (so `lowrank run -m DIR` loads the directory).

The goldens stay the GGUFs' (tests/fixtures/arch/<arch>.json, llama.cpp's).
Not run in CI. Usage:
  /tmp/refvenv/bin/python scripts/make_hf_arch_fixtures.py tests/fixtures/arch tests/fixtures/hf_arch [ARCH ...]
"""
import json
import os
import struct
import sys

import gguf
import numpy as np

ARCHS = ["gemma3", "smollm3", "granite", "phi3", "olmo2"]
HF_CLASS = {"gemma3": ("Gemma3ForCausalLM", "gemma3_text"),
            "smollm3": ("SmolLM3ForCausalLM", "smollm3"),
            "granite": ("GraniteForCausalLM", "granite"),
            "phi3": ("Phi3ForCausalLM", "phi3"),
            "olmo2": ("Olmo2ForCausalLM", "olmo2")}
NEOX = {"gemma3", "phi3", "olmo2"}  # the converter keeps HF's q/k rows for these


def f32(x):
    """The shortest decimal that reads back as the same float32 (as a JSON number)."""
    return float(str(np.float32(x)))


class Gguf:
    def __init__(self, path):
        self.r = gguf.GGUFReader(path)
        self.arch = self.field("general.architecture")
        self.tensors = {t.name: np.array(t.data) for t in self.r.tensors}

    def field(self, key, default=None):
        f = self.r.fields.get(key)
        return default if f is None else f.contents()

    def meta(self, key, default=None):
        return self.field(f"{self.arch}.{key}", default)


def unpermute(w, n_head):
    """The inverse of the converter's LlamaModel.permute: GGUF's interleaved
    RoPE pairs back to HF's two halves per head."""
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def config_json(g):
    arch = g.arch
    cls, model_type = HF_CLASS[arch]
    dim, heads = g.meta("embedding_length"), g.meta("attention.head_count")
    tied = "output.weight" not in g.tensors
    c = {"architectures": [cls], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 1, "eos_token_id": 2,
         "hidden_size": dim, "initializer_range": 0.02,
         "intermediate_size": g.meta("feed_forward_length"),
         "max_position_embeddings": g.meta("context_length"), "model_type": model_type,
         "num_attention_heads": heads, "num_hidden_layers": g.meta("block_count"),
         "num_key_value_heads": g.meta("attention.head_count_kv"),
         "rms_norm_eps": f32(g.meta("attention.layer_norm_rms_epsilon")),
         "rope_scaling": None, "rope_theta": f32(g.meta("rope.freq_base")),
         "tie_word_embeddings": tied, "torch_dtype": "float32",
         "transformers_version": "4.56.1", "use_cache": True, "vocab_size": len(g.field("tokenizer.ggml.tokens"))}
    head_dim = g.meta("attention.key_length", dim // heads)
    if head_dim != dim // heads:
        c["head_dim"] = head_dim
    if arch != "gemma3":
        c["hidden_act"] = "silu"
    if arch == "gemma3":
        n = c["num_hidden_layers"]
        pattern = g.meta("attention.sliding_window_pattern", 6)
        del c["tie_word_embeddings"]  # Gemma3TextConfig's default (True) is not written
        c.update({"_sliding_window_pattern": pattern, "attn_logit_softcapping": None,
                  "final_logit_softcapping": None, "head_dim": head_dim,
                  "hidden_activation": "gelu_pytorch_tanh",
                  "layer_types": ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                  for i in range(n)],
                  "query_pre_attn_scalar": head_dim,
                  "rope_local_base_freq": f32(g.meta("rope.freq_base_swa", 10000.0)),
                  "sliding_window": g.meta("attention.sliding_window"),
                  "use_bidirectional_attention": False})
    if arch == "smollm3":
        n = c["num_hidden_layers"]
        c.update({"layer_types": ["full_attention"] * n, "max_window_layers": n, "mlp_bias": False,
                  "no_rope_layer_interval": 4,
                  "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(n)],
                  "pretraining_tp": 1, "sliding_window": None, "use_sliding_window": False})
    if arch == "granite":
        c.update({"attention_multiplier": f32(g.meta("attention.scale")),
                  "embedding_multiplier": f32(g.meta("embedding_scale")),
                  "logits_scaling": f32(g.meta("logit_scale")), "mlp_bias": False,
                  "residual_multiplier": f32(g.meta("residual_scale"))})
    if arch == "phi3":
        rope_dims = g.meta("rope.dimension_count")
        c.update({"embd_pdrop": 0.0, "original_max_position_embeddings":
                  g.meta("rope.scaling.original_context_length"),
                  "partial_rotary_factor": f32(rope_dims * heads / dim), "resid_pdrop": 0.0,
                  "sliding_window": g.meta("attention.sliding_window")})
        # transformers reads the attention factor from rope_scaling; llama.cpp's
        # converter would recompute it from the two contexts.
        c["rope_scaling"] = {
            "attention_factor": f32(g.meta("rope.scaling.attn_factor")),
            "long_factor": [f32(x) for x in g.tensors["rope_factors_long.weight"]],
            "short_factor": [f32(x) for x in g.tensors["rope_factors_short.weight"]],
            "type": "longrope"}
    if arch == "olmo2":
        c["pad_token_id"] = 1
    return dict(sorted(c.items()))


def hf_tensors(g):
    """HF name -> float32 array, in HF's layout."""
    arch = g.arch
    heads, kv_heads = g.meta("attention.head_count"), g.meta("attention.head_count_kv")
    t = g.tensors
    out = {"model.embed_tokens.weight": t["token_embd.weight"],
           "model.norm.weight": t["output_norm.weight"]}
    if "output.weight" in t:
        out["lm_head.weight"] = t["output.weight"]
    for l in range(g.meta("block_count")):
        b, m = f"blk.{l}.", f"model.layers.{l}."
        names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
                 "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                 "attn_qkv": "self_attn.qkv_proj", "attn_q_norm": "self_attn.q_norm",
                 "attn_k_norm": "self_attn.k_norm", "attn_output": "self_attn.o_proj",
                 "post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": ("pre_feedforward_layernorm" if arch == "gemma3"
                              else "post_attention_layernorm"),
                 "ffn_gate": "mlp.gate_proj",
                 "ffn_up": "mlp.gate_up_proj" if arch == "phi3" else "mlp.up_proj",
                 "ffn_down": "mlp.down_proj", "post_ffw_norm": "post_feedforward_layernorm"}
        for g_name, hf_name in names.items():
            w = t.get(b + g_name + ".weight")
            if w is None:
                continue
            if arch not in NEOX and g_name in ("attn_q", "attn_k"):
                w = unpermute(w, heads if g_name == "attn_q" else kv_heads)
            out[m + hf_name + ".weight"] = w
    if arch == "gemma3":  # Gemma3RMSNorm: x * (1 + w); the converter added the 1
        for k in out:
            if k.endswith("norm.weight"):
                out[k] = (out[k] - np.float32(1)).astype(np.float32)
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for blob in blobs:
            f.write(blob)


def tokenizer_json(g):
    toks = g.field("tokenizer.ggml.tokens")
    specials = [{"id": i, "content": toks[i], "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True} for i in range(3)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None,
            "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": {tok: i for i, tok in enumerate(toks)}, "merges": []}}


def main():
    src, out = sys.argv[1], sys.argv[2]
    for arch in sys.argv[3:] or ARCHS:
        g = Gguf(os.path.join(src, f"{arch}.gguf"))
        assert g.arch == arch, (g.arch, arch)
        d = os.path.join(out, arch)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json(g), f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), hf_tensors(g))
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json(g), f, ensure_ascii=False)
        print(arch, "->", d)


if __name__ == "__main__":
    main()
