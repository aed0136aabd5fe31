// The CPU's scoring kernels over compressed key streams
// (backend/cpu/key_kernels.h) against their scalar twins: reconstruct-then-dot
// and kv::attend_keys_reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "../kv/kv_test_util.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/key_kernels.h"
#include "backend/cpu/kernels/quant_scores.h"
#include "isa_util.h"
#include "kv/attend_keys.h"
#include "kv/key_stream.h"

namespace lr::kv {
namespace {

using test::of;
using test::svdq_cfg;

constexpr KeyType kEveryKeyType[] = {KeyType::F32,   KeyType::F16,     KeyType::Q8_0,
                                     KeyType::Q4_0,  KeyType::Q8_0Rot, KeyType::Q4_0Rot,
                                     KeyType::Kivi2, KeyType::Svdq};

// n value rows of type t (normal values), encoded.
struct Values {
  std::vector<uint8_t> bytes;
  Rows rows;
};
Values values(ValueType t, int64_t n, int d, uint32_t seed) {
  Values v;
  const RowFormat f = value_row_format(t, d);
  const uint64_t rb = row_bytes(f.type, d);
  v.bytes.resize(size_t(n) * rb);
  const std::vector<float> x = test::normal(size_t(n) * size_t(d), seed);
  for (int64_t j = 0; j < n; ++j)
    encode_row(f, &x[size_t(j) * size_t(d)], d, &v.bytes[size_t(j) * rb]);
  v.rows = {v.bytes.data(), f, rb};
  return v;
}

// Latent scores vs reconstruct-then-dot, every type, GQA 1, 3 and 8.
TEST(KeyStream, ScoresEqualReconstructThenDot) {
  const int d = 64, n = 150;
  auto k = test::lowrank_keys(n, d, 48, 0.04, 0.01, 9);
  for (KeyType t : kEveryKeyType) {
    KeyCacheConfig c = of(t);
    KeyStream s(c, d, 256);
    s.append(k.data(), n, d);
    for (int g : {1, 3, 8}) {
      auto q = test::normal(size_t(g) * d, 40 + g);
      std::vector<float> prep(size_t(g) * size_t(cpu::key_prep_floats(s))), sc(size_t(g) * n);
      cpu::prepare_queries(s, q.data(), g, 0.125f, prep.data());
      cpu::key_scores(s, prep.data(), g, 0, n, sc.data(), n);
      std::vector<float> r(static_cast<size_t>(d));
      double worst = 0;
      for (int64_t j = 0; j < n; ++j) {
        s.reconstruct(j, r.data());
        for (int h = 0; h < g; ++h) {
          double dot = 0, mag = 0;
          for (int i = 0; i < d; ++i) {
            dot += double(q[size_t(h * d + i)]) * r[size_t(i)];
            mag += std::fabs(double(q[size_t(h * d + i)]) * r[size_t(i)]);
          }
          worst = std::max(
              worst, std::fabs(sc[size_t(h) * n + size_t(j)] - 0.125 * dot) / (0.125 * mag + 1e-6));
        }
      }
      EXPECT_LT(worst, 1e-4) << key_type_name(t) << " g=" << g;
    }
    // A sub-range that starts and ends inside blocks gives the same values.
    auto q = test::normal(size_t(3) * d, 77);
    std::vector<float> prep(size_t(3) * size_t(cpu::key_prep_floats(s))), all(3 * n), part(3 * 70);
    cpu::prepare_queries(s, q.data(), 3, 1.f, prep.data());
    cpu::key_scores(s, prep.data(), 3, 0, n, all.data(), n);
    cpu::key_scores(s, prep.data(), 3, 45, 115, part.data(), 70);
    for (int h = 0; h < 3; ++h)
      for (int j = 0; j < 70; ++j) EXPECT_EQ(part[size_t(h * 70 + j)], all[size_t(h * n + 45 + j)]);
  }
}

TEST(KeyStream, DroppingTheMeanTermBreaksMixedSoftmaxes) {
  // q.mean is a constant over latent tokens (softmax cancels it) but not over
  // latent + window tokens: scores() must include it.
  const int d = 64, n = 100;
  auto k = test::lowrank_keys(n, d, 40, 0.05, 0.01, 12, 3.0f);  // a large mean
  KeyStream s(svdq_cfg(), d, 128);
  s.append(k.data(), n, d);
  ASSERT_GT(s.size(), s.compressed());  // some window tokens
  auto q = test::normal(size_t(d), 13);
  std::vector<float> prep(size_t(cpu::key_prep_floats(s))), sc(static_cast<size_t>(n));
  cpu::prepare_queries(s, q.data(), 1, 1.f, prep.data());
  cpu::key_scores(s, prep.data(), 1, 0, n, sc.data(), n);
  std::vector<float> r(static_cast<size_t>(d));
  s.reconstruct(0, r.data());
  double dot = 0;
  for (int i = 0; i < d; ++i) dot += double(q[size_t(i)]) * r[size_t(i)];
  EXPECT_NEAR(sc[0], dot, 1e-3 * (1 + std::fabs(dot)));
  const double qmean = prep[size_t(d) + size_t(s.channels())];
  EXPECT_GT(std::fabs(qmean), 1.0);  // the term is large here
}

// Every key type with f16 values, and the f16 keys with every value type
// (rotated ones summed rotated, then rotated back), head_dim 64 and 128.
TEST(AttendKeys, KernelMatchesReferenceForEveryType) {
  const int n = 203;
  std::vector<std::pair<KeyType, ValueType>> kinds;
  for (KeyType t : kEveryKeyType) kinds.emplace_back(t, ValueType::F16);
  for (ValueType v :
       {ValueType::F32, ValueType::Q8_0, ValueType::Q4_0, ValueType::Q8_0Rot, ValueType::Q4_0Rot})
    kinds.emplace_back(KeyType::Q8_0Rot, v);
  for (int d : {64, 128})
    for (auto [t, vt] : kinds) {
      if (d == 128 && t != KeyType::Q4_0Rot && vt == ValueType::F16) continue;
      auto k = test::lowrank_keys(n, d, 48, 0.04, 0.01, 14);
      const Values V = values(vt, n, d, 15);
      KeyStream s(of(t), d, 256);
      s.append(k.data(), n, d);
      for (int g : {1, 3, 8}) {
        auto q = test::normal(size_t(g) * size_t(d), 16 + g);
        for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, n}, {32, 96}, {17, 190}, {192, 203}}) {
          std::vector<float> m(static_cast<size_t>(g)), l(static_cast<size_t>(g)),
              acc(size_t(g) * size_t(d)), ref(size_t(g) * size_t(d));
          cpu::attend_keys_partial(s, V.rows, q.data(), g, j0, j1, 0.125f, m.data(), l.data(),
                                   acc.data());
          attend_keys_reference(s, V.rows, q.data(), g, j0, j1, 0.125f, ref.data());
          for (int h = 0; h < g; ++h)
            for (int i = 0; i < d; ++i)
              EXPECT_NEAR(acc[size_t(h * d + i)] / l[size_t(h)], ref[size_t(h * d + i)], 2e-5)
                  << key_type_name(t) << " keys, " << value_type_name(vt) << " values, d=" << d
                  << " g=" << g << " [" << j0 << "," << j1 << ")";
        }
      }
    }
}

// What the kernels compute over q8_0 and q4_0 keys, from their scalar
// twins, block by block from j0 as attend_stored goes: scores in integers
// (cpu::ref::quant_scores on the query heads quantized once), then the f32
// kernel's softmax step over the values' f32 rows (attend_block's second half).
void quant_keys_partial(const KeyStream& ks, const float* q, int g, int d, const float* Vf,
                        int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  cpu::QuantQueries qq;
  qq.reset(g, d);
  for (int h = 0; h < g; ++h) qq.quantize(h, q + h * d);
  std::vector<float> s(size_t(g) * 32);
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
    std::fill_n(acc + h * d, d, 0.f);
  }
  const bool q8 = ks.rows().fmt.type == DType::Q8_0;
  for (int64_t jb = j0; jb < j1; jb += 32) {
    const int nb = int(std::min<int64_t>(32, j1 - jb));
    if (q8)
      cpu::ref::quant_scores(
          qq.rows(), g, d, reinterpret_cast<const cpu::Q8Block*>(ks.rows().row(jb)),
          int64_t(ks.rows().bytes / sizeof(cpu::Q8Block)), nb, scale, s.data(), 32);
    else
      cpu::ref::quant_scores(
          qq.rows(), g, d, reinterpret_cast<const cpu::Q4Block*>(ks.rows().row(jb)),
          int64_t(ks.rows().bytes / sizeof(cpu::Q4Block)), nb, scale, s.data(), 32);
    cpu::softmax_update(g, d, s.data(), 32, nb, Vf + jb * d, d, m, l, acc);
  }
}

// f16, q8_0 and q4_0 keys and values are read as stored by the dense
// kernels' tiles, converted in registers, on every kernel path the host has,
// over ranges that start and end inside 32-key blocks, for head sizes the
// tiles take (multiples of 8; of 32 for q8_0 and q4_0) and ones they do not
// (12), groups of 1 to 9 heads, every pair of those key and value types. f16
// keys: the bits attend_partial gives f32 rows holding the same values;
// q8_0 and q4_0 keys: the bits of quant_keys_partial (integer scores).
TEST(AttendKeys, StoredRowsGiveTheF32KernelsBits) {
  const int64_t n = 203;
  struct Types {
    KeyType k;
    ValueType v;
  };
  const Types types[] = {{KeyType::F16, ValueType::F16},   {KeyType::Q8_0, ValueType::F16},
                         {KeyType::Q4_0, ValueType::F16},  {KeyType::F16, ValueType::Q8_0},
                         {KeyType::Q8_0, ValueType::Q8_0}, {KeyType::Q4_0, ValueType::Q4_0},
                         {KeyType::Q8_0, ValueType::Q4_0}};
  for (Isa isa : lr::test::supported_isas()) {
    lr::test::IsaScope scope(isa);
    for (int d : {64, 128, 256, 96, 24, 12}) {
      for (Types t : types) {
        if (d % 32 != 0 && (t.k != KeyType::F16 || t.v != ValueType::F16)) continue;
        auto k = test::lowrank_keys(n, d, std::min(d, 48), 0.04, 0.01, 61);
        const Values V = values(t.v, n, d, 62);
        KeyCacheConfig c = of(t.k);
        c.value_type = t.v;
        KeyStream s(c, d, 256);
        s.append(k.data(), n, d);
        std::vector<float> K(size_t(n) * size_t(d)), Vf(K.size());
        s.decode_rows(0, n, K.data());
        for (int64_t j = 0; j < n; ++j)
          decode_row(V.rows.fmt.type, V.rows.row(j), d, &Vf[size_t(j) * size_t(d)]);
        for (int g : {1, 4, 7, 9}) {
          auto q = test::normal(size_t(g) * size_t(d), 63 + g);
          for (auto [j0, j1] :
               {std::pair<int64_t, int64_t>{0, n}, {32, 96}, {17, 190}, {192, 203}}) {
            const size_t G = size_t(g), A = G * size_t(d);
            std::vector<float> m(G), l(G), acc(A), rm(G), rl(G), racc(A);
            cpu::attend_keys_partial(s, V.rows, q.data(), g, j0, j1, 0.0625f, m.data(), l.data(),
                                     acc.data());
            if (t.k == KeyType::F16)
              cpu::attend_partial(q.data(), g, d, K.data(), Vf.data(), d, j0, j1, 0.0625f,
                                  rm.data(), rl.data(), racc.data());
            else
              quant_keys_partial(s, q.data(), g, d, Vf.data(), j0, j1, 0.0625f, rm.data(),
                                 rl.data(), racc.data());
            const std::string at = std::string(isa_name(isa)) + " " + key_type_name(t.k) + "/" +
                                   value_type_name(t.v) + " d=" + std::to_string(d) +
                                   " g=" + std::to_string(g) + " [" + std::to_string(j0) + "," +
                                   std::to_string(j1) + ")";
            EXPECT_EQ(0, std::memcmp(m.data(), rm.data(), G * sizeof(float))) << at;
            EXPECT_EQ(0, std::memcmp(l.data(), rl.data(), G * sizeof(float))) << at;
            EXPECT_EQ(0, std::memcmp(acc.data(), racc.data(), A * sizeof(float))) << at;
          }
        }
      }
    }
  }
}

// Blocks shorter than the kernel's 32-position tile: a tile ends inside the
// window (SVDq blocks of 16, KIVI blocks of 8 with a window of 64).
TEST(AttendKeys, ShortBlocksMatchReference) {
  const int d = 64, n = 180;
  auto k = test::lowrank_keys(n, d, 48, 0.04, 0.01, 51);
  const Values V = values(ValueType::F16, n, d, 52);
  KeyCacheConfig sv;
  sv.type = KeyType::Svdq;
  sv.svdq.group_size = 16;
  KeyCacheConfig ki;
  ki.type = KeyType::Kivi2;
  ki.kivi_group = 8;
  ki.kivi_window = 24;  // whole windows: 168 of the 180 keys in blocks
  for (const KeyCacheConfig& c : {sv, ki}) {
    KeyStream s(c, d, 256);
    s.append(k.data(), n, d);
    ASSERT_GT(s.size(), s.compressed());
    ASSERT_NE(s.compressed() % 32, 0);
    auto q = test::normal(size_t(3) * d, 53);
    std::vector<float> m(3), l(3), acc(size_t(3) * d), ref(size_t(3) * d);
    cpu::attend_keys_partial(s, V.rows, q.data(), 3, 0, n, 0.125f, m.data(), l.data(), acc.data());
    attend_keys_reference(s, V.rows, q.data(), 3, 0, n, 0.125f, ref.data());
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < d; ++i)
        EXPECT_NEAR(acc[size_t(h * d + i)] / l[size_t(h)], ref[size_t(h * d + i)], 2e-5)
            << key_type_name(c.type);
  }
}

}  // namespace
}  // namespace lr::kv
