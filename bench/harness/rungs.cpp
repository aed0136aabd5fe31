// The rungs of the decode ablation: each a way to derive the model's plan
// (model/plan_transforms.h) and to dispatch it. These research baselines
// live here, with the harness that measures them, and nowhere in the
// product's path: `run`, `perplexity` and `serve` execute the fastest plan.
#include <algorithm>

#include "bench/harness/harness.h"
#include "core/error.h"

namespace lr {

const std::vector<BenchMode>& bench_modes() {
  using K = KvMode;
  using U = ExecUnit;
  // The eager rungs (naive .. fused) launch op by op with sleeping workers:
  // every operation wakes the threads and joins them, as an eager framework's
  // op-by-op launches do. per-op-spin keeps the fused plan's op-by-op
  // dispatch but with spinning workers; per-layer and per-token run
  // persistent regions.
  static const std::vector<BenchMode> modes = {
      {"dense",
       true,
       {K::Dense, true, true, U::PerToken, true},
       "the dense model, fastest execution"},
      {"naive",
       false,
       {K::Static, false, false, U::PerOp, false},
       "eager low-rank: separate factor passes, unfused ops, op-by-op wake-and-join (HF "
       "StaticCache-like)"},
      {"legacy",
       false,
       {K::Legacy, false, false, U::PerOp, false},
       "latent K/V cache, whole history reconstructed every step (eager)"},
      {"densekv",
       false,
       {K::Dense, false, false, U::PerOp, false},
       "+ dense KV: current k/v reconstructed, roped, appended; one-pass attention"},
      {"packed",
       false,
       {K::Dense, true, false, U::PerOp, false},
       "+ packed q/k/v and gate/up input factors"},
      {"fused",
       false,
       {K::Dense, true, true, U::PerOp, false},
       "+ norm, SiLU*mul, residual, attention merge fused"},
      {"per-op-spin",
       false,
       {K::Dense, true, true, U::PerOp, true},
       "fused, op-by-op dispatch to spinning workers (no sleep between ops)"},
      {"per-layer",
       false,
       {K::Dense, true, true, U::PerLayer, true},
       "fused, one parallel region per layer"},
      {"per-token",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "fused, one parallel region per token"},
      {"k-f16",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, f16 keys and values",
       kv::KeyType::F16},
      {"k-q8_0",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, q8_0 keys, f16 values",
       kv::KeyType::Q8_0},
      {"k-q4_0",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, q4_0 keys, f16 values",
       kv::KeyType::Q4_0},
      {"k-kivi2",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, KIVI-2 keys, f16 values",
       kv::KeyType::Kivi2},
      {"k-svdq",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, SVDq keys, f16 values",
       kv::KeyType::Svdq},
      {"kv-q8_0",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, q8_0 keys and values",
       kv::KeyType::Q8_0,
       kv::ValueType::Q8_0},
      {"kv-q4_0",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, q4_0 keys and values",
       kv::KeyType::Q4_0,
       kv::ValueType::Q4_0},
      {"kv-q8_0-rot",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, rotated q8_0 keys and values",
       kv::KeyType::Q8_0Rot,
       kv::ValueType::Q8_0Rot},
      {"kv-q4_0-rot",
       false,
       {K::Dense, true, true, U::PerToken, true},
       "per-token, rotated q4_0 keys and values",
       kv::KeyType::Q4_0Rot,
       kv::ValueType::Q4_0Rot},
  };
  return modes;
}

std::vector<BenchMode> parse_bench_modes(const std::string& list) {
  if (list == "all") {  // the ablation ladder; the key-cache modes are asked for by name
    std::vector<BenchMode> out;
    for (const BenchMode& m : bench_modes())
      if (!m.typed()) out.push_back(m);
    return out;
  }
  std::vector<BenchMode> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    auto it = std::find_if(bench_modes().begin(), bench_modes().end(),
                           [&](const BenchMode& m) { return m.name == name; });
    if (it == bench_modes().end()) {
      std::string names;
      for (const BenchMode& m : bench_modes()) names += (names.empty() ? "" : ", ") + m.name;
      fail("unknown bench mode '{}' (expected all, or a comma-separated list of: {})", name, names);
    }
    out.push_back(*it);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

BenchMode custom_mode(KvMode kv, ExecUnit unit, bool packed, bool fused) {
  BenchMode m;
  m.name = "custom";
  m.exec = {kv, packed, fused, unit, true};
  m.what = "the rung of --kv, --unit, --no-pack, --no-fuse";
  return m;
}

KvMode parse_kv_mode(const std::string& name) {
  if (name == "static") return KvMode::Static;
  if (name == "dense") return KvMode::Dense;
  if (name == "legacy") return KvMode::Legacy;
  fail("unknown KV mode '{}' (expected static, dense or legacy)", name);
}

ExecUnit parse_exec_unit(const std::string& name) {
  if (name == "per-op") return ExecUnit::PerOp;
  if (name == "per-layer") return ExecUnit::PerLayer;
  if (name == "per-token") return ExecUnit::PerToken;
  fail("unknown execution unit '{}' (expected per-op, per-layer or per-token)", name);
}

}  // namespace lr
