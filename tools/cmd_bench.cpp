// lowrank bench: the decode ablation side by side (dense model, naive eager
// low-rank, legacy low-rank KV, dense KV, + packed, + fused, + per-layer,
// + per-token), and the machine's read bandwidth.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cuda/cuda.h"
#include "bench/harness/harness.h"
#include "bench_spec.h"
#include "common.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "model/load.h"
#include "svg_plot.h"

namespace lr::cli {

namespace {

struct BenchCliOptions {
  std::vector<std::string> models;
  std::string dense;
  std::string wtype = "auto";
  std::vector<int> prompt = {512};
  std::vector<int> gen = {32};
  int threads = 0;
  int reps = 3;
  std::string modes = "all";
  std::string json;
  std::string plot;
  std::string sweep;
  bool roofline = false;
  std::string device = "cpu";
  ModelOptions::KeyCacheCli keys;  // settings of the k-* modes
  // A rung of one's own (mode "custom"): --kv, --unit, --no-pack, --no-fuse.
  std::string kv = "dense", unit = "per-token";
  bool no_pack = false, no_fuse = false;
  bool custom = false;  // any of them given
  // --spec VARIANTS: speculative decoding on prompt sets (bench_spec.h).
  std::vector<std::string> spec, spec_prompts;
  DraftOptions draft;
};

// --spec: the first -m file the target, the first --gen (default 128) per
// answer, --reps rounds.
int run_spec(const BenchCliOptions& o, bool gen_given) {
  SpecBenchOptions s;
  s.model.model = o.models.empty() ? "" : o.models.front();
  s.model.threads = o.threads;
  s.model.ctx = 4096;
  s.model.wtype = o.wtype;
  s.model.device = o.device;
  s.draft = o.draft;
  s.variants = o.spec;
  s.prompt_files = o.spec_prompts;
  s.gen = gen_given ? o.gen.front() : 128;
  s.rounds = o.reps;
  if (o.models.size() > 1)
    fail("--spec measures one target: give one -m file (got {})", o.models.size());
  return run_spec_bench(s);
}

std::vector<BenchShape> shapes_of(const std::vector<int>& p, const std::vector<int>& g) {
  // Paired like 512/32 and 2048/128; a single value pairs with every other.
  if (p.size() != g.size() && p.size() != 1 && g.size() != 1)
    fail("--prompt has {} values and --gen {}: give the same number, or one of them once", p.size(), g.size());
  std::vector<BenchShape> out;
  for (size_t i = 0; i < std::max(p.size(), g.size()); ++i)
    out.push_back({p[p.size() == 1 ? 0 : i], g[g.size() == 1 ? 0 : i]});
  return out;
}

// The row of mode `mode` measured in the same run (model, shape) as r.
const BenchRow* find_row(const std::vector<BenchRow>& rows, const BenchRow& r, const std::string& mode) {
  for (const BenchRow& b : rows)
    if (b.mode == mode && b.prompt == r.prompt && b.gen == r.gen && b.run == r.run) return &b;
  return nullptr;
}

void print_table(const std::vector<BenchRow>& rows, double bw) {
  // CPU: thread-pool regions and barriers per token; GPU: host launches and kernels per token.
  const bool gpu = !rows.empty() && rows[0].kernels > 0;
  std::printf("\n| keep | shape | mode | prefill ms | decode ms/tok | tok/s | e2e s | %s | %s | weight MB/tok | KV MB/tok | GB/s | %% of %.1f GB/s | KV cache MB | keys MB | key bits |\n",
              gpu ? "launches/tok" : "dispatches/tok", gpu ? "kernels/tok" : "barriers/tok", bw);
  std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const BenchRow& r : rows)
    std::printf("| %.2f | %d/%d | %s | %.1f | %.3f | %.1f | %.3f | %.0f | %.0f | %.1f | %.1f | %.1f | %.0f%% | %.1f | %.2f | %.2f |\n",
                r.keep, r.prompt, r.gen, r.mode.c_str(), r.prefill_ms, r.decode_ms, r.tok_s, r.e2e_s,
                r.dispatches, gpu ? r.kernels : r.barriers, r.weight_mb, r.kv_mb, r.gbs, r.pct_bw, r.cache_mb,
                r.key_mb, r.key_bits);
  // Speedups against the baselines measured in the same run.
  std::printf("\n");
  for (const BenchRow& r : rows) {
    if (r.mode == "naive" || r.mode == "dense") continue;
    std::printf("keep %.2f %d/%d %-11s decode", r.keep, r.prompt, r.gen, r.mode.c_str());
    for (const char* base : {"naive", "dense", "k-f16"})
      if (const BenchRow* b = find_row(rows, r, base))
        std::printf("  %.2fx %s", b->decode_ms / r.decode_ms, base);
    std::printf("\n");
  }
}

// Decode speedup of the fastest low-rank mode (per-token) over the naive
// low-rank baseline and over the dense model, against keep (first shape) and
// against the generated length (first model): the paper's figures 4 and 5.
void plot(const std::string& path, const std::vector<BenchRow>& rows) {
  PlotPanel by_keep{"decode speedup vs keep", "keep (fraction of parameters per matrix)", "speedup (x)", {}};
  PlotPanel by_gen{"decode speedup vs generated length", "generated tokens", "speedup (x)", {}};
  for (const char* base : {"naive", "dense"}) {
    PlotSeries k{std::string("per-token over ") + base, {}}, g{k.name, {}};
    for (const BenchRow& r : rows) {
      if (r.mode != "per-token") continue;
      const BenchRow* b = find_row(rows, r, base);
      if (!b) continue;
      if (r.prompt == rows[0].prompt && r.gen == rows[0].gen) k.points.push_back({r.keep, b->decode_ms / r.decode_ms});
      if (r.run == 0) g.points.push_back({double(r.gen), b->decode_ms / r.decode_ms});
    }
    std::sort(k.points.begin(), k.points.end());
    std::sort(g.points.begin(), g.points.end());
    if (!k.points.empty()) by_keep.series.push_back(k);
    if (!g.points.empty()) by_gen.series.push_back(g);
  }
  write_svg_plot(path, "lowrank bench: fused per-token decode", {by_keep, by_gen});
}

nlohmann::json to_json(const std::vector<BenchRow>& rows, double bw, int threads) {
  nlohmann::json j;
  j["read_bandwidth_gbs"] = bw;
  j["threads"] = threads;
  for (const BenchRow& r : rows)
    j["rows"].push_back({{"model", r.model}, {"keep", r.keep}, {"mode", r.mode}, {"prompt", r.prompt},
                         {"gen", r.gen}, {"prefill_ms", r.prefill_ms}, {"decode_ms_per_token", r.decode_ms},
                         {"tokens_per_s", r.tok_s}, {"e2e_s", r.e2e_s},
                         {"dispatches_per_token", r.dispatches}, {"barriers_per_token", r.barriers},
                         {"kernels_per_token", r.kernels},
                         {"weight_mb_per_token", r.weight_mb}, {"kv_mb_per_token", r.kv_mb},
                         {"gbs", r.gbs}, {"pct_read_bandwidth", r.pct_bw}, {"kv_cache_mb", r.cache_mb},
                         {"key_cache_mb", r.key_mb}, {"key_bits_per_element", r.key_bits},
                         {"peak_rss_mb", r.peak_rss_mb}});
  return j;
}

int run(const BenchCliOptions& o) {
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  BenchOptions b;
  b.threads = threads;
  b.reps = o.reps;
  b.shapes = shapes_of(o.prompt, o.gen);
  b.modes = o.custom && o.modes == "all" ? std::vector<BenchMode>{} : parse_bench_modes(o.modes);
  if (o.custom) b.modes.push_back(custom_mode(parse_kv_mode(o.kv), parse_exec_unit(o.unit), !o.no_pack, !o.no_fuse));
  b.keys = o.keys.config();
  b.path = parse_exec_path(o.device, false);
  std::vector<std::string> paths = o.models;
  if (paths.empty()) paths.push_back(default_model_path());
  bool need_dense = false;
  for (const BenchMode& m : b.modes) need_dense |= m.dense_model;
  // First, what is measured: each file in every mode; the dense mode reads
  // --dense when given, else the file itself.
  std::string names;
  for (const BenchMode& m : b.modes) names += (names.empty() ? "" : ", ") + m.name;
  for (const std::string& p : paths)
    std::printf("lowrank bench: %s in modes %s%s\n", p.c_str(), names.c_str(),
                need_dense && !o.dense.empty() ? fmt::format(" (dense: {})", o.dense).c_str() : "");
  double bw = 0;
  if (b.path == ExecPath::Cuda) {
    std::printf("device: %s\n", cuda_device_info().c_str());
    bw = cuda_read_bandwidth_gbs();
    std::printf("GPU read bandwidth: %.1f GB/s (a kernel summing one large buffer, best of 5)\n", bw);
  } else {
    std::fprintf(stderr, "bench: measuring read bandwidth (%d threads)...\n", threads);
    bw = measure_read_bandwidth(threads);
    std::printf("CPU kernels: %s\n", cpu_kernel_path().c_str());
    std::printf("read bandwidth: %.1f GB/s (%d threads, 1 GiB buffer, best of 5)\n", bw, threads);
  }
  if (o.roofline) return 0;
  b.read_bw_gbs = bw;
  const std::optional<DType> wtype = load_weight_type(b.path, o.wtype);
  std::unique_ptr<Model> dense;
  if (need_dense && !o.dense.empty()) {
    dense = std::make_unique<Model>(load_model(o.dense, wtype));
    std::printf("dense model: %s (%.1f MB of weights in memory, %.1f MB read per token)\n", dense->path.c_str(),
                double(dense->weights->bytes()) / 1e6,
                double(dense->weights->bytes_per_token()) / 1e6);
  }
  std::printf("%s weights, %d threads, %d repetitions (medians), modes interleaved\n", o.wtype.c_str(),
              threads, b.reps);
  for (const BenchMode& m : b.modes) std::printf("  %-11s %s\n", m.name.c_str(), m.what);
  std::vector<BenchRow> rows;
  for (size_t i = 0; i < paths.size(); ++i) {
    // One model at a time (each run measures the dense baseline again, side by side).
    Model lowrank = load_model(paths[i], wtype);
    std::printf("model %zu: %s (%.1f MB of weights in memory, %.1f MB read per token)\n", i,
                paths[i].c_str(), double(lowrank.weights->bytes()) / 1e6,
                double(lowrank.weights->bytes_per_token()) / 1e6);
    std::fflush(stdout);
    for (BenchRow& r : run_bench(lowrank, dense ? dense.get() : &lowrank, b, [](const std::string& what) {
           std::fprintf(stderr, "\rbench: %-60s", what.c_str());
           std::fflush(stderr);
         })) {
      r.run = int(i);
      rows.push_back(r);
    }
    std::fprintf(stderr, "\n");
  }
  print_table(rows, bw);
  if (!rows.empty()) std::printf("peak RSS of the process: %.0f MB\n", rows.back().peak_rss_mb);
  if (!o.plot.empty()) plot(o.plot, rows);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    if (!out) fail("{}: cannot write the JSON file", o.json);
    out << to_json(rows, bw, threads).dump(2) << "\n";
  }
  return 0;
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchCliOptions>();
  CLI::App* sub = app.add_subcommand("bench", "decode ablation: every execution mode side by side");
  sub->add_option("-m,--model", o->models, "low-rank model(s), comma-separated for a keep sweep (default: the default model)")->delimiter(',');
  sub->add_option("--dense", o->dense, "dense model for the 'dense' mode (default: each -m file itself)");
  sub->add_option("--prompt", o->prompt, "prompt lengths, comma-separated")->delimiter(',')->capture_default_str();
  sub->add_option("--gen", o->gen, "generated lengths, comma-separated (paired with --prompt)")->delimiter(',')->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
  sub->add_option("--reps", o->reps, "repetitions per mode (medians reported)")->capture_default_str()->check(CLI::Range(1, 1000));
  sub->add_option("--modes", o->modes,
                  "all (the ablation: dense, naive, legacy, densekv, packed, fused, per-op-spin, "
                  "per-layer, per-token), or a comma-separated list of those and the cache modes "
                  "k-f16, k-q8_0, k-q4_0, k-kivi2, k-svdq (that key type, f16 values) and kv-q8_0, "
                  "kv-q4_0, kv-q8_0-rot, kv-q4_0-rot (keys and values of the type)")
      ->capture_default_str();
  sub->add_option("--wtype", o->wtype, kWeightTypeHelp)->capture_default_str()->check(CLI::IsMember({"auto", "f16", "bf16", "f32", "q8_0"}));
  sub->add_option("--json", o->json, "also write the results as JSON");
  sub->add_flag("--roofline", o->roofline, "only measure and print this machine's read bandwidth");
  sub->add_option("--device", o->device, "run every mode on the CPU or on the GPU (cuda)")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  o->keys.add_to(*sub, false);
  sub->add_option("--plot", o->plot, "write an SVG of decode speedup vs keep and vs generated length");
  sub->add_option("--kv", o->kv, "a mode of one's own, 'custom' (alone, or added to --modes): decode KV cache dense (append the current k/v), legacy (low-rank latents, history rebuilt every step) or static (eager attention steps)")->capture_default_str()->check(CLI::IsMember({"dense", "legacy", "static"}));
  sub->add_option("--unit", o->unit, "custom mode: execution unit per-op, per-layer or per-token")->capture_default_str()->check(CLI::IsMember({"per-op", "per-layer", "per-token"}));
  sub->add_flag("--no-pack", o->no_pack, "custom mode: separate products for q, k, v and gate, up (no packed input factors)");
  sub->add_flag("--no-fuse", o->no_fuse, "custom mode: RMSNorm, SiLU*mul, residual adds and the attention merge as steps of their own");
  sub->add_option("--sweep", o->sweep, "gen: generated lengths 32,128,512,1024,2048 at the (single) --prompt; keep: give several -m files")
      ->check(CLI::IsMember({"gen", "keep"}));
  sub->add_option("--spec", o->spec,
                  "speculative decoding on the --prompts sets instead of the ablation: variants "
                  "none (plain decoding), ngram, model (--draft-model), self, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "ngram", "model", "self"}));
  sub->add_option("--prompts", o->spec_prompts,
                  "--spec: prompt sets, comma-separated (bench/prompts/spec-code.txt; "
                  "scripts/spec-prose.py writes the prose set)")
      ->delimiter(',');
  o->draft.add_to(*sub, false);
  return [o, sub] {
    if (!o->spec.empty()) return run_spec(*o, sub->count("--gen") > 0);
    if (!o->spec_prompts.empty()) fail("--prompts is for --spec: add --spec none,ngram,...");
    o->custom = sub->count("--kv") + sub->count("--unit") + sub->count("--no-pack") + sub->count("--no-fuse") > 0;
    if (o->sweep == "gen") o->gen = {32, 128, 512, 1024, 2048};
    if (o->sweep == "keep" && o->models.size() < 2)
      fail("--sweep keep runs over several low-rank files: give them as -m a.gguf,b.gguf,...");
    return run(*o);
  };
}

}  // namespace lr::cli
