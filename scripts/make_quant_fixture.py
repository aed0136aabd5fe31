#!/usr/bin/env python3
"""Golden dequantized blocks for every GGUF block format lowrank reads, made by
the `gguf` Python package (gguf.quants), which lowrank did not write.

For each format: random blocks (random bytes with finite random f16 scales),
blocks gguf.quants.quantize made from random floats where the package
quantizes that format, and real blocks read from the GGUF files given on the
command line (the default model's Q4_1, Qwen2.5-Coder's Q4_K/Q6_K/Q5_0/Q8_0).
Each case is stored with the f32 values gguf.quants.dequantize returns.

  /tmp/refvenv/bin/python scripts/make_quant_fixture.py OUT.bin [MODEL.gguf ...]

OUT.bin: "LRQF" u32 version=1 u32 cases, then per case: u32 ggml type,
u32 blocks, u32 name length, name (utf-8), the raw blocks, the f32 values.
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
QUANTIZABLE = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}
# Byte offsets of the f16 fields of each block (everything else is random bits).
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
              Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}


def random_blocks(rng, t, n):
    elems, size = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        vals = (rng.standard_normal(n) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = vals.view(np.uint8).reshape(n, 2)
    return raw


def main():
    out, models = sys.argv[1], sys.argv[2:]
    rng = np.random.default_rng(1234)
    cases = []
    for t in TYPES:
        cases.append((t, f"random {t.name}", random_blocks(rng, t, 8)))
        if t in QUANTIZABLE:
            elems, _ = GGML_QUANT_SIZES[t]
            x = rng.standard_normal((4, elems)).astype(np.float32)
            cases.append((t, f"gguf.quants.quantize {t.name}", quantize(x, t).reshape(4, -1)))
    for path in models:
        seen = set()
        for tensor in GGUFReader(path).tensors:
            t = Q(tensor.tensor_type)
            if t not in TYPES or t in seen:
                continue
            seen.add(t)
            _, size = GGML_QUANT_SIZES[t]
            raw = np.asarray(tensor.data).view(np.uint8).reshape(-1)[: 6 * size]
            cases.append((t, f"{path.split('/')[-1]}:{tensor.name} {t.name}", raw.reshape(6, size)))
    with open(out, "wb") as f:
        f.write(b"LRQF" + struct.pack("<II", 1, len(cases)))
        for t, name, raw in cases:
            raw = np.ascontiguousarray(raw, dtype=np.uint8)
            values = dequantize(raw, t).astype(np.float32).reshape(-1)
            nb = raw.shape[0]
            f.write(struct.pack("<III", int(t), nb, len(name.encode())) + name.encode())
            f.write(raw.tobytes())
            f.write(values.tobytes())
            print(f"{name}: {nb} blocks", file=sys.stderr)


if __name__ == "__main__":
    main()
