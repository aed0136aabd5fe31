#include "model/key_calibration.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace lr {

namespace {
constexpr const char* kMean = "kv_calib.mean";
constexpr const char* kSigma = "kv_calib.sigma";
constexpr const char* kVectors = "kv_calib.vectors";
constexpr const char* kKeys = "lowrank.kv_calib.n_keys";

std::vector<float> read_f32(const TensorSource& src, const char* name, std::vector<uint64_t> shape) {
  std::optional<TensorView> t = src.find(name);
  if (!t) fail("{}: '{}' is missing (the file has part of a key calibration)", src.path(), name);
  if (t->dtype != DType::F32) fail("{}: tensor '{}' is {}, expected F32", src.path(), name, dtype_name(t->dtype));
  if (t->shape != shape) {
    std::string want, got;
    for (uint64_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
    for (uint64_t s : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
    fail("{}: tensor '{}' has shape [{}], expected [{}]", src.path(), name, got, want);
  }
  std::vector<float> v(t->nbytes / sizeof(float));
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  for (float x : v)
    if (!std::isfinite(x)) fail("{}: tensor '{}' holds a non-finite value", src.path(), name);
  return v;
}
}  // namespace

void read_key_calibration(const TensorSource& src, Weights& w) {
  if (!src.find(kMean)) return;
  const Config& c = w.cfg;
  const uint64_t d = uint64_t(c.head_dim), n = uint64_t(c.n_layers) * uint64_t(c.n_kv_heads);
  Weights::KeyCalibration k;
  k.mean = read_f32(src, kMean, {d, n});
  k.sigma = read_f32(src, kSigma, {d, n});
  k.vectors = read_f32(src, kVectors, {d, d, n});
  if (src.find("kv_calib.q_vectors")) {
    k.q_vectors = read_f32(src, "kv_calib.q_vectors", {d, d, n});
    k.q_proj = read_f32(src, "kv_calib.q_proj", {d, d, n});
    k.q_sigma = read_f32(src, "kv_calib.q_sigma", {d, n});
  }
  std::vector<int64_t> keys = src.int_array(kKeys);
  if (keys.size() != 1 || keys[0] < 2)
    fail("{}: metadata '{}' must be one count >= 2 of fitted keys", src.path(), kKeys);
  k.n_keys = keys[0];
  w.key_calibration = std::move(k);
}

void write_key_calibration(gguf::Writer& out, const Weights& w) {
  const Weights::KeyCalibration& k = w.key_calibration;
  if (k.empty()) return;
  const Config& c = w.cfg;
  const uint64_t d = uint64_t(c.head_dim), n = uint64_t(c.n_layers) * uint64_t(c.n_kv_heads);
  LR_ASSERT(k.mean.size() == d * n && k.sigma.size() == d * n && k.vectors.size() == d * d * n);
  out.add_tensor(kMean, DType::F32, {d, n}, k.mean.data(), k.mean.size() * 4);
  out.add_tensor(kSigma, DType::F32, {d, n}, k.sigma.data(), k.sigma.size() * 4);
  out.add_tensor(kVectors, DType::F32, {d, d, n}, k.vectors.data(), k.vectors.size() * 4);
  if (!k.q_vectors.empty()) {
    LR_ASSERT(k.q_vectors.size() == d * d * n && k.q_proj.size() == d * d * n && k.q_sigma.size() == d * n);
    out.add_tensor("kv_calib.q_vectors", DType::F32, {d, d, n}, k.q_vectors.data(), k.q_vectors.size() * 4);
    out.add_tensor("kv_calib.q_proj", DType::F32, {d, d, n}, k.q_proj.data(), k.q_proj.size() * 4);
    out.add_tensor("kv_calib.q_sigma", DType::F32, {d, n}, k.q_sigma.data(), k.q_sigma.size() * 4);
  }
  out.set_i32s(kKeys, {int32_t(std::min<int64_t>(k.n_keys, INT32_MAX))});
}

}  // namespace lr
