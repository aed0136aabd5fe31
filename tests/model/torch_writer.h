// Test helper: writes nested dicts and tuples of tensors (f32, or raw bytes
// of another storage type) in the format torch.save uses (stored zip, pickle
// protocol 2, _rebuild_tensor_v2 with storages as persistent ids). Tensors given the same storage id share one record, as
// aliased parameters do in Basis Sharing checkpoints. The reader is checked
// against Python-written fixtures separately (tests/format).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lr::test {

struct TorchTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, as torch sizes
  std::vector<float> data;     // FloatStorage values (when `bytes` is empty)
  std::string storage;         // storage id; tensors with equal ids alias
  std::string type = "FloatStorage";
  std::vector<uint8_t> bytes = {};  // raw element bytes of another storage type (HalfStorage, ByteStorage)
};

// A pickled value: a tensor, a dict of string keys, a tuple, a string, None,
// or an nn.Module object of class `s` ("torch.nn.modules.linear.Linear")
// whose items are its parameters (tensors or None) and child modules.
struct TorchNode {
  enum Kind { None, Tensor, Dict, Tuple, Str, Module } kind = None;
  TorchTensor tensor;
  std::string s;
  std::vector<std::string> keys;  // Dict
  std::vector<TorchNode> items;   // Dict values, Tuple items

  static TorchNode of(TorchTensor t) {
    TorchNode n;
    n.kind = Tensor;
    n.tensor = std::move(t);
    return n;
  }
  static TorchNode str(std::string v) {
    TorchNode n;
    n.kind = Str;
    n.s = std::move(v);
    return n;
  }
  static TorchNode tuple(std::vector<TorchNode> xs) {
    TorchNode n;
    n.kind = Tuple;
    n.items = std::move(xs);
    return n;
  }
  static TorchNode dict() {
    TorchNode n;
    n.kind = Dict;
    return n;
  }
  static TorchNode module(std::string cls) {
    TorchNode n;
    n.kind = Module;
    n.s = std::move(cls);
    return n;
  }
  // The item under `key`, made by `make` when absent.
  TorchNode& at(const std::string& key, const std::function<TorchNode()>& make) {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return items[i];
    return set(key, make());
  }
  TorchNode& set(const std::string& key, TorchNode v) {
    keys.push_back(key);
    items.push_back(std::move(v));
    return items.back();
  }
};

inline uint64_t torch_elem_bytes(const std::string& type) {
  return type == "ByteStorage" || type == "CharStorage" ? 1 : type == "HalfStorage" || type == "BFloat16Storage" ? 2 : 4;
}

inline void put_u(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

inline std::vector<uint8_t> torch_pickle(const TorchNode& root, const std::map<std::string, uint64_t>& numel) {
  std::vector<uint8_t> p = {0x80, 0x02};
  auto str = [&](const std::string& s) {
    p.push_back('X');
    put_u(p, s.size(), 4);
    p.insert(p.end(), s.begin(), s.end());
  };
  auto glob = [&](const std::string& m, const std::string& n) {
    p.push_back('c');
    p.insert(p.end(), m.begin(), m.end());
    p.push_back('\n');
    p.insert(p.end(), n.begin(), n.end());
    p.push_back('\n');
  };
  auto integer = [&](int64_t v) {
    p.push_back('J');
    put_u(p, uint64_t(uint32_t(int32_t(v))), 4);
  };
  auto tensor = [&](const TorchTensor& t) {
    glob("torch._utils", "_rebuild_tensor_v2");
    p.push_back('(');
    p.push_back('(');
    str("storage");
    glob("torch", t.type);
    str(t.storage);
    str("cpu");
    integer(int64_t(numel.at(t.storage)));
    p.push_back('t');
    p.push_back('Q');
    integer(0);
    p.push_back('(');
    for (int64_t d : t.shape) integer(d);
    p.push_back('t');
    p.push_back('(');
    int64_t stride = 1;
    std::vector<int64_t> strides(t.shape.size());
    for (size_t d = t.shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= t.shape[d];
    }
    for (int64_t s : strides) integer(s);
    p.push_back('t');
    p.push_back(0x89);  // requires_grad False
    p.push_back('}');   // backward hooks
    p.push_back('t');
    p.push_back('R');
  };
  std::function<void(const TorchNode&)> emit = [&](const TorchNode& n) {
    switch (n.kind) {
      case TorchNode::None: p.push_back('N'); break;
      case TorchNode::Str: str(n.s); break;
      case TorchNode::Tensor: tensor(n.tensor); break;
      case TorchNode::Tuple:
        p.push_back('(');
        for (const TorchNode& x : n.items) emit(x);
        p.push_back('t');
        break;
      case TorchNode::Dict:
        p.push_back('}');
        p.push_back('(');
        for (size_t i = 0; i < n.keys.size(); ++i) {
          str(n.keys[i]);
          emit(n.items[i]);
        }
        p.push_back('u');
        break;
      case TorchNode::Module: {
        // cls.__new__(cls) (NEWOBJ), then BUILD with the module's __dict__.
        glob(n.s.substr(0, n.s.rfind('.')), n.s.substr(n.s.rfind('.') + 1));
        p.push_back(')');
        p.push_back(0x81);
        p.push_back('}');
        p.push_back('(');
        str("training");
        p.push_back(0x89);
        auto ordered = [&](bool modules) {
          glob("collections", "OrderedDict");
          p.push_back(')');
          p.push_back('R');
          p.push_back('(');
          for (size_t i = 0; i < n.keys.size(); ++i) {
            if ((n.items[i].kind == TorchNode::Module) != modules) continue;
            str(n.keys[i]);
            if (n.items[i].kind == TorchNode::Tensor) {  // an nn.Parameter
              glob("torch._utils", "_rebuild_parameter");
              p.push_back('(');
              emit(n.items[i]);
              p.push_back(0x88);
              glob("collections", "OrderedDict");
              p.push_back(')');
              p.push_back('R');
              p.push_back('t');
              p.push_back('R');
            } else {
              emit(n.items[i]);
            }
          }
          p.push_back('u');
        };
        str("_parameters");
        ordered(false);
        str("_buffers");
        glob("collections", "OrderedDict");
        p.push_back(')');
        p.push_back('R');
        str("_modules");
        ordered(true);
        p.push_back('u');
        p.push_back('b');
        break;
      }
    }
  };
  emit(root);
  p.push_back('.');
  return p;
}

// A stored zip of (name, bytes) records.
inline std::vector<uint8_t> stored_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& recs) {
  std::vector<uint8_t> z, cd;
  for (const auto& [name, data] : recs) {
    const uint64_t off = z.size();
    put_u(z, 0x04034b50, 4);
    put_u(z, 20, 2);
    put_u(z, 0, 2);
    put_u(z, 0, 2);  // stored
    put_u(z, 0, 4);  // time, date
    put_u(z, 0, 4);  // crc (not checked by the reader)
    put_u(z, data.size(), 4);
    put_u(z, data.size(), 4);
    put_u(z, name.size(), 2);
    put_u(z, 0, 2);
    z.insert(z.end(), name.begin(), name.end());
    z.insert(z.end(), data.begin(), data.end());
    put_u(cd, 0x02014b50, 4);
    put_u(cd, 20, 2);
    put_u(cd, 20, 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 4);
    put_u(cd, 0, 4);
    put_u(cd, data.size(), 4);
    put_u(cd, data.size(), 4);
    put_u(cd, name.size(), 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 2);
    put_u(cd, 0, 4);
    put_u(cd, off, 4);
    cd.insert(cd.end(), name.begin(), name.end());
  }
  const uint64_t cd_off = z.size();
  z.insert(z.end(), cd.begin(), cd.end());
  put_u(z, 0x06054b50, 4);
  put_u(z, 0, 4);
  put_u(z, recs.size(), 2);
  put_u(z, recs.size(), 2);
  put_u(z, cd.size(), 4);
  put_u(z, cd_off, 4);
  put_u(z, 0, 2);
  return z;
}

// torch.save of `root`: every tensor's storage is one record.
inline void write_torch(const std::string& path, const TorchNode& root) {
  std::map<std::string, uint64_t> numel;
  std::map<std::string, std::vector<uint8_t>> data;
  std::function<void(const TorchNode&)> gather = [&](const TorchNode& n) {
    for (const TorchNode& x : n.items) gather(x);
    if (n.kind != TorchNode::Tensor || data.count(n.tensor.storage)) return;
    const TorchTensor& t = n.tensor;
    std::vector<uint8_t> b = t.bytes;
    if (b.empty()) {
      b.resize(t.data.size() * 4);
      std::memcpy(b.data(), t.data.data(), b.size());
    }
    numel[t.storage] = b.size() / torch_elem_bytes(t.type);
    data[t.storage] = std::move(b);
  };
  gather(root);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> recs = {{"archive/data.pkl", torch_pickle(root, numel)},
                                                                     {"archive/byteorder", {'l', 'i', 't', 't', 'l', 'e'}}};
  for (auto& [k, b] : data) recs.push_back({"archive/data/" + k, b});
  auto z = stored_zip(recs);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(z.data()), long(z.size()));
}

// A flat state dict of name -> tensor.
inline void write_torch_state_dict(const std::string& path, const std::vector<TorchTensor>& ts) {
  TorchNode root = TorchNode::dict();
  for (const TorchTensor& t : ts) root.set(t.name, TorchNode::of(t));
  write_torch(path, root);
}

}  // namespace lr::test
