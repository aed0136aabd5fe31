#include "compress/quantize_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "compress/quantize.h"
#include "core/error.h"
#include "model/weights.h"
#include "runtime/model.h"

namespace lr {

namespace {

// Sums x_c^2 per column c of every linear map's input: the Gram's diagonal.
class DiagonalObserver final : public ActivationObserver {
 public:
  explicit DiagonalObserver(int n_layers) : sums_(size_t(n_layers) * 4) {}
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    if (site == Site::Keys || site == Site::Queries) return;
    std::vector<double>& s = sums_[size_t(layer) * 4 + size_t(site)];
    s.resize(size_t(dim), 0.0);
    for (int t = 0; t < n; ++t)
      for (int c = 0; c < dim; ++c)
        s[size_t(c)] += double(X[size_t(t) * dim + c]) * X[size_t(t) * dim + c];
  }
  // Mean square per column (empty when the site was never seen).
  std::vector<float> importance(int layer, Site site, int64_t tokens) const {
    const std::vector<double>& s = sums_[size_t(layer) * 4 + size_t(site)];
    std::vector<float> out(s.size());
    for (size_t c = 0; c < s.size(); ++c)
      out[c] = float(s[c] / double(std::max<int64_t>(tokens, 1)));
    return out;
  }

 private:
  std::vector<std::vector<double>> sums_;  // [layer * 4 + site][column]
};

}  // namespace

DType fallback_type(DType want) {
  switch (want) {
    case DType::Q2_K:
    case DType::Q3_K:
      return DType::Q4_0;
    case DType::Q4_K:
      return DType::Q5_0;
    case DType::Q5_K:
      return DType::Q5_1;
    case DType::Q6_K:
      return DType::Q8_0;
    default:
      return want;
  }
}

std::vector<QuantizeReport> quantize_model(const std::string& in_path,
                                           const std::vector<QuantizeJob>& jobs,
                                           const QuantizeOptions& opt,
                                           const compress::CalibrationProgress& progress) {
  if (jobs.empty()) fail("quantize: nothing to do (no output)");
  for (const QuantizeJob& j : jobs)
    if (!compress::can_quantize(j.type))
      fail(
          "lowrank quantizes to Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, not "
          "{}",
          dtype_name(j.type));
  Model m = load_model(in_path, std::nullopt);
  if (!m.file) fail("{}: quantize reads GGUF models", in_path);
  const Config& c = m.weights->cfg;
  for_each_linear(*m.weights, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.low_rank()) fail("{}: the model is low-rank; quantize reads dense models", in_path);
  });
  DiagonalObserver diag(c.n_layers);
  int64_t calib_tokens = 0;
  if (!opt.calib.path.empty())
    calib_tokens = compress::run_calibration(m, opt.calib, &diag, "calibrating", progress);

  // The re-encoded tensors by name: (layer, slot).
  struct Target {
    int layer;
    Slot slot;
  };
  std::map<std::string, Target> targets;
  for (const std::string& kind : opt.kinds) {
    if (kind == "output") {  // the head (with tied embeddings, the embeddings too)
      targets[m.file->find_tensor("output.weight") ? "output.weight" : "token_embd.weight"] = {
          -1, Slot::Output};
      continue;
    }
    const WeightSpec& s = block_linear_spec(kind);
    for (int l = 0; l < c.n_layers; ++l)
      targets[fmt::format(fmt::runtime(s.gguf), l)] = {l, s.slot};
  }
  // A file's fused q, k and v (Phi-3's attn_qkv, model/fused_tensors.h):
  // its rows are quantized as the parts' would be, so all three or none.
  // (A fused ffn_up holds gate and up under ffn_up's name: both, or up alone.)
  const int n_qkv = int(std::count_if(opt.kinds.begin(), opt.kinds.end(), [](const std::string& k) {
    return k == "attn_q" || k == "attn_k" || k == "attn_v";
  }));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string qkv = fmt::format("blk.{}.attn_qkv.weight", l);
    if (!m.file->find_tensor(qkv) || n_qkv == 0) continue;
    if (n_qkv != 3)
      fail("{}: {} holds q, k and v fused: quantize attn_q, attn_k and attn_v together", in_path,
           qkv);
    targets[qkv] = {l, Slot::Q};
  }

  std::vector<QuantizeReport> reports;
  for (const QuantizeJob& job : jobs) {
    QuantizeReport rep;
    rep.calib_tokens = calib_tokens;
    gguf::Writer out;
    for (const auto& [key, value] : m.file->metadata())
      if (key != "general.file_type") out.set(key, value);
    out.set_string(
        "lowrank.quantized",
        fmt::format("{} with lowrank's scale search{}", dtype_name(job.type),
                    opt.calib.path.empty() ? std::string()
                                           : fmt::format(", activation-weighted on {} ({} tokens)",
                                                         opt.calib.path, rep.calib_tokens)));
    const int threads = std::max(1, opt.n_threads);
    for (const gguf::TensorInfo& t : m.file->tensors()) {
      auto it = targets.find(t.name);
      if (it == targets.end()) {
        const uint8_t* data = t.data;
        out.add_tensor_generated(t.name, t.dtype, t.shape,
                                 [data](uint8_t* dst, uint64_t n) { std::copy_n(data, n, dst); });
        continue;
      }
      const int64_t cols = int64_t(t.shape[0]), rows = int64_t(t.elements()) / cols;
      DType type = job.type;
      if (!row_bytes(type, uint64_t(cols))) {
        if (!opt.fallback)
          fail(
              "{}: {} has rows of {} values, not a whole number of {}'s {}-value blocks (pass "
              "--fallback to store such matrices as {}, as llama.cpp does)",
              in_path, t.name, cols, dtype_name(type), dtype_info(type).block_elems,
              dtype_name(fallback_type(type)));
        type = fallback_type(type);
        if (!row_bytes(type, uint64_t(cols)))
          fail("{}: {} has rows of {} values, which neither {} nor {} fits", in_path, t.name, cols,
               dtype_name(job.type), dtype_name(type));
        rep.fell_back.push_back(fmt::format("{}: {}", t.name, dtype_name(type)));
      }
      ++rep.types[type];
      const uint64_t rb = *row_bytes(type, uint64_t(cols));
      rep.bytes_before += t.nbytes;
      rep.bytes_after += rb * uint64_t(rows);
      std::vector<float> imp;
      if (!opt.calib.path.empty() && it->second.layer >= 0)  // (the head: plain)
        imp = diag.importance(it->second.layer, compress::input_site(it->second.slot),
                              rep.calib_tokens);
      LR_ASSERT(imp.empty() || int64_t(imp.size()) == cols);
      const DType src_type = t.dtype;
      const uint8_t* src = t.data;
      const uint64_t src_rb = *row_bytes(src_type, uint64_t(cols));
      out.add_tensor_generated(t.name, type, t.shape,
                               [=, imp = std::move(imp)](uint8_t* dst, uint64_t) {
                                 compress::quantize_rows(
                                     type, rows, cols,
                                     [&](int64_t r, float* row) {
                                       dequantize(src_type, src + uint64_t(r) * src_rb, row, cols);
                                     },
                                     imp.empty() ? nullptr : imp.data(), dst, threads);
                               });
    }
    out.write(job.out_path);
    reports.push_back(std::move(rep));
  }
  return reports;
}

}  // namespace lr
