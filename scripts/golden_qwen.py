#!/usr/bin/env python3
"""Goldens for a real quantized GGUF (Qwen2.5-Coder Q4_K_M) from llama.cpp
(llama-cpp-python), with the weights in their file formats, as llama.cpp
runs them (its own quantized kernels, F16 KV cache off: F32):

  - tokens and top-5 ids and logits at three positions of 5 prompts;
  - greedy continuations (32 tokens) of 20 prompts;
  - perplexity on a text, llama.cpp's protocol (windows of 512, the second
    half of each scored), over 32 windows.

Not run in CI (it needs llama-cpp-python, which compiles llama.cpp). Usage:
  python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install gguf numpy llama-cpp-python==0.3.36
  /tmp/refvenv/bin/python scripts/golden_qwen.py MODEL.gguf ../shared/data/wiki.eval.raw OUT.json \
      [--windows N] [--prompts chatml|text] [--dequantize]

--windows: perplexity windows (default 32). --prompts: "chatml" (the default:
code, text and ChatML turns, for the Qwen instruct models) or "text" (text and
code only, and Gemma's own turn markers: for a base model such as Gemma 3
270M). --dequantize: llama.cpp runs an F32 copy of the file (its weights
dequantized by the gguf package), so no activation is quantized either: the
exact arithmetic a model's f32 path is compared with.
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

from golden_logits import dequantized_copy, top5_case

TOP5_PROMPTS = [
    "def fibonacci(n):\n",
    "The capital of France is",
    "<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "import numpy as np\n\n# multiply two matrices\n",
    "Low-rank factorization of a weight matrix W into A times B reduces",
]

GREEDY_PROMPTS = [
    "def fibonacci(n):\n",
    "def quicksort(arr):\n",
    "class Stack:\n    def __init__(self):\n",
    "#include <stdio.h>\n\nint main(void) {\n",
    "fn main() {\n    let v = vec![1, 2, 3];\n",
    "SELECT name, COUNT(*) FROM users\n",
    "// JavaScript: debounce a function\nfunction debounce(fn, ms) {\n",
    "import os\n\ndef list_files(path):\n",
    "The capital of France is",
    "In 1969, Neil Armstrong became the first person to",
    "A binary search tree is",
    "The difference between a process and a thread is",
    "<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is a hash map?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nExplain recursion in one sentence.<|im_end|>\n<|im_start|>assistant\n",
    "def is_prime(n: int) -> bool:\n    \"\"\"Return True if n is prime.\"\"\"\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n",
    "# Markdown table of three planets and their moons\n",
    "Low-rank factorization of a weight matrix W into A times B reduces",
    "x = [i * i for i in range(10)]\nprint(",
]

# For a base model (Gemma 3 270M): prose, code, and the Gemma turn format.
TEXT_PROMPTS = [p for p in GREEDY_PROMPTS if "<|im_start|>" not in p] + [
    "<start_of_turn>user\nWhat is a hash map?<end_of_turn>\n<start_of_turn>model\n",
    "The three primary colours are",
    "Once upon a time, in a small village by the sea,",
]
PROMPT_SETS = {
    "chatml": (TOP5_PROMPTS, GREEDY_PROMPTS),
    "text": ([p for p in TOP5_PROMPTS if "<|im_start|>" not in p] + [TEXT_PROMPTS[-3]], TEXT_PROMPTS),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("out")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--prompts", choices=sorted(PROMPT_SETS), default="chatml")
    ap.add_argument("--dequantize", action="store_true")
    a = ap.parse_args()
    model, text_path, out = a.model, a.text, a.out
    tmp = None
    if a.dequantize:
        tmp = tempfile.TemporaryDirectory()
        model = os.path.join(tmp.name, "f32.gguf")
        dequantized_copy(a.model, model)
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                type_k=0, type_v=0, flash_attn=False, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    top5_prompts, greedy_prompts = PROMPT_SETS[a.prompts]
    assert len(greedy_prompts) == 20, len(greedy_prompts)
    top5 = [top5_case(llm, p, add_bos) for p in top5_prompts]

    greedy = []
    for p in greedy_prompts:
        ids = llm.tokenize(p.encode(), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(ids)
        gen = []
        for _ in range(32):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            t = int(np.argmax(logits))
            gen.append(t)
            llm.eval([t])
        greedy.append({"prompt": p, "tokens": [int(i) for i in ids], "generated": gen})
        print(f"greedy {len(greedy)}/{len(greedy_prompts)}", file=sys.stderr)

    ctx, chunks = 512, a.windows
    toks = llm.tokenize(open(text_path, "rb").read(), add_bos=add_bos, special=False)
    n = min(len(toks) // ctx, chunks)
    nll, count = 0.0, 0
    for c in range(n):
        w = toks[c * ctx:(c + 1) * ctx]
        if add_bos:
            w = [llm.token_bos()] + w[1:]
        llm.reset()
        llm.eval(w)
        logits = np.array(llm.scores[:ctx], dtype=np.float64)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j]
            m = row.max()
            nll += math.log(np.exp(row - m).sum()) - (row[toks[c * ctx + j + 1]] - m)
            count += 1
    ppl = math.exp(nll / count)
    print(f"perplexity {ppl:.4f} over {n} windows of {ctx}", file=sys.stderr)

    with open(out, "w") as fh:
        weights = ("dequantized to F32 (no quantized kernel, no quantized activation)" if a.dequantize
                   else "as stored (its quantized kernels)")
        json.dump({"model": os.path.basename(a.model),
                   "source": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), weights {weights}, "
                             "F32 KV cache",
                   "perplexity": {"text": os.path.basename(text_path), "ctx": ctx, "windows": n,
                                  "value": ppl},
                   "top5": top5, "greedy": greedy}, fh, indent=1)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
