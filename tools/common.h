// Pieces shared by the lowrank subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr::cli {

struct ModelOptions {
  std::string model;       // -m; empty: the default model
  int threads = 0;         // -t; 0: all cores
  int ctx = 2048;          // -c
  bool reference = false;  // --ref: the scalar f32 reference path
  std::string device = "cpu";  // --device: cpu or cuda
  std::string wtype = "auto";  // --wtype: fast path weight type
  struct KeyCacheCli {
    // --cache-type-k; empty: f16 on the CPU's fast path (as llama.cpp's
    // default), f32 on the paths that keep f32 caches alone (--ref, --device cuda).
    std::string type;
    std::string value_type;  // --cache-type-v; empty: f32 beside f32 keys, f16 beside the others
    int svdq_rank = 0;
    double svdq_energy = 0.95;
    std::string svdq_energy_mode = "sigma", svdq_schedule = "8,4,2,1,1,0,0,0", svdq_basis = "sequence";
    // CLI defaults: the query-aware, RoPE-spread fit (docs/kv-cache.md); kv::SvdqConfig
    // defaults to the SVDq spec (key metric, keys where seen): --svdq-metric key --svdq-positions seen.
    std::string svdq_metric = "query", svdq_positions = "all";
    int svdq_group = 32, svdq_min_fit = 64, kivi_window = 128;
    // --svdq-* and --kivi-window; --cache-type-k and -v too when with_type.
    void add_to(CLI::App& app, bool with_type);
    // fast_cpu: the path runs on the CPU's fast path (where the default is f16).
    kv::KeyCacheConfig config(bool fast_cpu = false) const;
  } keys;

  void add_to(CLI::App& app, int default_ctx);
  std::string model_path() const;
  ExecPath path() const { return parse_exec_path(device, reference); }
  BackendOptions backend_options() const;
  // The weight type the path loads (runtime/session.h load_weight_type).
  std::optional<DType> weight_type() const { return load_weight_type(path(), wtype); }
};

// --draft ngram, --draft-max N: speculative decoding with prompt-lookup
// drafts (run, chat, serve; runtime/engine.h EngineOptions::draft_max).
// --draft-model FILE: a smaller model of the same vocabulary drafts;
// --draft self: the model requantized (tools/draft_options.cpp).
struct DraftOptions {
  std::string kind = "none";
  std::string model;
  std::string self_type = "q2_k";
  int max = 8;
  float p_min = ModelDraftOptions{}.p_min;
  double cost = -1;  // --draft-cost: a drafted token's cost in decode steps (negative: timed)
  // with_kind: --draft too (bench --spec names its variants itself).
  void add_to(CLI::App& app, bool with_kind = true);
  int draft_max() const { return kind != "none" || !model.empty() ? max : 0; }
  // The engine's draft options for `slots` slots of `target` (loads and
  // checks --draft-model: its vocabulary must be the target's).
  void configure(EngineOptions& eo, const Model& target, const ModelOptions& mo, int slots,
                 int step_tokens) const;
};

// Prints what a compressed key cache holds (nothing for the f32 cache) to `f`.
void print_key_cache(const Backend& b, FILE* f);

// Each subcommand registers itself and returns the function that runs it.
using Runner = std::function<int()>;
Runner add_run_command(CLI::App& app);
Runner add_chat_command(CLI::App& app);
Runner add_perplexity_command(CLI::App& app);
Runner add_inspect_command(CLI::App& app);
Runner add_compress_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_bench_batch_command(CLI::App& app);
Runner add_import_command(CLI::App& app);
Runner add_calibrate_kv_command(CLI::App& app);
Runner add_synth_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_quantize_command(CLI::App& app);
// "q8_0" .. "q2_k" (any case) -> the block format lowrank quantizes to; lr::Error otherwise.
DType parse_quant_type(const std::string& name, const char* flag);

}  // namespace lr::cli
