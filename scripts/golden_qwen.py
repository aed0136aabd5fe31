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
  /tmp/refvenv/bin/python scripts/golden_qwen.py MODEL.gguf ../shared/data/wiki.eval.raw OUT.json [WINDOWS]

WINDOWS: perplexity windows (default 32).
"""
import json
import math
import os
import sys

import numpy as np

from golden_logits import top5_case

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


def main() -> None:
    model, text_path, out = sys.argv[1:4]
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                type_k=0, type_v=0, flash_attn=False, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))

    top5 = [top5_case(llm, p, add_bos) for p in TOP5_PROMPTS]

    greedy = []
    for p in GREEDY_PROMPTS:
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
        print(f"greedy {len(greedy)}/{len(GREEDY_PROMPTS)}", file=sys.stderr)

    ctx, chunks = 512, int(sys.argv[4]) if len(sys.argv) > 4 else 32
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
        json.dump({"model": os.path.basename(model),
                   "source": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), weights as stored "
                             "(its quantized kernels), F32 KV cache",
                   "perplexity": {"text": os.path.basename(text_path), "ctx": ctx, "windows": n,
                                  "value": ppl},
                   "top5": top5, "greedy": greedy}, fh, indent=1)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
