#!/usr/bin/env python3
"""Perplexity of a GGUF model computed by llama.cpp (llama-cpp-python) with the
protocol of llama.cpp's perplexity tool, as an independent check of
`lowrank perplexity`. The model is dequantized to F32 first (see
golden_logits.py) so both sides do f32 arithmetic. Not run in CI.

  /tmp/refvenv/bin/python scripts/llamacpp_perplexity.py MODEL.gguf TEXT --ctx 512 --chunks 4
"""
import argparse
import math
import os
import tempfile

import numpy as np

from golden_logits import dequantized_copy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    a = ap.parse_args()
    from llama_cpp import Llama
    import llama_cpp

    text = open(a.text, "rb").read()
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        dequantized_copy(a.model, f32)
        llm = Llama(model_path=f32, n_ctx=a.ctx, n_batch=a.ctx, logits_all=True, n_threads=2,
                    type_k=0, type_v=0, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        toks = llm.tokenize(text, add_bos=add_bos, special=False)
        n = min(len(toks) // a.ctx, a.chunks)
        nll, count = 0.0, 0
        for c in range(n):
            w = toks[c * a.ctx:(c + 1) * a.ctx]
            if add_bos:
                w = [llm.token_bos()] + w[1:]
            llm.reset()
            llm.eval(w)
            logits = np.array(llm.scores[: a.ctx], dtype=np.float64)
            for j in range(a.ctx // 2, a.ctx - 1):
                row = logits[j]
                m = row.max()
                nll += math.log(np.exp(row - m).sum()) - (row[toks[c * a.ctx + j + 1]] - m)
                count += 1
        print(f"llama.cpp: {len(toks)} tokens, {n} windows of {a.ctx}: ppl = {math.exp(nll / count):.4f}")


if __name__ == "__main__":
    main()
