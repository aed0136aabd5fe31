// libFuzzer target for the safetensors reader: any input must either parse
// into tensors that are all in bounds and consistent, or throw lr::Error.
// A parsed file whose tensors are all readable must survive a write/read
// round trip unchanged.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "format/safetensors.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void round_trip(const lr::SafetensorsSource& src) {
  std::vector<lr::SafetensorsTensor> ts;
  for (const std::string& name : src.names()) {
    if (name.empty()) return;  // the writer refuses empty names
    auto v = src.find(name);
    lr::SafetensorsTensor t;
    t.name = name;
    t.dtype = v->dtype;
    for (auto it = v->shape.rbegin(); it != v->shape.rend(); ++it) {
      if (*it > uint64_t(std::numeric_limits<int64_t>::max())) return;
      t.shape.push_back(int64_t(*it));
    }
    t.bytes.assign(v->data, v->data + v->nbytes);
    ts.push_back(std::move(t));
  }
  auto again = lr::SafetensorsSource::from_bytes(lr::safetensors_to_bytes(ts, src.metadata()),
                                                 "round-trip");
  check(again->names() == src.names());
  check(again->metadata() == src.metadata());
  for (const lr::SafetensorsTensor& t : ts) {
    auto v = again->find(t.name);
    check(v.has_value() && v->dtype == t.dtype && v->nbytes == t.bytes.size());
    check(t.bytes.empty() || std::memcmp(v->data, t.bytes.data(), t.bytes.size()) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto src = lr::SafetensorsSource::from_bytes(std::vector<uint8_t>(data, data + size),
                                                 "fuzz.safetensors");
    bool all_readable = true;
    for (const std::string& name : src->names()) {
      try {
        auto v = src->find(name);
        check(v.has_value());
        uint64_t elems = 1;
        for (uint64_t d : v->shape) elems *= d;  // validated not to overflow
        check(lr::row_bytes(v->dtype, elems) == v->nbytes);
        // Decode every element (reads every byte of the view).
        float buf[256];
        uint64_t esize = v->nbytes / (elems ? elems : 1);
        for (uint64_t i = 0; i < elems; i += 256) {
          uint64_t n = elems - i < 256 ? elems - i : 256;
          lr::dequantize(v->dtype, v->data + i * esize, buf, int64_t(n));
        }
      } catch (const lr::Error&) {
        all_readable = false;
      }
    }
    if (all_readable) round_trip(*src);
  } catch (const lr::Error&) {
  }
  return 0;
}
