#!/usr/bin/env python3
"""Writes a GGUF file's matrices in another type with the `gguf` Python
package (which lowrank did not write), for the same-format peer benchmark:
lowrank and llama.cpp then read the same F16, BF16 or Q8_0 file.

  /tmp/refvenv/bin/python scripts/gguf_retype.py IN.gguf OUT.gguf f16|bf16|q8_0

Every 2-D tensor is dequantized (gguf.quants.dequantize) and stored in the
new type; 1-D tensors (norms, biases) stay as they are; the metadata is
copied, general.file_type set to the new type. Needs `pip install gguf numpy`.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from gguf.quants import dequantize, quantize

TYPES = {"f16": (Q.F16, LlamaFileType.MOSTLY_F16), "bf16": (Q.BF16, LlamaFileType.MOSTLY_BF16),
         "q8_0": (Q.Q8_0, LlamaFileType.MOSTLY_Q8_0)}


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in TYPES:
        sys.exit(f"usage: {sys.argv[0]} IN.gguf OUT.gguf f16|bf16|q8_0")
    src, dst, name = sys.argv[1:]
    qtype, ftype = TYPES[name]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), vtype)
    w.add_file_type(ftype)
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # rows first, as numpy holds them
        if len(shape) == 1:
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        x = dequantize(np.asarray(t.data), t.tensor_type).reshape(shape).astype(np.float32)
        if qtype == Q.F16:
            w.add_tensor(t.name, x.astype(np.float16))
        else:
            w.add_tensor(t.name, quantize(x, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
