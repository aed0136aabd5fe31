// lowrank: command-line entry point. Subcommands live in cmd_*.cpp.
#include <cstdio>
#include <thread>
#include <vector>

#include "common.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "model/load.h"

namespace lr::cli {

void ModelOptions::add_to(CLI::App& app, int default_ctx) {
  ctx = default_ctx;
  app.add_option("-m,--model", model, "GGUF file or HuggingFace directory (default: SmolLM2-135M-Instruct, see scripts/fetch-model.sh)");
  app.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
  app.add_option("-c,--ctx", ctx, "context size in tokens (KV cache capacity)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_flag("--ref", reference, "run the scalar f32 reference path instead of the fast path");
  app.add_option("--wtype", wtype, "fast path weight type: f16, bf16, f32 or q8_0 (int8, a scale per 32 values)")->capture_default_str()->check(CLI::IsMember({"f16", "bf16", "f32", "q8_0"}));
  app.add_option("--kv", kv, "decode KV cache: dense (append the current k/v), legacy (low-rank latents, history rebuilt every step) or static (eager attention ops)")->capture_default_str()->check(CLI::IsMember({"dense", "legacy", "static"}));
  app.add_option("--unit", unit, "decode execution unit: per-op, per-layer or per-token")->capture_default_str()->check(CLI::IsMember({"per-op", "per-layer", "per-token"}));
  app.add_flag("--no-pack", no_pack, "decode: separate products for q, k, v and gate, up (no packed input factors)");
  app.add_flag("--no-fuse", no_fuse, "decode: RMSNorm, SiLU*mul, residual adds as operations of their own");
}

std::string ModelOptions::model_path() const { return model.empty() ? default_model_path() : model; }

BackendOptions ModelOptions::backend_options() const {
  BackendOptions o;
  o.ctx = ctx;
  o.n_threads = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  o.exec.kv = parse_kv_mode(kv);
  o.exec.unit = parse_exec_unit(unit);
  o.exec.packed = !no_pack;
  o.exec.fused = !no_fuse;
  return o;
}

}  // namespace lr::cli

int main(int argc, char** argv) {
  try {
    lr::require_cpu_features();
  } catch (const lr::Error& e) {
    std::fprintf(stderr, "lowrank: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{"lowrank: a runtime for SVD-compressed (low-rank) language models"};
  app.set_version_flag("--version", "lowrank 0.1.0");
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, lr::cli::Runner>> commands;
  auto reg = [&](lr::cli::Runner (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    lr::cli::Runner r = add(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(r));
  };
  reg(lr::cli::add_run_command);
  reg(lr::cli::add_perplexity_command);
  reg(lr::cli::add_inspect_command);
  reg(lr::cli::add_compress_command);
  reg(lr::cli::add_bench_command);
  reg(lr::cli::add_import_command);
  try {
    app.parse(argc, argv);
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
