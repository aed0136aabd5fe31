#include "format/dobi_remap.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::dobi {

namespace {

// torch.linspace(start, end, steps) in float32: the first half counts up from
// start, the second half down from end, with step (end - start) / (steps - 1).
std::vector<float> linspace_f32(float start, float end, int steps) {
  const float step = (end - start) / float(steps - 1);
  std::vector<float> x(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i)
    x[size_t(i)] = i < steps / 2 ? start + step * float(i) : end - step * float(steps - 1 - i);
  return x;
}

std::string dims(const std::vector<uint64_t>& shape) {  // GGML order -> "[rows, cols]"
  std::string s;
  for (size_t i = shape.size(); i-- > 0;) s += std::to_string(shape[i]) + (i ? ", " : "");
  return "[" + s + "]";
}

// A float tensor of shape [rows, cols] (torch order) as f32 values.
std::vector<float> floats(const std::string& what, const char* field, const TensorView& t,
                          uint64_t rows, uint64_t cols) {
  const std::vector<uint64_t> want =
      rows == 0 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{cols, rows};
  if (t.shape != want)
    fail("{}: {} has shape {}, expected {}", what, field, dims(t.shape), dims(want));
  std::vector<float> out(static_cast<size_t>(std::max<uint64_t>(rows, 1) * cols));
  dequantize(t.dtype, t.data, out.data(), int64_t(out.size()));
  for (float v : out)
    if (!std::isfinite(v)) fail("{}: {} holds a value that is not finite", what, field);
  return out;
}

void check_codes(const std::string& what, const char* field, const TorchCheckpoint::Raw& r,
                 uint64_t k, uint64_t q) {
  if (r.storage != "ByteStorage")
    fail("{}: {} is stored as {}, expected uint8 codes (ByteStorage)", what, field, r.storage);
  if (r.shape != std::vector<uint64_t>{q, k})
    fail("{}: {} has shape {}, expected [{}, {}] (rank x min(out, in))", what, field, dims(r.shape),
         k, q);
}

}  // namespace

const std::array<float, 256>& dynamic_map() {
  static const std::array<float, 256> table = [] {
    std::vector<float> v;
    for (int e = 0; e < 7; ++e) {
      const std::vector<float> b = linspace_f32(0.1f, 1.0f, (1 << e) + 1);
      const float scale = float(std::pow(10.0, double(e - 6)));
      for (size_t i = 0; i + 1 < b.size(); ++i) {
        const float mean = (b[i] + b[i + 1]) / 2.0f;
        v.push_back(scale * mean);
        v.push_back(-(scale * mean));
      }
    }
    v.push_back(0.0f);
    v.push_back(1.0f);
    std::sort(v.begin(), v.end());
    std::array<float, 256> a{};
    LR_ASSERT(v.size() == a.size());
    std::copy(v.begin(), v.end(), a.begin());
    return a;
  }();
  return table;
}

Factors dequantize(const std::string& what, const RemappedTensors& t, int64_t m, int64_t n) {
  LR_ASSERT(m > 0 && n > 0);
  const uint64_t q = uint64_t(std::min(m, n));
  if (t.us_quan.shape.size() != 2)
    fail("{}: us_quan has shape {}, expected [rank, {}]", what, dims(t.us_quan.shape), q);
  const uint64_t k = t.us_quan.shape[1];
  if (k == 0 || k > q) fail("{}: us_quan has {} rank vectors, expected 1 to {}", what, k, q);
  check_codes(what, "us_quan", t.us_quan, k, q);
  check_codes(what, "vt_quan", t.vt_quan, k, q);
  const std::vector<float> us_scale = floats(what, "us_absmax", t.us_absmax, 0, k);
  const std::vector<float> vt_scale = floats(what, "vt_absmax", t.vt_absmax, 0, k);
  // The overhang: the longer side's entries beyond q.
  const char* want_side = m > n ? "us" : m < n ? "vt" : nullptr;
  std::vector<float> over;
  if (!want_side) {
    if (t.side || t.overhang)
      fail("{}: tuple_info holds a '{}' overhang, but a square [{}, {}] matrix has none", what,
           t.side.value_or("?"), m, n);
  } else {
    if (!t.overhang || t.side != std::string(want_side))
      fail("{}: tuple_info must be (\"{}\", overhang) for a [{}, {}] matrix; found {}", what,
           want_side, m, n,
           t.side       ? "(\"" + *t.side + "\", ...)"
           : t.overhang ? "a tensor without its tag"
                        : "None");
    over = m > n ? floats(what, "tuple_info[1]", *t.overhang, uint64_t(m - n), k)
                 : floats(what, "tuple_info[1]", *t.overhang, k, uint64_t(n - m));
  }
  const std::array<float, 256>& code = dynamic_map();
  auto decoded = [&](const TorchCheckpoint::Raw& r, const std::vector<float>& scale, uint64_t i,
                     uint64_t j) {
    return f16_to_f32(f32_to_f16(code[r.data[i * q + j]] * scale[i]));
  };
  Factors f;
  f.m = m;
  f.n = n;
  f.k = int64_t(k);
  f.us.resize(size_t(m) * k);
  f.vt.resize(k * size_t(n));
  for (uint64_t i = 0; i < k; ++i) {
    for (uint64_t j = 0; j < q; ++j) {
      f.us[j * k + i] = decoded(t.us_quan, us_scale, i, j);
      f.vt[i * uint64_t(n) + j] = decoded(t.vt_quan, vt_scale, i, j);
    }
    for (uint64_t j = q; j < uint64_t(m); ++j) f.us[j * k + i] = over[(j - q) * k + i];
    for (uint64_t j = q; j < uint64_t(n); ++j)
      f.vt[i * uint64_t(n) + j] = over[i * (uint64_t(n) - q) + (j - q)];
  }
  return f;
}

}  // namespace lr::dobi
