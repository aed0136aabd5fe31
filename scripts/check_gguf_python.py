#!/usr/bin/env python3
"""Cross-check lowrank's GGUF writer against the reference `gguf` package.

Reads (never writes) the file produced by the gtest Gguf.WriteFileForPythonCheck
(tests/format/test_gguf.cpp, function python_check_file) and verifies every key,
value, tensor shape/type and the dequantised tensor values with GGUFReader.

    LOWRANK_GGUF_PY_OUT=/tmp/lr_py.gguf ./build/tests/test_format \\
        --gtest_filter=Gguf.WriteFileForPythonCheck
    /tmp/refvenv/bin/python scripts/check_gguf_python.py /tmp/lr_py.gguf

Exits 0 when everything matches, 1 (listing the mismatches) otherwise.
"""

import math
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType as V
from gguf.quants import dequantize

U64_MAX = 2**64 - 1

# key -> (main type, element type or None, expected contents)
EXPECTED_KV = {
    "general.architecture": (V.STRING, None, "lowrank-test"),
    "general.alignment": (V.UINT32, None, 64),
    "test.u8": (V.UINT8, None, 255),
    "test.i8": (V.INT8, None, -128),
    "test.u16": (V.UINT16, None, 65535),
    "test.i16": (V.INT16, None, -32768),
    "test.u32": (V.UINT32, None, 4294967295),
    "test.i32": (V.INT32, None, -(2**31)),
    "test.u64": (V.UINT64, None, U64_MAX),
    "test.i64": (V.INT64, None, -(2**63)),
    "test.f32": (V.FLOAT32, None, 1.5),
    "test.f64": (V.FLOAT64, None, 3.141592653589793),
    "test.bool_true": (V.BOOL, None, True),
    "test.bool_false": (V.BOOL, None, False),
    "test.str": (V.STRING, None, "héllo wörld"),
    "test.empty_str": (V.STRING, None, ""),
    "test.strings": (V.ARRAY, V.STRING, ["a", "", "ünï"]),
    "test.i32s": (V.ARRAY, V.INT32, [1, -2, 3]),
    "test.f32s": (V.ARRAY, V.FLOAT32, [0.5, -1.25]),
    "test.u64s": (V.ARRAY, V.UINT64, [0, U64_MAX]),
    "test.bools": (V.ARRAY, V.BOOL, [True, False, True]),
    # GGUFReader flattens nested arrays: [[1, 2], [3]] -> [1, 2, 3].
    "test.nested": (V.ARRAY, V.INT32, [1, 2, 3]),
}


def f32(x):
    return float(np.float32(x))


# name -> (ggml type, shape in GGML order, generator of element i)
# The generators match python_check_file() in tests/format/test_gguf.cpp.
EXPECTED_TENSORS = {
    "t.f32": (Q.F32, [4, 3], lambda i: f32((i - 5) * 0.25)),
    "t.f16": (Q.F16, [8], lambda i: f32(i * 0.5 - 2)),
    "t.bf16": (Q.BF16, [2, 2], lambda i: f32(i - 1.5)),
    "t.q8_0": (Q.Q8_0, [32, 2], lambda i: f32(math.sin(i) * 2)),
    "t.q4_0": (Q.Q4_0, [64], lambda i: f32(math.cos(i * 0.3))),
    "t.q4_1": (Q.Q4_1, [32, 1, 2], lambda i: f32(i * 0.1)),
}


def block_tolerance(qtype, block):
    """Largest allowed |dequantised - original| for one block of 32."""
    amax = float(np.abs(block).max())
    if qtype == Q.Q8_0:
        return amax / 127 * 0.5 * 1.1 + 1e-7
    if qtype == Q.Q4_0:
        return amax / 8 * 1.05 + 1e-7  # one step: the clamped end of the range
    if qtype == Q.Q4_1:
        lo, hi = float(block.min()), float(block.max())
        return (hi - lo) / 15 * 0.55 + abs(lo) * 1e-3 + 1e-7
    return 0.0


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LOWRANK_GGUF_PY_OUT")
    if not path:
        sys.exit("usage: check_gguf_python.py FILE.gguf (or set LOWRANK_GGUF_PY_OUT)")
    r = GGUFReader(path)
    errors = []

    def check(cond, msg):
        if not cond:
            errors.append(msg)

    # GGUFReader adds three synthetic fields for the header.
    check(r.fields["GGUF.version"].contents() == 3, "version != 3")
    check(r.alignment == 64, f"alignment {r.alignment} != 64")
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    check(keys == list(EXPECTED_KV), f"keys/order differ: {keys}")
    for key, (vtype, etype, want) in EXPECTED_KV.items():
        field = r.get_field(key)
        if field is None:
            errors.append(f"missing key {key}")
            continue
        check(field.types[0] == vtype, f"{key}: type {field.types[0]!r} != {vtype!r}")
        if etype is not None:
            check(field.types[-1] == etype, f"{key}: element type {field.types[-1]!r} != {etype!r}")
        got = field.contents()
        check(got == want, f"{key}: value {got!r} != {want!r}")

    check(len(r.tensors) == len(EXPECTED_TENSORS), f"{len(r.tensors)} tensors")
    for t in r.tensors:
        if t.name not in EXPECTED_TENSORS:
            errors.append(f"unexpected tensor {t.name}")
            continue
        qtype, shape, gen = EXPECTED_TENSORS[t.name]
        check(t.tensor_type == qtype, f"{t.name}: type {t.tensor_type!r} != {qtype!r}")
        check(list(map(int, t.shape)) == shape, f"{t.name}: shape {list(t.shape)} != {shape}")
        check(t.data_offset % 64 == 0, f"{t.name}: data offset {t.data_offset} not 64-aligned")
        n = int(np.prod(shape))
        want = np.array([gen(i) for i in range(n)], dtype=np.float32)
        got = np.asarray(dequantize(t.data, qtype), dtype=np.float32).reshape(-1)
        if got.size != n:
            errors.append(f"{t.name}: {got.size} values, expected {n}")
            continue
        if qtype in (Q.F32, Q.F16, Q.BF16):
            # All test values are exact in every float format used.
            bad = np.nonzero(got != want)[0][:5]
            check(bad.size == 0, f"{t.name}: values differ at {bad}: {got[bad]} vs {want[bad]}")
        else:
            for b in range(n // 32):
                blk, gblk = want[b * 32:(b + 1) * 32], got[b * 32:(b + 1) * 32]
                err = float(np.abs(gblk - blk).max())
                tol = block_tolerance(qtype, blk)
                check(err <= tol, f"{t.name}: block {b} max error {err} > {tol}")

    if errors:
        print(f"{path}: {len(errors)} mismatches:")
        for e in errors:
            print("  " + e)
        return 1
    print(f"{path}: OK ({len(keys)} keys, {len(r.tensors)} tensors match)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
