// The decode attention kernels against their scalar twins: head sizes that
// are and are not multiples of 8 (including the register paths 64 and 128),
// GQA group sizes 1, 3 and 8, ranges that are empty, one key, not a multiple
// of the block of 32, and split into parts that are merged; a prompt's
// causal rows in tiles against the same rows one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
#include "core/half.h"
#include "isa_util.h"

namespace {

namespace cpu = lr::cpu;
namespace ref = lr::cpu::ref;

std::vector<float> rand_vec(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

struct Case {
  int d, g, n_kv;
};

TEST(AttentionKernels, PartialAndMergeMatchReference) {
  for (Case cs : {Case{64, 3, 3}, Case{128, 1, 2}, Case{64, 8, 1}, Case{12, 3, 2}, Case{8, 1, 1},
                  Case{20, 2, 3}, Case{1, 1, 1}}) {
    for (int n : {1, 2, 31, 32, 33, 100, 577}) {
      SCOPED_TRACE(testing::Message() << "d=" << cs.d << " g=" << cs.g << " n=" << n);
      const int64_t stride = int64_t(cs.n_kv) * cs.d;  // K/V rows of all KV heads interleaved
      auto K = rand_vec(size_t(n) * size_t(stride), 1, 1.f);
      auto V = rand_vec(size_t(n) * size_t(stride), 2, 1.f);
      auto q = rand_vec(size_t(cs.g) * size_t(cs.d), 3, 2.f);  // large scores: the max matters
      const float scale = 1.f / std::sqrt(float(cs.d));
      const int kvh = cs.n_kv - 1;
      const float* Kh = K.data() + kvh * cs.d;
      const float* Vh = V.data() + kvh * cs.d;
      // Whole range in one part.
      std::vector<float> m(size_t(cs.g)), l(size_t(cs.g)), acc(size_t(cs.g) * cs.d);
      std::vector<float> rm(m), rl(l), racc(acc);
      cpu::attend_partial(q.data(), cs.g, cs.d, Kh, Vh, stride, 0, n, scale, m.data(), l.data(), acc.data());
      ref::attend_partial(q.data(), cs.g, cs.d, Kh, Vh, stride, 0, n, scale, rm.data(), rl.data(), racc.data());
      EXPECT_LT(max_rel(m, rm), 1e-5);
      EXPECT_LT(max_rel(l, rl), 1e-4);
      EXPECT_LT(max_rel(acc, racc), 1e-4);
      // Three parts (the middle one empty) merged equal the whole.
      const int64_t cut[4] = {0, n / 3, n / 3, n};
      const int P = 3;
      std::vector<float> pm(size_t(P * cs.g)), pl(size_t(P * cs.g)), pacc(size_t(P * cs.g * cs.d));
      for (int p = 0; p < P; ++p)
        cpu::attend_partial(q.data(), cs.g, cs.d, Kh, Vh, stride, cut[p], cut[p + 1],
                            scale, &pm[size_t(p * cs.g)], &pl[size_t(p * cs.g)],
                            &pacc[size_t(p * cs.g * cs.d)]);
      for (int h = 0; h < cs.g; ++h) {
        std::vector<float> out(size_t(cs.d)), rout(size_t(cs.d)), whole(size_t(cs.d));
        cpu::attend_merge(P, &pm[size_t(h)], &pl[size_t(h)], cs.g, &pacc[size_t(h * cs.d)],
                          int64_t(cs.g) * cs.d, cs.d, out.data());
        ref::attend_merge(P, &pm[size_t(h)], &pl[size_t(h)], cs.g, &pacc[size_t(h * cs.d)],
                          int64_t(cs.g) * cs.d, cs.d, rout.data());
        for (int i = 0; i < cs.d; ++i) whole[size_t(i)] = racc[size_t(h * cs.d + i)] / rl[size_t(h)];
        EXPECT_LT(max_rel(out, rout), 1e-5);
        EXPECT_LT(max_rel(out, whole), 1e-4);
      }
    }
  }
}

TEST(AttentionKernels, EmptyRangeIsNeutral) {
  std::vector<float> q(64, 1.f), K(64, 1.f), V(64, 1.f);
  float m = 0, l = 5;
  std::vector<float> acc(64, 7.f);
  cpu::attend_partial(q.data(), 1, 64, K.data(), V.data(), 64, 3, 3, 0.125f, &m, &l, acc.data());
  EXPECT_TRUE(std::isinf(m) && m < 0);
  EXPECT_EQ(l, 0.f);
  for (float a : acc) EXPECT_EQ(a, 0.f);
  // Merging only empty parts gives zeros, not NaN.
  std::vector<float> out(64, 3.f);
  cpu::attend_merge(1, &m, &l, 1, acc.data(), 64, 64, out.data());
  for (float o : out) EXPECT_EQ(o, 0.f);
}

TEST(AttentionKernels, OneKeyReturnsItsValue) {
  auto q = rand_vec(64, 5, 1.f), K = rand_vec(64, 6, 1.f), V = rand_vec(64, 7, 1.f);
  float m, l;
  std::vector<float> acc(64), out(64);
  cpu::attend_partial(q.data(), 1, 64, K.data(), V.data(), 64, 0, 1, 0.125f, &m, &l, acc.data());
  EXPECT_FLOAT_EQ(l, 1.f);
  cpu::attend_merge(1, &m, &l, 1, acc.data(), 64, 64, out.data());
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(out[size_t(i)], V[size_t(i)]);
}

// attend_causal gives every row the bits attend_partial gives it alone:
// tiles of rows over whole blocks, the diagonal row by row, head sizes on
// and off the tiled path (not a multiple of 8), groups larger than a tile,
// prompts starting inside and at the edge of a block, more rows than a tile;
// on every instruction-set path of the host. f16 rows give the bits of f32
// rows holding their values.
TEST(AttentionKernels, CausalRowsAreEachRowsOwnBits) {
  struct C {
    int d, g;
  };
  for (lr::Isa isa : lr::test::supported_isas()) {
    SCOPED_TRACE(lr::isa_name(isa));
    lr::test::IsaScope scope(isa);
    for (C cs :
         {C{64, 7}, C{128, 6}, C{64, 1}, C{24, 3}, C{96, 4}, C{112, 2}, C{12, 2}, C{16, 100}}) {
      for (int64_t n0 : {1, 5, 32, 33, 70}) {
        for (int n : {1, 7, 40}) {
          SCOPED_TRACE(testing::Message()
                       << "d=" << cs.d << " g=" << cs.g << " n0=" << n0 << " n=" << n);
          const int64_t keys = n0 + n - 1, stride = 2 * cs.d;  // another KV head between rows
          auto K = rand_vec(size_t(keys * stride), 11, 1.f);
          auto V = rand_vec(size_t(keys * stride), 12, 1.f);
          const int64_t q_stride = int64_t(cs.g) * cs.d + 8, ml = cs.g + 3;  // padded rows
          auto q = rand_vec(size_t(n * q_stride), 13, 2.f);
          const float scale = 1.f / std::sqrt(float(cs.d));
          std::vector<float> m(size_t(n * ml), 9.f), l(m), acc(size_t(n * ml * cs.d), 9.f);
          cpu::attend_causal(q.data(), q_stride, n, n0, cs.g, cs.d, K.data(), V.data(), stride,
                             scale, m.data(), l.data(), acc.data(), ml);
          for (int t = 0; t < n; ++t) {
            std::vector<float> rm(size_t(cs.g)), rl(rm), racc(size_t(cs.g * cs.d));
            std::vector<float> sm(rm), sl(rm), sacc(racc);
            cpu::attend_partial(q.data() + t * q_stride, cs.g, cs.d, K.data(), V.data(), stride, 0,
                                n0 + t, scale, rm.data(), rl.data(), racc.data());
            ref::attend_partial(q.data() + t * q_stride, cs.g, cs.d, K.data(), V.data(), stride, 0,
                                n0 + t, scale, sm.data(), sl.data(), sacc.data());
            const size_t at = size_t(t * ml);
            EXPECT_EQ(0, std::memcmp(&m[at], rm.data(), rm.size() * 4)) << "row " << t;
            EXPECT_EQ(0, std::memcmp(&l[at], rl.data(), rl.size() * 4)) << "row " << t;
            EXPECT_EQ(0, std::memcmp(&acc[at * size_t(cs.d)], racc.data(), racc.size() * 4))
                << "row " << t;
            EXPECT_LT(max_rel(rl, sl), 1e-4);
            EXPECT_LT(max_rel(racc, sacc), 1e-4);
            // The padding between rows is left alone.
            for (int64_t h = cs.g; h < ml && t + 1 < n; ++h) EXPECT_EQ(m[size_t(at + h)], 9.f);
          }
          // f16 keys and values (the default cache): the bits of f32 rows
          // holding the same values.
          std::vector<uint16_t> Kh(K.size()), Vh(V.size());
          lr::f32_to_f16_row(K.data(), Kh.data(), int64_t(K.size()));
          lr::f32_to_f16_row(V.data(), Vh.data(), int64_t(V.size()));
          lr::f16_to_f32_row(Kh.data(), K.data(), int64_t(K.size()));
          lr::f16_to_f32_row(Vh.data(), V.data(), int64_t(V.size()));
          std::vector<float> hm(m.size(), 9.f), hl(hm), hacc(acc.size(), 9.f);
          cpu::attend_causal(q.data(), q_stride, n, n0, cs.g, cs.d, Kh.data(), Vh.data(), stride,
                             scale, hm.data(), hl.data(), hacc.data(), ml);
          cpu::attend_causal(q.data(), q_stride, n, n0, cs.g, cs.d, K.data(), V.data(), stride,
                             scale, m.data(), l.data(), acc.data(), ml);
          EXPECT_EQ(0, std::memcmp(hm.data(), m.data(), m.size() * 4));
          EXPECT_EQ(0, std::memcmp(hl.data(), l.data(), l.size() * 4));
          EXPECT_EQ(0, std::memcmp(hacc.data(), acc.data(), acc.size() * 4));
        }
      }
    }
  }
}

}  // namespace
