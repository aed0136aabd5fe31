#!/usr/bin/env python3
"""Golden embeddings from llama.cpp (llama-cpp-python 0.3.36): the hidden
states after the output norm, pooled (mean, or the last token's) and scaled
to unit length, as `llama-server --embedding --pooling mean|last` returns
them; with the token ids llama.cpp made of each text.

Not run in CI. Usage:
  /tmp/refvenv/bin/python scripts/make_embed_fixtures.py OUT.json MODEL.gguf [MODEL.gguf ...]
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings turn text into vectors.",
    "x",
    "A longer passage: the runtime serves compressed language models on CPUs and GPUs, "
    "and this sentence is here so that the mean runs over more than a handful of tokens.",
]
POOLING = {"mean": 1, "last": 3}  # llama.h LLAMA_POOLING_TYPE_MEAN, _LAST


def main():
    out_path, models = sys.argv[1], sys.argv[2:]
    out = {"source": "llama.cpp (llama-cpp-python 0.3.36), embedding=True, normalize=True, F32 KV cache "
                     "(scripts/make_embed_fixtures.py)", "models": {}}
    for path in models:
        entry = []
        for name, ptype in POOLING.items():
            llm = Llama(model_path=path, embedding=True, pooling_type=ptype, n_ctx=512,
                        n_batch=512, n_ubatch=512, n_threads=2, type_k=0, type_v=0,
                        flash_attn=False, verbose=False)  # F32 KV cache
            for text in TEXTS:
                ids = llm.tokenize(text.encode("utf-8"))
                emb = np.array(llm.embed(text, normalize=True), dtype=np.float64)
                entry.append({"pooling": name, "text": text, "tokens": ids,
                              "embedding": [float(v) for v in emb]})
            del llm
        out["models"][os.path.basename(path)] = entry
        print(os.path.basename(path), len(entry), "embeddings of dim", len(entry[0]["embedding"]))
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
