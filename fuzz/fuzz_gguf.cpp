// libFuzzer target for the GGUF reader: any input must either parse into
// metadata and tensors that are all in bounds, or throw lr::Error. A parsed
// file must also survive a write/read round trip unchanged (the writer accepts
// everything the reader accepts).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"

namespace {

using lr::gguf::File;
using lr::gguf::TensorInfo;
using lr::gguf::Value;
using lr::gguf::ValueType;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

volatile uint64_t g_sink;

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool same(const Value& a, const Value& b) {
  if (a.type != b.type || a.i != b.i || !same_bits(a.f, b.f) || a.s != b.s || a.ints != b.ints ||
      a.strs != b.strs || a.floats.size() != b.floats.size() || a.items.size() != b.items.size() ||
      (a.type == ValueType::ARRAY && a.elem != b.elem))
    return false;
  for (size_t k = 0; k < a.floats.size(); ++k)
    if (!same_bits(a.floats[k], b.floats[k])) return false;
  for (size_t k = 0; k < a.items.size(); ++k)
    if (!same(a.items[k], b.items[k])) return false;
  return true;
}

uint64_t touch(const Value& v) {
  uint64_t h = uint64_t(v.i) + v.s.size() + v.array_size();
  for (const std::string& s : v.strs) h += s.size() ? uint8_t(s[0]) : 0;
  for (int64_t i : v.ints) h += uint64_t(i);
  for (const Value& item : v.items) h += touch(item);
  return h;
}

template <typename F>
void may_throw(F&& f) {
  try {
    f();
  } catch (const lr::Error& e) {
    check(std::strchr(e.what(), '\n') == nullptr);  // messages are one line
  }
}

void exercise(const File& f) {
  uint64_t h = 0;
  for (const auto& kv : f.metadata()) {
    const std::string& key = kv.first;  // (clang 14 cannot capture a structured binding)
    const Value& v = kv.second;
    check(f.find(key) == &v);
    h += touch(v);
    may_throw([&] { h += uint64_t(f.get_int(key)); });
    may_throw([&] {
      double x = f.get_float(key);
      uint64_t bits;
      std::memcpy(&bits, &x, 8);
      h += bits;
    });
    may_throw([&] { h += f.get_string(key).size(); });
    may_throw([&] { h += f.get_bool(key); });
    may_throw([&] { h += f.get_strings(key).size(); });
    may_throw([&] { h += f.get_ints(key).size(); });
    may_throw([&] { h += f.get_floats(key).size(); });
  }
  check(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  for (const TensorInfo& t : f.tensors()) {
    check(f.find_tensor(t.name) == &t);
    check(f.data_offset() + t.offset + t.nbytes <= f.file_size());
    check(t.shape.size() >= 1 && t.shape.size() <= lr::gguf::kMaxDims);
    check(lr::row_bytes(t.dtype, t.shape[0]).has_value());
    h += t.elements();
    for (uint64_t k = 0; k < t.nbytes; ++k) h += t.data[k];  // ASan checks every byte
  }
  may_throw([&] { f.tensor("\x01no such tensor"); });
  g_sink = h;
}

std::vector<uint8_t> rewrite(const File& f) {
  lr::gguf::Writer w;
  for (const auto& [key, v] : f.metadata()) w.set(key, v);
  for (const TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes);
  return w.to_bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<File> f;
  try {
    f = File::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
  } catch (const lr::Error& e) {
    check(std::strchr(e.what(), '\n') == nullptr);  // messages are one line
    return 0;
  }
  exercise(*f);
  // The writer pads to the alignment, which a file may set as high as 2^31.
  if (f->alignment() > 4096) return 0;

  // Round trip: anything the reader accepts, the writer must write and the
  // reader must read back identically; writing that again gives the same bytes.
  std::vector<uint8_t> bytes = rewrite(*f);
  auto g = File::from_bytes(bytes, "rewrite.gguf");
  check(g->metadata().size() == f->metadata().size());
  for (size_t k = 0; k < f->metadata().size(); ++k) {
    check(g->metadata()[k].first == f->metadata()[k].first);
    check(same(g->metadata()[k].second, f->metadata()[k].second));
  }
  check(g->tensors().size() == f->tensors().size());
  for (size_t k = 0; k < f->tensors().size(); ++k) {
    const TensorInfo& a = f->tensors()[k];
    const TensorInfo& b = g->tensors()[k];
    check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.nbytes == b.nbytes);
    check(std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
  check(rewrite(*g) == bytes);
  return 0;
}
