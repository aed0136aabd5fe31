#!/usr/bin/env python3
"""Golden quantizations by the `gguf` Python package (gguf.quants.quantize),
which lowrank did not write, for the formats the package quantizes: Q8_0,
Q4_0, Q4_1, Q5_0, Q5_1. tests/compress/test_quantize_gguf.cpp holds lowrank's
own quantizers to at most the package's error on the same values.

  /tmp/refvenv/bin/python scripts/make_quantize_fixture.py tests/fixtures/quant/quantize.bin

(/tmp/refvenv: python3 -m venv, then pip install gguf==0.17.1 numpy.)

OUT: "LRQZ" u32 version=1 u32 cases, then per case: u32 ggml type,
u32 values n, the n f32 values, the package's blocks (n / block elems of them).
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import quantize

TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]


def main():
    rng = np.random.default_rng(17)
    cases = []
    for t in TYPES:
        # A Gaussian row, and one with heavy tails (a few outliers per block),
        # as weight rows have.
        x = rng.standard_normal(2048).astype(np.float32)
        cases.append((t, x))
        y = (rng.standard_t(3, 2048) * 0.02).astype(np.float32)
        cases.append((t, y))
    with open(sys.argv[1], "wb") as f:
        f.write(b"LRQZ" + struct.pack("<II", 1, len(cases)))
        for t, x in cases:
            elems, size = GGML_QUANT_SIZES[t]
            blocks = quantize(x.reshape(1, -1), t).reshape(-1)
            assert blocks.size == x.size // elems * size
            f.write(struct.pack("<II", int(t), x.size))
            f.write(x.tobytes())
            f.write(np.ascontiguousarray(blocks, dtype=np.uint8).tobytes())


if __name__ == "__main__":
    main()
