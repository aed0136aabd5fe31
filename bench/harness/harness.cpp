#include "bench/harness/harness.h"

#include <immintrin.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"

namespace lr {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

double keep_of(const Model& m) {
  return m.file ? m.file->get_float("lowrank.keep", 1.0) : 1.0;
}

struct Sample {
  double prefill_ms, decode_ms, dispatches, barriers, kernels, cache_mb, key_mb, key_bits, kv_read_mb;
};

// One timed run: prefill `prompt` random tokens, then `gen` single-token steps.
Sample run_once(const Model& m, const BenchMode& mode, const BenchShape& sh, int threads,
                uint64_t seed, const kv::KeyCacheConfig& keys, ExecPath path) {
  BackendOptions o;
  o.ctx = sh.prompt + sh.gen + 1;
  o.cpu.n_threads = threads;
  o.exec = mode.exec;
  o.keys = keys;
  o.keys.type = mode.keys;
  o.keys.value_type = mode.values;
  auto b = make_session(m, path, o);
  const int vocab = m.weights->cfg.vocab;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(1, vocab - 1);
  std::vector<int32_t> prompt(size_t(sh.prompt));
  for (int32_t& t : prompt) t = tok(rng);
  std::vector<float> logits(static_cast<size_t>(vocab));
  auto t0 = Clock::now();
  b->forward(prompt.data(), sh.prompt, logits.data(), false);
  Sample s{};
  s.prefill_ms = ms_since(t0);
  b->reset_counters();
  t0 = Clock::now();
  for (int i = 0; i < sh.gen; ++i) {
    int32_t next = argmax(logits);
    b->forward(&next, 1, logits.data(), false);
  }
  s.decode_ms = ms_since(t0) / std::max(1, sh.gen);
  const ExecCounters c = b->counters();
  s.dispatches = double(c.dispatches) / std::max(1, sh.gen);
  s.barriers = double(c.barriers) / std::max(1, sh.gen);
  s.kernels = double(c.kernels) / std::max(1, sh.gen);
  s.cache_mb = double(b->cache_bytes()) / 1e6;
  const KeyCacheStats ks = b->key_stats();
  const Config& cfg = m.weights->cfg;
  if (!mode.typed()) {
    s.key_mb = s.cache_mb / 2;
    s.key_bits = 32;
  } else {
    s.key_mb = double(ks.allocated.total()) / 1e6;
    s.key_bits = ks.true_bits();
    // Bytes the last step read: the keys held and the values of every cached position.
    const double value_row =
        double(kv::row_bytes(kv::value_row_format(ks.value_type, cfg.head_dim).type, cfg.head_dim));
    s.kv_read_mb =
        (double(ks.held.total()) + double(ks.tokens) * cfg.n_kv_heads * cfg.n_layers * value_row) /
        1e6;
  }
  return s;
}

}  // namespace

uint64_t decode_cache_bytes(const Weights& w, KvMode kv, int pos, int elem_bytes) {
  const Config& c = w.cfg;
  const uint64_t n = uint64_t(pos) + 1, e = uint64_t(elem_bytes);
  if (kv != KvMode::Legacy) return 2 * n * uint64_t(c.kv_dim()) * e * uint64_t(c.n_layers);
  uint64_t b = 0;  // latents read; the rebuilt f32 history is written and read again
  for (const Layer& l : w.layers)
    b += n * (uint64_t(l.k.rank() + l.v.rank()) * e + 2 * 2 * uint64_t(c.kv_dim()) * sizeof(float));
  return b;
}

std::vector<BenchRow> run_bench(const Model& lowrank_model, const Model* dense_model,
                                const BenchOptions& opt, const BenchProgress& progress) {
  if (opt.modes.empty()) fail("bench: no modes to run");
  if (opt.reps < 1) fail("bench: --reps must be at least 1 (got {})", opt.reps);
  for (const BenchShape& s : opt.shapes)
    if (s.prompt < 1 || s.gen < 1) fail("bench: prompt and gen lengths must be at least 1 (got {}/{})", s.prompt, s.gen);
  auto model_of = [&](const BenchMode& m) -> const Model& {
    if (m.dense_model && !dense_model) fail("bench: mode '{}' needs the dense model (--dense)", m.name);
    return m.dense_model ? *dense_model : lowrank_model;
  };
  for (const BenchMode& m : opt.modes) model_of(m);

  // Warm-up: every mode once on a short run (pages in weights, spins up threads).
  for (const BenchMode& m : opt.modes) {
    if (progress) progress("warm-up " + m.name);
    run_once(model_of(m), m, {std::max(16, opt.keys.svdq.min_fit_tokens), 4}, opt.threads, opt.seed, opt.keys, opt.path);
  }
  std::vector<BenchRow> rows;
  for (const BenchShape& sh : opt.shapes) {
    std::map<std::string, std::vector<Sample>> samples;
    std::map<std::string, double> rss;
    for (int rep = 0; rep < opt.reps; ++rep)
      for (const BenchMode& m : opt.modes) {  // interleaved: noise hits every mode alike
        if (progress)
          progress(fmt::format("{}/{} rep {}/{} {}", sh.prompt, sh.gen, rep + 1, opt.reps, m.name));
        samples[m.name].push_back(run_once(model_of(m), m, sh, opt.threads, opt.seed + uint64_t(rep), opt.keys, opt.path));
        rss[m.name] = peak_rss_mb();
      }
    for (const BenchMode& m : opt.modes) {
      const Model& model = model_of(m);
      const auto& ss = samples[m.name];
      auto med = [&](double Sample::*f) {
        std::vector<double> v;
        for (const Sample& s : ss) v.push_back(s.*f);
        return median(v);
      };
      BenchRow r;
      r.model = model.path;
      r.keep = keep_of(model);
      r.mode = m.name;
      r.prompt = sh.prompt;
      r.gen = sh.gen;
      r.prefill_ms = med(&Sample::prefill_ms);
      r.decode_ms = med(&Sample::decode_ms);
      r.e2e_s = (r.prefill_ms + r.decode_ms * sh.gen) / 1000.0;
      r.tok_s = 1000.0 / r.decode_ms;
      r.dispatches = med(&Sample::dispatches);
      r.barriers = med(&Sample::barriers);
      r.kernels = med(&Sample::kernels);
      r.weight_mb = double(model.weights->bytes_per_token()) / 1e6;
      double kv = 0;
      for (int i = 0; i < sh.gen; ++i) kv += double(decode_cache_bytes(*model.weights, m.exec.kv, sh.prompt + i,
                                                                  opt.path == ExecPath::Cuda ? 2 : 4));
      r.kv_mb = !m.typed() ? kv / sh.gen / 1e6 : med(&Sample::kv_read_mb);
      r.gbs = (r.weight_mb + r.kv_mb) / r.decode_ms;  // MB per ms = GB/s
      r.pct_bw = opt.read_bw_gbs > 0 ? 100.0 * r.gbs / opt.read_bw_gbs : 0;
      r.cache_mb = med(&Sample::cache_mb);
      r.key_mb = med(&Sample::key_mb);
      r.key_bits = med(&Sample::key_bits);
      r.peak_rss_mb = rss[m.name];
      rows.push_back(r);
    }
  }
  return rows;
}

double measure_read_bandwidth(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) throw std::bad_alloc();
  std::unique_ptr<float, decltype(&std::free)> own(buf, &std::free);
  ThreadPool pool(std::max(1, threads));
  pool.parallel_for(int64_t(n / 8), [&](int64_t b, int64_t e) {
    for (int64_t i = b * 8; i < e * 8; ++i) buf[i] = 1.0f;
  });
  std::vector<float> sink(size_t(pool.size()) * 16);
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    auto t0 = Clock::now();
    pool.run([&](int tid, int nth) {
      const int64_t blocks = int64_t(n / 32);
      const int64_t b = blocks * tid / nth, e = blocks * (tid + 1) / nth;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = b * 32; i < e * 32; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
      }
      _mm256_storeu_ps(&sink[size_t(tid) * 16], _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    });
    const double s = ms_since(t0) / 1000.0;
    best = std::max(best, double(n / 32 * 32) * sizeof(float) / s / 1e9);
  }
  if (sink[0] != sink[0]) fail("bandwidth probe: corrupt sum");  // keeps the loads
  return best;
}

}  // namespace lr
