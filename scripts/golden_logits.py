#!/usr/bin/env python3
"""Golden logits for the default model from an implementation lowrank did not write.

llama.cpp (through llama-cpp-python) runs SmolLM2-135M-Instruct with every weight
dequantized to F32 and an F32 KV cache, so its arithmetic is plain f32 like
lowrank's reference path. The Q4_1 file is dequantized with the `gguf` package
into a temporary F32 GGUF. For each prompt we record llama.cpp's token ids and,
at three positions, the top-5 token ids and logits.

Not run in CI (it needs llama-cpp-python, which compiles llama.cpp). Usage:
  python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install gguf numpy llama-cpp-python
  /tmp/refvenv/bin/python scripts/golden_logits.py MODEL.gguf tests/fixtures/model/golden_logits.json
"""
import json
import os
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong became the first person to",
    "Low-rank factorization of a weight matrix W into A times B reduces",
]


def dequantized_copy(src: str, dst: str) -> None:
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        if key == "general.file_type":
            w.add_uint32(key, 0)  # all F32
            continue
        sub = f.types[1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(t.shape))  # numpy order [out, in]
        w.add_tensor(t.name, data.reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def top5_case(llm, prompt: str, add_bos: bool) -> dict:
    """The prompt's tokens and llama.cpp's top-5 ids and logits at its first,
    middle and last positions."""
    ids = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[: len(ids)], dtype=np.float64)
    tops = []
    for pos in sorted({0, len(ids) // 2, len(ids) - 1}):
        order = np.argsort(-scores[pos], kind="stable")[:5]
        tops.append({"pos": pos, "ids": [int(i) for i in order],
                     "logits": [float(scores[pos][i]) for i in order]})
    return {"prompt": prompt, "tokens": [int(i) for i in ids], "top5": tops}


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    from llama_cpp import Llama

    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        dequantized_copy(model, f32)
        llm = Llama(model_path=f32, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                    type_k=0, type_v=0, flash_attn=False, verbose=False)
        cases = [top5_case(llm, p, add_bos=True) for p in PROMPTS]
    with open(out, "w") as fh:
        json.dump({"model": os.path.basename(model),
                   "source": "llama-cpp-python (llama.cpp), all weights dequantized to F32, F32 KV cache",
                   "cases": cases}, fh, indent=1)
    print(f"wrote {out}: {len(cases)} prompts")


if __name__ == "__main__":
    main()
