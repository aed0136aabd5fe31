// Decode attention over the compressed key caches (kv/attend_keys.h) at the
// SmolLM2-135M shape: one KV head, its 3 query heads, head_dim 64, f16
// values, n cached positions of keys with a decaying spectrum. "cold" runs
// over 90 separate streams in turn (a whole token's layers x KV heads), so
// the keys and values come from memory, not cache. Counters: key bytes held
// per position and bytes of K and V read per second.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/key_kernels.h"
#include "core/half.h"

namespace {

using namespace lr;

std::vector<float> decaying_keys(int64_t n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> k(size_t(n) * size_t(d));
  for (int64_t t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) k[size_t(t) * size_t(d) + size_t(i)] = N(rng) * std::exp(-0.05f * float(i)) * 4.f;
  return k;
}

struct Streams {
  std::vector<std::unique_ptr<kv::KeyStream>> ks;
  std::vector<std::vector<uint8_t>> v;  // value rows of `vf`
  kv::RowFormat vf;
  int d = 64;
  kv::Rows values(int i) const { return {v[size_t(i)].data(), vf, kv::row_bytes(vf.type, d)}; }
};

Streams make(kv::KeyType t, int64_t n, int count, kv::ValueType vt = kv::ValueType::F16,
             int d = 64) {
  Streams s;
  s.d = d;
  kv::KeyCacheConfig c;
  c.type = t;
  const auto k = decaying_keys(n, d, 1);
  s.vf = kv::value_row_format(vt, d);
  const uint64_t rb = kv::row_bytes(s.vf.type, d);
  std::vector<uint8_t> v(size_t(n) * rb);
  std::mt19937 rng(2);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t j = 0; j < n; ++j) {
    for (float& x : row) x = N(rng);
    kv::encode_row(s.vf, row.data(), d, &v[size_t(j) * rb]);
  }
  for (int i = 0; i < count; ++i) {
    s.ks.push_back(std::make_unique<kv::KeyStream>(c, d, n));
    s.ks.back()->append(k.data(), n, d);
    s.v.push_back(v);
  }
  return s;
}

void run(benchmark::State& st, kv::KeyType t, int count) {
  const int64_t n = st.range(0);
  const int d = 64, g = 3;
  const auto vt = kv::ValueType(st.range(2));
  Streams s = make(t, n, count, vt);
  std::vector<float> q(size_t(g) * d), m(g), l(g), acc(size_t(g) * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  int at = 0;
  for (auto _ : st) {
    cpu::attend_keys_partial(*s.ks[size_t(at)], s.values(at), q.data(), g, 0, n, 0.125f, m.data(),
                             l.data(), acc.data());
    benchmark::DoNotOptimize(acc.data());
    at = (at + 1) % count;
  }
  const double key_bytes = double(s.ks[0]->held().codes + s.ks[0]->held().scales);
  st.counters["key_B_per_pos"] = key_bytes / double(n);
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(key_bytes + double(s.v[0].size())));
}

// The scoring half alone (prepare + scores over all positions), hot.
void BM_key_scores_hot(benchmark::State& st) {
  const int64_t n = st.range(0);
  const int g = 3;
  Streams s = make(kv::KeyType(st.range(1)), n, 1);
  const kv::KeyStream& ks = *s.ks[0];
  std::vector<float> q(size_t(g) * 64), prep(size_t(g) * size_t(cpu::key_prep_floats(ks))), sc(size_t(g) * size_t(n));
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  for (auto _ : st) {
    cpu::prepare_queries(ks, q.data(), g, 0.125f, prep.data());
    if (ks.type() == kv::KeyType::Svdq || ks.type() == kv::KeyType::Kivi2) {
      cpu::key_scores(ks, prep.data(), g, 0, n, sc.data(), n);
    } else {  // decoded tile by tile, as attend_keys_partial does
      std::vector<float> kt(32 * 64);
      for (int64_t j = 0; j < n; j += 32) ks.decode_rows(j, j + 32, kt.data());
    }
    benchmark::DoNotOptimize(sc.data());
  }
}
BENCHMARK(BM_key_scores_hot)->ArgsProduct({{8192}, {1, 5}});

void BM_attend_keys_hot(benchmark::State& st) { run(st, kv::KeyType(st.range(1)), 1); }
void BM_attend_keys_cold(benchmark::State& st) { run(st, kv::KeyType(st.range(1)), 90); }

// range(1): the keys, 0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 kivi2, 5 svdq, 6 q8_0-rot,
// 7 q4_0-rot (kv::KeyType); range(2): the values, 0 f32, 1 f16, 2 q8_0, 3 q4_0,
// 4 q8_0-rot, 5 q4_0-rot (kv::ValueType)
BENCHMARK(BM_attend_keys_hot)->ArgsProduct({{8192}, {1, 4, 5}, {1}});
BENCHMARK(BM_attend_keys_cold)->ArgsProduct({{4096, 8192}, {1, 2, 3, 4, 5, 6, 7}, {1}});
// Keys and values of one type (and f16 keys beside quantized values).
BENCHMARK(BM_attend_keys_cold)
    ->Args({8192, 0, 0})
    ->Args({8192, 2, 2})
    ->Args({8192, 3, 3})
    ->Args({8192, 6, 4})
    ->Args({8192, 7, 5})
    ->Args({8192, 1, 0})
    ->Args({8192, 1, 2})
    ->Args({8192, 1, 3});

// One decode row's attention at the group shapes of the real models (query
// heads per KV head g, head_dim d): SmolLM2 3 x 64, Qwen2.5-Coder-0.5B 7 x
// 64, -1.5B 6 x 128, Gemma 3 270M 4 x 256; keys and values (range 3) f32
// (0: the dense cache's rows, as attend_partial reads them), f16 (1), q8_0
// (2), q4_0 (3), or q8_0 keys beside f16 values (4), hot in cache; FLOP/s of
// the scores and weighted values.
void BM_attend_decode(benchmark::State& st) {
  const int64_t n = st.range(0);
  const int g = int(st.range(1)), d = int(st.range(2)), type = int(st.range(3));
  const kv::KeyType kt[] = {kv::KeyType::F16, kv::KeyType::F16, kv::KeyType::Q8_0,
                            kv::KeyType::Q4_0, kv::KeyType::Q8_0};
  const kv::ValueType vt[] = {kv::ValueType::F16, kv::ValueType::F16, kv::ValueType::Q8_0,
                              kv::ValueType::Q4_0, kv::ValueType::F16};
  Streams s = make(kt[type], n, 1, vt[type], d);
  const auto K = decaying_keys(n, d, 1), V = decaying_keys(n, d, 2);
  std::vector<float> q(size_t(g) * size_t(d)), m(static_cast<size_t>(g)), l(m), acc(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  for (auto _ : st) {
    if (type > 0)
      cpu::attend_keys_partial(*s.ks[0], s.values(0), q.data(), g, 0, n, 0.0625f, m.data(),
                               l.data(), acc.data());
    else
      cpu::attend_partial(q.data(), g, d, K.data(), V.data(), d, 0, n, 0.0625f, m.data(), l.data(),
                          acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * g * d * double(n) * double(st.iterations()),
                                             benchmark::Counter::kIsRate);
}
BENCHMARK(BM_attend_decode)->ArgsProduct({{2048}, {3, 7}, {64}, {0, 1, 2, 3, 4}});
// A prompt chunk's 64 rows over 4096 positions of history (a staged
// prompt's later call, or a batch slot's chunk), q8_0 keys and values:
// row by row (range 2: 0) or in tiles of rows (1: attend_keys_rows).
void BM_attend_rows(benchmark::State& st) {
  const int64_t n = st.range(0);
  const int g = int(st.range(1)), d = int(st.range(2)), rows = 64;
  Streams s = make(kv::KeyType::Q8_0, n, 1, kv::ValueType::Q8_0, d);
  std::vector<float> q(size_t(rows) * size_t(g) * size_t(d)), m(size_t(rows) * size_t(g)), l(m),
      acc(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(float(i));
  const int64_t qs = int64_t(g) * d;
  for (auto _ : st) {
    if (st.range(3))
      cpu::attend_keys_rows(*s.ks[0], s.values(0), q.data(), qs, rows, g, n, false, 0.0625f,
                            m.data(), l.data(), acc.data(), g);
    else
      for (int t = 0; t < rows; ++t)
        cpu::attend_keys_partial(*s.ks[0], s.values(0), q.data() + t * qs, g, 0, n, 0.0625f,
                                 &m[size_t(t * g)], &l[size_t(t * g)],
                                 &acc[size_t(t) * size_t(qs)]);
    benchmark::DoNotOptimize(acc.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(
      4.0 * rows * g * d * double(n) * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_attend_rows)->ArgsProduct({{4096}, {7}, {64}, {0, 1}});
BENCHMARK(BM_attend_rows)->ArgsProduct({{4096}, {6}, {128}, {0, 1}});

BENCHMARK(BM_attend_decode)->ArgsProduct({{2048}, {6}, {128}, {0, 1, 2, 3, 4}});
BENCHMARK(BM_attend_decode)->ArgsProduct({{2048}, {4}, {256}, {0, 1, 2, 3, 4}});

}  // namespace
