// The bench harness of `lowrank bench`: every mode of the decode ablation
// (rungs.cpp) measured side by side in one process, interleaved and
// repeated, medians reported.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {

// One rung of the ablation ladder: which model (the dense one or the
// low-rank one) and how decode executes.
struct BenchMode {
  std::string name;
  bool dense_model = false;
  ExecOptions exec;
  const char* what = "";
  // The k-* and kv-* modes: the fastest execution with this key type, and
  // the kv-* modes' value type (else f16 beside typed keys).
  kv::KeyType keys = kv::KeyType::F32;
  std::optional<kv::ValueType> values{};
  bool typed() const { return keys != kv::KeyType::F32 || values; }
};

// dense, naive, legacy, densekv, packed, fused, per-layer, per-token, and
// k-f16, k-q8_0, k-q4_0, k-kivi2, k-svdq (per-token with that key cache,
// f16 values), kv-q8_0, kv-q4_0, kv-q8_0-rot, kv-q4_0-rot (keys and values
// of the type); those not part of "all".
const std::vector<BenchMode>& bench_modes();
// "all" or a comma-separated list of mode names; throws lr::Error naming an
// unknown one and the accepted names.
std::vector<BenchMode> parse_bench_modes(const std::string& list);
// "custom": a rung of one's own (bench --kv, --unit, --no-pack, --no-fuse), spinning workers.
BenchMode custom_mode(KvMode kv, ExecUnit unit, bool packed, bool fused);
// "static" | "dense" | "legacy" and "per-op" | "per-layer" | "per-token";
// throw lr::Error naming the accepted values.
KvMode parse_kv_mode(const std::string& name);
ExecUnit parse_exec_unit(const std::string& name);

struct BenchShape {
  int prompt = 512;
  int gen = 32;
};

struct BenchOptions {
  int threads = 2;
  int reps = 3;
  std::vector<BenchShape> shapes = {{512, 32}};
  std::vector<BenchMode> modes;
  uint64_t seed = 1234;
  double read_bw_gbs = 0;  // the machine's measured read bandwidth (for % of it), 0: unknown
  kv::KeyCacheConfig keys;  // SVDq / KIVI settings of the k-* modes
  ExecPath path = ExecPath::Fast;  // Fast (CPU) or Cuda: where every mode runs
};

struct BenchRow {
  int run = 0;           // which run_bench call (low-rank model) produced it
  std::string model;     // file of the model the mode ran on
  double keep = 1.0;     // lowrank.keep of that file (1 = dense)
  std::string mode;
  int prompt = 0, gen = 0;
  double prefill_ms = 0;        // medians over the repetitions
  double decode_ms = 0;         // per token
  double e2e_s = 0;             // prefill + gen decode steps
  double tok_s = 0;             // decode tokens per second
  double dispatches = 0, barriers = 0;  // per decode token (CUDA: host launches; no barriers)
  double kernels = 0;           // CUDA: kernels run per decode token (launched or graph nodes)
  double weight_mb = 0;         // weight bytes read per decode token (MB = 1e6 bytes)
  double kv_mb = 0;             // cache bytes read per decode token, averaged over the run
  double gbs = 0;               // (weight + cache bytes) per token / decode time
  double pct_bw = 0;            // gbs / the measured read bandwidth, percent
  double cache_mb = 0;          // KV cache allocated by the session (prompt + gen + 1 positions)
  double key_mb = 0;            // of which keys (the k-* modes: codes, scales, window, basis)
  double key_bits = 0;          // k-* modes: true bits per key element held at the end
  double peak_rss_mb = 0;       // process peak RSS after this mode's runs (monotone)
};

using BenchProgress = std::function<void(const std::string& what)>;

// Runs every mode of `opt.modes` at every shape: `lowrank_model` for the
// low-rank modes, `dense_model` (may be null when no dense mode is asked for)
// for the dense ones. Random token ids (fixed seed), greedy argmax feedback.
std::vector<BenchRow> run_bench(const Model& lowrank_model, const Model* dense_model,
                                const BenchOptions& opt, const BenchProgress& progress = {});

// Read bandwidth of this machine in GB/s: `threads` threads summing a buffer
// much larger than the caches, best of several passes.
double measure_read_bandwidth(int threads, size_t bytes = size_t(1) << 30);

// Cache bytes one decode step at position `pos` reads, with `elem_bytes` per
// cached element (the CPU's f32 cache: 4; the GPU's f16 cache: 2).
uint64_t decode_cache_bytes(const Weights& w, KvMode kv, int pos, int elem_bytes = 4);

}  // namespace lr
