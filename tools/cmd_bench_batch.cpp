// lowrank bench-batch: the batch engine under a server's slots
// (runtime/session.h make_slots: one slot a session, several the batch),
// without HTTP: for each batch size B, B slots prefill a
// prompt each, then decode together, one token per slot per step (greedy,
// fed back). Reports prefill tokens/s, decode ms per step and aggregate
// decode tokens/s, and the gain over B = 1; on the CPU or the GPU (the CUDA
// batch: decode steps replay the graph of their bucket). Needs no tokenizer
// (token ids are synthetic), so it runs on `lowrank synth` models.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda.h"
#include "common.h"
#include "core/error.h"

namespace lr::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchBatchOptions {
  ModelOptions model;
  std::vector<int> batch = {1, 4, 8, 16};
  int prompt = 64, gen = 32, reps = 3;
  std::string json;
};

struct Row {
  int batch = 0;
  double prefill_tok_s = 0, decode_ms_per_step = 0, decode_tok_s = 0;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One run at batch size B: the best of `reps` (each a fresh batch).
Row run_one(const Model& m, const BenchBatchOptions& o, int B) {
  BackendOptions bo = o.model.backend_options();
  bo.ctx = o.prompt + o.gen + 1;
  const int vocab = m.weights->cfg.vocab;
  Row best{B, 0, 1e30, 0};
  for (int rep = 0; rep < o.reps; ++rep) {
    auto b = make_slots(m, o.model.path(), bo, B, std::max(o.prompt, B));
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s)
      for (int t = 0; t < o.prompt; ++t)
        prompts[size_t(s)].push_back(3 + (s * 131 + t * 7919) % (vocab - 3));
    std::vector<float> logits(size_t(B) * size_t(vocab));
    std::vector<int32_t> next(static_cast<size_t>(B));
    auto t0 = Clock::now();
    for (int s = 0; s < B; ++s) {  // one prompt per step, as a server admits them
      b->step({{s, prompts[size_t(s)].data(), o.prompt, true}}, &logits[size_t(s) * size_t(vocab)]);
    }
    const double prefill = seconds_since(t0);
    auto argmax = [&](int s) {
      const float* l = &logits[size_t(s) * size_t(vocab)];
      return int32_t(std::max_element(l, l + vocab) - l);
    };
    for (int s = 0; s < B; ++s) next[size_t(s)] = argmax(s);
    std::vector<BatchBackend::Chunk> step(static_cast<size_t>(B));
    t0 = Clock::now();
    for (int g = 0; g < o.gen; ++g) {
      for (int s = 0; s < B; ++s) step[size_t(s)] = {s, &next[size_t(s)], 1, true, true};
      b->step(step, logits.data());
      for (int s = 0; s < B; ++s) next[size_t(s)] = argmax(s);
    }
    const double decode = seconds_since(t0);
    best.prefill_tok_s = std::max(best.prefill_tok_s, double(B) * o.prompt / prefill);
    best.decode_ms_per_step = std::min(best.decode_ms_per_step, decode * 1e3 / o.gen);
  }
  best.decode_tok_s = B * 1e3 / best.decode_ms_per_step;
  return best;
}

int run(const BenchBatchOptions& o) {
  Model m = load_model(o.model.model_path(), o.model.weight_type());
  const BackendOptions bo = o.model.backend_options();
  std::printf("lowrank bench-batch: %s, %s, prompt %d, gen %d, best of %d\n",
              o.model.model_path().c_str(),
              o.model.path() == ExecPath::Cuda ? cuda_device_info().c_str()
                                               : describe(o.model.path(), bo).c_str(),
              o.prompt, o.gen, o.reps);
  std::printf(
      "| batch | prefill tok/s | decode ms/step | decode tok/s (all slots) | vs batch 1 |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<Row> rows;
  for (int B : o.batch) {
    rows.push_back(run_one(m, o, B));
    const Row& r = rows.back();
    std::printf("| %d | %.1f | %.2f | %.1f | %.2fx |\n", r.batch, r.prefill_tok_s,
                r.decode_ms_per_step, r.decode_tok_s, r.decode_tok_s / rows.front().decode_tok_s);
    std::fflush(stdout);
  }
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", o.model.model_path()},
                        {"device", o.model.device},
                        {"prompt", o.prompt},
                        {"gen", o.gen},
                        {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      j["rows"].push_back({{"batch", r.batch},
                           {"prefill_tok_s", r.prefill_tok_s},
                           {"decode_ms_per_step", r.decode_ms_per_step},
                           {"decode_tok_s", r.decode_tok_s}});
    std::ofstream(o.json) << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace

Runner add_bench_batch_command(CLI::App& app) {
  auto o = std::make_shared<BenchBatchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench-batch", "batch engine throughput: B slots prefill, then decode together (no HTTP)");
  o->model.add_to(*sub, 0);
  sub->remove_option(sub->get_option("--ctx"));  // prompt + gen + 1 per slot
  sub->add_option("--batch", o->batch, "batch sizes (slots), comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 512));
  sub->add_option("--prompt", o->prompt, "prompt tokens per slot")
      ->capture_default_str()
      ->check(CLI::Range(1, 512));
  sub->add_option("--gen", o->gen, "decode steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--reps", o->reps, "repetitions (the best is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--json", o->json, "also write the results as JSON");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
