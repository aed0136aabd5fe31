#!/usr/bin/env python3
"""The Llama-3.1 RoPE scaling fixture (tests/fixtures/model/llama3-rope.*),
made entirely by other projects' code:

  - a tiny random LlamaForCausalLM with rope_scaling {"rope_type": "llama3"}
    (HF transformers), saved by its save_pretrained with a SentencePiece
    vocabulary trained on a text;
  - converted to GGUF (f32) by llama.cpp's own convert_hf_to_gguf.py, which
    writes the frequency factors as the tensor rope_freqs.weight;
  - logits of a 96-token sequence by llama.cpp (llama-cpp-python over a
    libllama built from the same vendored tree), at four positions, with the
    transformers logits printed beside them as a cross-check.

Not run in CI. Usage (LLAMA_SRC: llama-cpp-python 0.3.36's vendor/llama.cpp;
LIB: a directory holding a libllama.so built from that tree, e.g. the one
scripts/peer-bench.sh builds under ~/.cache/lowrank/peer):

  python3 -m venv /tmp/hfvenv
  /tmp/hfvenv/bin/pip install torch transformers sentencepiece safetensors numpy
  CMAKE_ARGS=-DLLAMA_BUILD=OFF /tmp/hfvenv/bin/pip install llama-cpp-python==0.3.36
  LLAMA_CPP_LIB_PATH=LIB /tmp/hfvenv/bin/python scripts/make_rope_fixture.py \\
      LLAMA_SRC ../shared/data/wiki.calib.raw tests/fixtures/model
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
POSITIONS = [0, 17, 60, 95]  # beyond 32 the scaled low frequencies matter


def main():
    llama_src, text, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    work = tempfile.mkdtemp(prefix="rope-fixture-")
    with open(text, encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()][:2000]
    with open(os.path.join(work, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    spm.SentencePieceTrainer.train(input=os.path.join(work, "train.txt"),
                                   model_prefix=os.path.join(work, "tokenizer"),
                                   vocab_size=512, model_type="bpe", byte_fallback=True,
                                   character_coverage=1.0, minloglevel=2)
    # head_dim 16 (8 frequencies): wavelengths 6.3, 19.9, 62.8 .. 19869
    # positions, so with an original context of 32 the first keeps its
    # frequency, the second is interpolated and the rest are slowed by 8.
    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      max_position_embeddings=256, rope_theta=10000.0, rope_scaling=dict(ROPE),
                      rms_norm_eps=1e-5, tie_word_embeddings=True, initializer_range=0.2,
                      bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    hf_dir = os.path.join(work, "hf")
    model.save_pretrained(hf_dir, safe_serialization=True)
    os.replace(os.path.join(work, "tokenizer.model"), os.path.join(hf_dir, "tokenizer.model"))

    gguf_path = os.path.join(out_dir, "llama3-rope.gguf")
    env = dict(os.environ, PYTHONPATH=os.path.join(llama_src, "gguf-py"))
    subprocess.run([sys.executable, os.path.join(llama_src, "convert_hf_to_gguf.py"), hf_dir,
                    "--outfile", gguf_path, "--outtype", "f32"], check=True, env=env)

    rng = np.random.default_rng(3)
    tokens = [1] + [int(t) for t in rng.integers(3, 512, size=95)]
    from llama_cpp import Llama
    llm = Llama(model_path=gguf_path, n_ctx=128, n_batch=128, logits_all=True, n_threads=2,
                type_k=0, type_v=0, flash_attn=False, verbose=False)  # f32 KV cache
    llm.eval(tokens)
    scores = np.array(llm.scores[:len(tokens)], dtype=np.float64)
    with torch.no_grad():
        hf = model(torch.tensor([tokens])).logits[0].double().numpy()
    worst = np.max(np.abs(scores[POSITIONS] - hf[POSITIONS])) / np.max(np.abs(hf[POSITIONS]))
    print(f"llama.cpp vs transformers at {POSITIONS}: max scaled difference {worst:.2e}")
    golden = {
        "source": "llama.cpp (llama-cpp-python 0.3.36) on llama3-rope.gguf, written by its "
                  "convert_hf_to_gguf.py from a random transformers LlamaForCausalLM",
        "config_json": json.load(open(os.path.join(hf_dir, "config.json"))),
        "tokens": tokens,
        "positions": POSITIONS,
        "logits": [[float(v) for v in scores[p]] for p in POSITIONS],
        "transformers_max_scaled_difference": float(worst),
    }
    with open(os.path.join(out_dir, "llama3-rope.json"), "w") as f:
        json.dump(golden, f, indent=1)


if __name__ == "__main__":
    main()
