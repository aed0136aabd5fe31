#!/usr/bin/env python3
"""Writes small PyTorch-format checkpoints for lowrank's tests, without PyTorch.

torch.save writes a zip (stored entries) holding <prefix>/data.pkl (pickle
protocol 2) and one raw record <prefix>/data/<key> per storage; tensors are
pickled as torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, hooks) with the storage as a persistent id
('storage', torch.<Type>Storage, key, location, numel). This script registers
stand-in modules named torch, torch._utils and torch.nn.modules.* so the
standard pickle module emits exactly those opcodes and globals.

Run from the repository root: python3 scripts/make_torch_fixtures.py
(writes tests/fixtures/torch/*.pt; stdlib only).
"""
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "torch")


def module(name):
    # Parents too: pickle imports the full dotted name to check each global.
    parts = name.split(".")
    for i in range(1, len(parts)):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


torch = module("torch")
torch_utils = module("torch._utils")
nn_linear = module("torch.nn.modules.linear")
nn_container = module("torch.nn.modules.container")
nn_module = module("torch.nn.modules.module")
fake_llama = module("transformers.models.llama.modeling_llama")


def in_module(mod, obj):
    obj.__module__ = mod.__name__
    obj.__qualname__ = obj.__name__
    setattr(mod, obj.__name__, obj)
    return obj


# Storage classes: (name, struct format, bytes per element).
STORAGE = {"FloatStorage": ("f", 4), "HalfStorage": ("e", 2), "LongStorage": ("q", 8), "ByteStorage": ("B", 1)}
for n in STORAGE:
    in_module(torch, type(n, (), {}))


def _rebuild_tensor_v2(*args):
    raise RuntimeError("stand-in")


def _rebuild_parameter(*args):
    raise RuntimeError("stand-in")


in_module(torch_utils, _rebuild_tensor_v2)
in_module(torch_utils, _rebuild_parameter)


class Storage:
    def __init__(self, kind, values):
        self.kind = kind
        fmt, _ = STORAGE[kind]
        self.numel = len(values)
        self.data = struct.pack("<%d%s" % (len(values), fmt), *values)


class Tensor:
    def __init__(self, storage, size, offset=0, stride=None):
        self.storage, self.size, self.offset = storage, tuple(size), offset
        if stride is None:
            stride, acc = [], 1
            for s in reversed(size):
                stride.insert(0, acc)
                acc *= s
        self.stride = tuple(stride)

    def __reduce_ex__(self, proto):
        return (_rebuild_tensor_v2,
                (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))


class Parameter:
    def __init__(self, t):
        self.t = t

    def __reduce_ex__(self, proto):
        return (_rebuild_parameter, (self.t, True, collections.OrderedDict()))


class device:
    """torch.device: pickled as a call torch.device('cpu') (its __reduce__)."""

    def __init__(self, kind):
        self.kind = kind

    def __reduce__(self):
        return (device, (self.kind,))


in_module(torch, device)


class dtype:
    """A torch dtype such as torch.float16: pickled as the global itself."""

    def __init__(self, name):
        self.name = name
        self.__module__ = "torch"  # where pickle looks the global up
        setattr(torch, name, self)

    def __reduce__(self):
        return self.name


dtype("float16")  # bound as torch.float16 only, so pickle names it so
configuration_llama = module("transformers.models.llama.configuration_llama")


class Module:
    """An nn.Module as pickle sees it: an object whose __dict__ holds the
    _parameters / _buffers / _modules OrderedDicts."""

    def __init__(self, params=None, buffers=None, modules=None, non_persistent=()):
        self.training = False
        self._parameters = collections.OrderedDict(params or {})
        self._buffers = collections.OrderedDict(buffers or {})
        self._non_persistent_buffers_set = set(non_persistent)
        self._modules = collections.OrderedDict(modules or {})


in_module(nn_module, Module)
Linear = in_module(nn_linear, type("Linear", (Module,), {}))
ModuleList = in_module(nn_container, type("ModuleList", (Module,), {}))
LlamaForCausalLM = in_module(fake_llama, type("LlamaForCausalLM", (Module,), {}))
LlamaConfig = in_module(configuration_llama, type("LlamaConfig", (), {}))


def save(obj, name, prefix="archive", compression=zipfile.ZIP_STORED, byteorder="little",
         drop_record=None):
    storages = {}

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                if id(o) not in storages:
                    storages[id(o)] = (str(len(storages)), o)
                return ("storage", getattr(torch, o.kind), storages[id(o)][0], "cpu", o.numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(os.path.join(OUT, name), "w", compression) as z:
        z.writestr(prefix + "/data.pkl", buf.getvalue())
        z.writestr(prefix + "/byteorder", byteorder)
        for key, st in storages.values():
            if key != drop_record:
                z.writestr(prefix + "/data/" + key, st.data)
        z.writestr(prefix + "/version", "3\n")


def arange(n, scale=1.0, offset=0.0):
    return [offset + scale * i for i in range(n)]


def main():
    os.makedirs(OUT, exist_ok=True)
    # A state dict: f32 and f16 tensors, an alias, a view at an offset into a
    # shared storage, a parameter, a LongStorage tensor, OrderedDict metadata.
    shared = Storage("FloatStorage", arange(12, 0.5))
    sd = collections.OrderedDict()
    sd["layer.weight"] = Tensor(shared, [3, 4])
    sd["layer.alias"] = sd["layer.weight"]
    sd["layer.view"] = Tensor(shared, [2, 2], offset=8)
    sd["layer.bias"] = Tensor(Storage("HalfStorage", arange(5, 0.25, -1.0)), [5])
    sd["param"] = Parameter(Tensor(Storage("FloatStorage", [1.5, -2.0]), [2]))
    sd["steps"] = Tensor(Storage("LongStorage", [7]), [1])
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    save(sd, "state_dict.pt")
    # The same under another top folder (older writers used the file's stem).
    save(sd, "other_prefix.pt", prefix="state_dict")

    # A whole-module pickle, as SVD-LLM saves {'model': model, 'tokenizer': tok}.
    def lin(rows, cols, seed):
        return Linear(params={"weight": Parameter(Tensor(Storage("FloatStorage", arange(rows * cols, 0.1, seed)),
                                                          [rows, cols])), "bias": None})
    layers = ModuleList(modules={"0": Module(modules={"q_u_proj": lin(4, 2, 1.0), "q_v_proj": lin(2, 4, 2.0)}),
                                 "1": Module(modules={"q_u_proj": lin(4, 2, 3.0), "q_v_proj": lin(2, 4, 4.0)})})
    inner = Module(modules={"layers": layers},
                   buffers={"inv_freq": Tensor(Storage("FloatStorage", [1.0, 0.5]), [2])},
                   non_persistent=["inv_freq"])
    model = LlamaForCausalLM(modules={"model": inner, "lm_head": lin(3, 4, 5.0)})
    save({"model": model, "tokenizer": {"name": "tok"}}, "whole_module.pt")
    # The same as SVD-LLM's `SVDLLM.py --step 1` saves it: the model was loaded
    # with device_map="cpu", so transformers attached hf_device_map (a
    # torch.device) and the config (torch_dtype a torch dtype) to it.
    model.hf_device_map = {"": device("cpu")}
    cfg = LlamaConfig()
    cfg.torch_dtype = torch.float16
    cfg.hidden_size = 4
    model.config = cfg
    model.is_loaded_in_8bit = False
    save({"model": model, "tokenizer": {"name": "tok"}}, "svdllm_device_map.pt")

    # Broken and hostile inputs.
    save(sd, "missing_record.pt", drop_record="1")
    save(sd, "big_endian.pt", byteorder="big")
    save(sd, "deflated.pt", compression=zipfile.ZIP_DEFLATED)
    save(collections.OrderedDict([("t", Tensor(Storage("FloatStorage", arange(6)), [2, 3], stride=[1, 2]))]),
         "non_contiguous.pt")
    save(collections.OrderedDict([("t", Tensor(Storage("FloatStorage", arange(4)), [2, 3]))]), "too_small.pt")

    # Dobi-SVD's remapping_weight.pt layout: a plain dict of per-module dicts
    # with uint8 codes, f16 scales and tuple_info = ("us", overhang) or None.
    # "a" is a [3, 2] matrix of rank 2, "b" a square [2, 2] one of rank 1.
    def codes(rows, cols, values):
        return Tensor(Storage("ByteStorage", values), [rows, cols])

    def half(size, values):
        return Tensor(Storage("HalfStorage", values), size)

    remap = {
        "a": {"us_quan": codes(2, 2, [255, 127, 0, 255]), "vt_quan": codes(2, 2, [255, 0, 127, 255]),
              "us_absmax": half([2], [2.0, 0.5]), "vt_absmax": half([2], [1.0, 4.0]),
              "tuple_info": ("us", half([1, 2], [0.25, -3.0]))},
        "b": {"us_quan": codes(1, 2, [255, 127]), "vt_quan": codes(1, 2, [127, 255]),
              "us_absmax": half([1], [1.5]), "vt_absmax": half([1], [0.75]), "tuple_info": None},
    }
    save(remap, "dobi_remap.pt")

    # 30 levels of lists, each holding the level below 16 times (memo
    # references): a small file, but 16^30 paths for a naive walk.
    nest = []
    for _ in range(30):
        nest = [nest] * 16
    save({"x": nest}, "shared_containers.pt")

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo this must never run",))

    save({"x": Evil()}, "calls_system.pt")


if __name__ == "__main__":
    main()
