// lowrank: command-line entry point. Subcommands live in cmd_*.cpp.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "model/load.h"
#include "openblas_core.h"

namespace lr::cli {

void ModelOptions::add_to(CLI::App& app, int default_ctx) {
  ctx = default_ctx;
  app.add_option("-m,--model", model, "GGUF file or HuggingFace directory (default: SmolLM2-135M-Instruct, see scripts/fetch-model.sh)");
  app.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_option("-c,--ctx", ctx, "context size in tokens (KV cache capacity)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_flag("--ref", reference, "run the scalar f32 reference path instead of the fast path");
  app.add_option("--device", device, "fast path on the CPU, or on the GPU (cuda: a build with LOWRANK_CUDA=ON)")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--wtype", wtype, kWeightTypeHelp)->capture_default_str()->check(CLI::IsMember({"auto", "f16", "bf16", "f32", "q8_0"}));
  keys.add_to(app, true);
}

void ModelOptions::KeyCacheCli::add_to(CLI::App& app, bool with_type) {
  if (with_type) {
    app.add_option("--cache-type-k", type,
                   "key cache: f32, f16, q8_0, q4_0, q8_0-rot, q4_0-rot (Hadamard-rotated), kivi2 "
                   "or svdq (docs/kv-cache.md; default: f16 on the CPU's fast path, f32 with --ref "
                   "or --device cuda)")
        ->check(
            CLI::IsMember({"f32", "f16", "q8_0", "q4_0", "q8_0-rot", "q4_0-rot", "kivi2", "svdq"}));
    app.add_option("--cache-type-v", value_type,
                   "value cache: f32, f16, q8_0, q4_0, q8_0-rot or q4_0-rot (default: f32 beside "
                   "f32 keys, f16 beside the others)")
        ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0", "q8_0-rot", "q4_0-rot"}));
  }
  app.add_option("--svdq-rank", svdq_rank, "svdq: latent rank per KV head (0: smallest rank reaching --svdq-energy)")->capture_default_str()->check(CLI::Range(0, 4096));
  app.add_option("--svdq-energy", svdq_energy, "svdq: energy the automatic rank keeps, in (0, 1]")->capture_default_str();
  app.add_option("--svdq-energy-mode", svdq_energy_mode, "svdq: energy over singular values (sigma, the SVDq rule) or their squares (sigma2, variance)")->capture_default_str()->check(CLI::IsMember({"sigma", "sigma2"}));
  app.add_option("--svdq-schedule", svdq_schedule, "svdq: bit widths of the latent channel groups, most significant first (0 drops a group)")->capture_default_str();
  app.add_option("--svdq-group", svdq_group, "svdq: tokens per quantization block")->capture_default_str();
  app.add_option("--svdq-min-fit", svdq_min_fit, "svdq: keys cached before a sequence basis is fitted")->capture_default_str();
  app.add_option("--svdq-basis", svdq_basis, "svdq: basis fitted on each sequence's prefill (sequence) or offline by lowrank calibrate-kv (calibrated)")->capture_default_str()->check(CLI::IsMember({"sequence", "calibrated"}));
  app.add_option("--svdq-metric", svdq_metric, "svdq: basis that minimizes the keys' error (key, SVDq) or the attention scores' error, weighted by the queries seen while fitting (query)")->capture_default_str()->check(CLI::IsMember({"key", "query"}));
  app.add_option("--svdq-positions", svdq_positions, "svdq sequence basis: fit on the keys where they were seen (seen), or as if each appeared at every position of the context (all: RoPE-spread moments)")->capture_default_str()->check(CLI::IsMember({"seen", "all"}));
  app.add_option("--kivi-window", kivi_window, "kivi2: f16 tokens gathered before they are quantized (a multiple of 32)")->capture_default_str();
}

kv::KeyCacheConfig ModelOptions::KeyCacheCli::config(bool fast_cpu) const {
  kv::KeyCacheConfig k;
  k.type =
      type.empty() ? (fast_cpu ? kv::KeyType::F16 : kv::KeyType::F32) : kv::parse_key_type(type);
  if (!value_type.empty()) k.value_type = kv::parse_value_type(value_type);
  k.svdq.rank = svdq_rank;
  k.svdq.energy = svdq_energy;
  k.svdq.energy_mode = svdq_energy_mode == "sigma2" ? kv::EnergyMode::Sigma2 : kv::EnergyMode::Sigma;
  k.svdq.schedule = kv::parse_schedule(svdq_schedule);
  k.svdq.group_size = svdq_group;
  k.svdq.min_fit_tokens = svdq_min_fit;
  k.svdq.basis = svdq_basis == "calibrated" ? kv::BasisSource::Calibrated : kv::BasisSource::Sequence;
  k.svdq.metric = svdq_metric == "query" ? kv::Metric::Query : kv::Metric::Key;
  k.svdq.spread = svdq_positions == "all";
  k.kivi_window = kivi_window;
  k.validate(64);  // the head_dim-free checks before the model loads; the session checks the rest
  return k;
}

std::string ModelOptions::model_path() const { return model.empty() ? default_model_path() : model; }

BackendOptions ModelOptions::backend_options() const {
  BackendOptions o;
  o.ctx = ctx;
  o.cpu.n_threads = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  o.keys = keys.config(path() == ExecPath::Fast);
  return o;
}

void print_key_cache(const Backend& b, FILE* f) {
  const KeyCacheStats st = b.key_stats();
  if (st.streams == 0 || st.tokens == 0) return;  // the dense f32 cache
  const double mb = 1.0 / (1 << 20);
  std::fprintf(f,
               "key cache %s: %lld tokens x %d streams, %.3f bits per key element (codes %.2f MB, "
               "scales %.2f MB, window %.2f MB, basis %.2f MB; %.2f MB reserved for the context), "
               "values %s %.2f MB",
               kv::key_type_name(st.type), (long long)st.tokens, st.streams, st.true_bits(),
               double(st.held.codes) * mb, double(st.held.scales) * mb, double(st.held.window) * mb,
               double(st.held.basis) * mb, double(st.allocated.total()) * mb,
               kv::value_type_name(st.value_type), double(st.value_bytes) * mb);
  if (st.type == kv::KeyType::Svdq)
    std::fprintf(f, "; svdq: %d/%d streams fitted, mean rank %.1f, %.1f stored channels, nominal %.3f bits, %d degraded",
                 st.fitted, st.streams, st.mean_rank, st.mean_channels, st.nominal_bits, st.degraded);
  std::fprintf(f, "\n");
}

}  // namespace lr::cli

int main(int argc, char** argv) {
  lr::cli::fix_openblas_core(argv);  // may re-execute the program
  try {
    lr::require_cpu_features();
    lr::kernel_isa();  // LOWRANK_ISA is checked here, before any kernel runs
  } catch (const lr::Error& e) {
    std::fprintf(stderr, "lowrank: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"lowrank: a runtime for SVD-compressed (low-rank) language models"};
  app.set_version_flag("--version", "lowrank 0.1.0; CPU kernels: " + lr::cpu_kernel_path() +
                                        "; BLAS: " + lr::cli::blas_description());
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, lr::cli::Runner>> commands;
  auto reg = [&](lr::cli::Runner (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    lr::cli::Runner r = add(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(r));
  };
  reg(lr::cli::add_run_command);
  reg(lr::cli::add_chat_command);
  reg(lr::cli::add_perplexity_command);
  reg(lr::cli::add_inspect_command);
  reg(lr::cli::add_compress_command);
  reg(lr::cli::add_quantize_command);
  reg(lr::cli::add_bench_command);
  reg(lr::cli::add_bench_batch_command);
  reg(lr::cli::add_import_command);
  reg(lr::cli::add_calibrate_kv_command);
  reg(lr::cli::add_synth_command);
  reg(lr::cli::add_serve_command);
  // llama-server's -np (CLI11 takes one letter after a single dash) is --parallel.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& a : args)
    if (a == "-np") a = "--parallel";
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const lr::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nlowrank: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "\nlowrank: error: out of memory\n");
    return 1;
  }
  return 0;
}
