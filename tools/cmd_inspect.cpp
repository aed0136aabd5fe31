// lowrank inspect: a model file's metadata, config and tensor table.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "backend/cpu/exec/session.h"
#include "common.h"
#include "core/error.h"
#include "format/gguf.h"
#include "kv/dense_cache.h"
#include "model/config.h"
#include "model/load.h"
#include "model/weights.h"

namespace lr::cli {

namespace {

struct InspectOptions {
  std::string model;
  bool all_values = false;
};

std::string show_value(const gguf::Value& v, bool all) {
  using T = gguf::ValueType;
  switch (v.type) {
    case T::STRING: {
      std::string s = v.s;
      if (!all && s.size() > 80) s = s.substr(0, 77) + "...";
      for (char& c : s)
        if (c == '\n') c = ' ';
      return "\"" + s + "\"";
    }
    case T::FLOAT32:
    case T::FLOAT64: return fmt::format("{}", v.f);
    case T::BOOL: return v.i ? "true" : "false";
    case T::UINT64: return fmt::format("{}", uint64_t(v.i));
    case T::ARRAY: {
      size_t n = v.array_size();
      std::string s = fmt::format("[{} x {}]", n, gguf::value_type_name(v.elem));
      size_t show = all ? n : std::min<size_t>(n, 4);
      for (size_t i = 0; i < show; ++i) {
        if (!v.strs.empty()) s += " \"" + v.strs[i] + "\"";
        else if (!v.floats.empty()) s += fmt::format(" {}", v.floats[i]);
        else if (!v.ints.empty()) s += fmt::format(" {}", v.ints[i]);
      }
      if (show < n) s += " ...";
      return s;
    }
    default: return fmt::format("{}", v.i);
  }
}

int run(const InspectOptions& o) {
  std::string path = o.model.empty() ? default_model_path() : o.model;
  if (std::filesystem::is_directory(path))
    fail("{}: inspect reads GGUF files; for a HuggingFace directory see its config.json", path);
  auto f = gguf::File::open(path);
  std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, %llu bytes\n\n", path.c_str(),
              f->version(), f->metadata().size(), f->tensors().size(),
              (unsigned long long)f->file_size());
  for (const auto& [key, v] : f->metadata())
    std::printf("  %-44s %s\n", key.c_str(), show_value(v, o.all_values).c_str());

  std::printf("\n  %-32s %-8s %-20s %12s\n", "tensor", "dtype", "shape [out, in]", "bytes");
  uint64_t total = 0;
  for (const auto& t : f->tensors()) {
    std::string shape;
    for (size_t i = t.shape.size(); i-- > 0;) shape += fmt::format("{}{}", t.shape[i], i ? ", " : "");
    std::printf("  %-32s %-8s %-20s %12llu\n", t.name.c_str(),
                std::string(dtype_name(t.dtype)).c_str(), ("[" + shape + "]").c_str(),
                (unsigned long long)t.nbytes);
    total += t.nbytes;
  }
  std::printf("  %zu tensors, %.1f MiB of tensor data\n", f->tensors().size(), double(total) / (1 << 20));

  if (f->find_tensor("token_embd.weight") == nullptr) {
    std::printf("\n(no weights: a vocabulary-only or non-model file)\n");
    return 0;
  }
  {
    Config c = config_from_gguf(*f);
    c.tied_output = f->find_tensor("output.weight") == nullptr;
    uint64_t params = 0;
    uint64_t calib = 0;  // kv_calib.* tensors: key bases, not parameters
    std::vector<MatrixShape> shapes;  // the model's matrices as the loader makes them
    for (const auto& t : f->tensors()) {
      const bool is_calib = t.name.rfind("kv_calib.", 0) == 0;
      (is_calib ? calib : params) += t.elements();
      if (is_calib) continue;
      if (t.shape.size() == 1) shapes.push_back({1, int64_t(t.shape[0]), true});
      if (t.shape.size() == 2) shapes.push_back({int64_t(t.shape[1]), int64_t(t.shape[0]), false});
    }
    bool low_rank = f->has("lowrank.method");  // compress and import record it; calibrate-kv alone does not
    std::printf(
        "\nmodel: %d layers, dim %d, ffn %d, heads %d (kv %d) x %d, vocab %d, ctx_train %d, "
        "rope theta %g%s, %s output%s\nparameters: %.1f M (dense equivalent %.1f M); in memory: "
        "%.1f MiB as f16 or bf16 (the fast path's default), %.1f MiB as q8_0, %.1f MiB as f32 (the reference)\n",
        c.n_layers, c.dim, c.ffn_dim, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab, c.ctx_train,
        c.rope_theta, c.rope_freq_factors.empty() ? "" : " (Llama-3.1 per-frequency factors)",
        c.tied_output ? "tied" : "separate",
        low_rank ? fmt::format(", low-rank ({})", f->get_string("lowrank.method", "?")).c_str() : "",
        double(params) / 1e6, double(parameter_count(c)) / 1e6,
        double(estimate_bytes(shapes, DType::F16)) / (1 << 20), double(estimate_bytes(shapes, DType::Q8_0)) / (1 << 20),
        double(estimate_bytes(shapes, DType::F32)) / (1 << 20));
    // The fast CPU path's f32 cache of one sequence at the trained context
    // (its prompt chunks: cpu::kPrefillRows tokens).
    const kv::DenseLayout kv = kv::DenseLayout::of(c, std::max(c.ctx_train, 1), cpu::kPrefillRows);
    std::printf("KV cache (f32, one sequence) at ctx_train %d: %.1f MiB", c.ctx_train,
                double(kv.bytes()) / (1 << 20));
    if (kv.bytes() < kv.full_bytes())
      std::printf(
          " (its sliding-window layers keep rings of 2 x %d positions; a cache of the whole "
          "context in every layer: %.1f MiB)",
          kv.max_ring(), double(kv.full_bytes()) / (1 << 20));
    std::printf("\n");
    if (calib > 0)
      std::printf("key calibration (calibrate-kv, for --svdq-basis calibrated): %s%s, %.2f MiB\n",
                  f->get_string("lowrank.kv_calib.source", "?").c_str(),
                  f->find_tensor("kv_calib.q_vectors") ? ", key and query metric fits" : ", key metric fit",
                  double(calib) * 4 / (1 << 20));
  }
  return 0;
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand("inspect", "show a GGUF file's metadata and tensor table");
  sub->add_option("-m,--model", o->model, "GGUF file (default: the default model)");
  sub->add_flag("--all", o->all_values, "print long strings and arrays in full");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
