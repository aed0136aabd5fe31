// Test helper: writes a state dict of f32 tensors in the format torch.save
// uses (stored zip, pickle protocol 2, _rebuild_tensor_v2 with storages as
// persistent ids). Tensors given the same storage id share one record, as
// aliased parameters do in Basis Sharing checkpoints. The reader is checked
// against Python-written fixtures separately (tests/format).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace lr::test {

struct TorchTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, as torch sizes
  std::vector<float> data;
  std::string storage;         // storage id; tensors with equal ids alias
};

inline void put_u(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

inline std::vector<uint8_t> torch_pickle(const std::vector<TorchTensor>& ts, std::map<std::string, uint64_t>& numel) {
  std::vector<uint8_t> p = {0x80, 0x02, '}', '('};
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
  for (const TorchTensor& t : ts) {
    str(t.name);
    glob("torch._utils", "_rebuild_tensor_v2");
    p.push_back('(');
    p.push_back('(');
    str("storage");
    glob("torch", "FloatStorage");
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
  }
  p.push_back('u');
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

inline void write_torch_state_dict(const std::string& path, const std::vector<TorchTensor>& ts) {
  std::map<std::string, uint64_t> numel;
  std::map<std::string, std::vector<uint8_t>> data;
  for (const TorchTensor& t : ts) {
    if (data.count(t.storage)) continue;
    numel[t.storage] = t.data.size();
    std::vector<uint8_t> b(t.data.size() * 4);
    std::memcpy(b.data(), t.data.data(), b.size());
    data[t.storage] = std::move(b);
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> recs = {{"archive/data.pkl", torch_pickle(ts, numel)},
                                                                     {"archive/byteorder", {'l', 'i', 't', 't', 'l', 'e'}}};
  for (auto& [k, b] : data) recs.push_back({"archive/data/" + k, b});
  auto z = stored_zip(recs);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(z.data()), long(z.size()));
}

}  // namespace lr::test
