// Dobi-SVD's remapped factors: bitsandbytes' dynamic code table, and the
// dequantization of a Python-written remapping_weight.pt fixture
// (scripts/make_torch_fixtures.py) whose values are worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/half.h"
#include "format/dobi_remap.h"
#include "format/torch_checkpoint.h"
#include "../error_of.h"

namespace lr {
namespace {

using test::error_of;

float f16(float x) {
  return f16_to_f32(f32_to_f16(x));
}

TEST(DobiRemap, DynamicMapIsBitsandbytesSignedTable) {
  const auto& a = dobi::dynamic_map();
  // The table in double: the 2^e midpoints of linspace(0.1, 1, 2^e + 1) times 10^(e-6), e = 0..6.
  std::vector<double> want = {0.0, 1.0};
  for (int e = 0; e < 7; ++e) {
    const int n = 1 << e;
    for (int i = 0; i < n; ++i) {
      const double mid = 0.1 + 0.9 * (i + 0.5) / n;
      want.push_back(std::pow(10.0, e - 6) * mid);
      want.push_back(-std::pow(10.0, e - 6) * mid);
    }
  }
  std::sort(want.begin(), want.end());
  ASSERT_EQ(want.size(), 256u);
  for (size_t i = 0; i < 256; ++i) {
    // float32 evaluation as torch does it: within a few ulps of the exact value.
    EXPECT_NEAR(a[i], want[i], 4 * std::abs(want[i]) * 1.2e-7) << i;
    if (i) {
      EXPECT_LT(a[i - 1], a[i]) << i;
    }
  }
  EXPECT_EQ(a[127], 0.0f);
  EXPECT_EQ(a[255], 1.0f);
  for (size_t i = 0; i < 127; ++i)
    EXPECT_EQ(a[i], -a[254 - i]) << i;  // signed: every value and its negative
  EXPECT_NEAR(a[128], 5.5e-7, 1e-13);   // smallest magnitude: 10^-6 * (0.1 + 1) / 2
  EXPECT_NEAR(a[254], 0.99296875,
              1e-7);  // largest below 1: the last midpoint of linspace(0.1, 1, 65)
}

TEST(DobiRemap, PythonWrittenFixtureDequantizesByHand) {
  auto c = TorchCheckpoint::open(LOWRANK_SOURCE_DIR "/tests/fixtures/torch/dobi_remap.pt");
  auto tensors = [&](const std::string& m) {
    dobi::RemappedTensors t{*c->find_raw(m + ".us_quan"),        *c->find_raw(m + ".vt_quan"),
                            *c->find(m + ".us_absmax"),          *c->find(m + ".vt_absmax"),
                            c->find_string(m + ".tuple_info.0"), c->find(m + ".tuple_info.1")};
    return t;
  };
  // "a": [3, 2], rank 2, Σ on the longer (us) side with its third row unquantized.
  ASSERT_TRUE(c->find_raw("a.us_quan"));
  EXPECT_EQ(c->find_raw("a.us_quan")->storage, "ByteStorage");
  EXPECT_EQ(c->find_string("a.tuple_info.0"), "us");
  EXPECT_FALSE(c->find("b.tuple_info.1"));  // None
  const float c0 = dobi::dynamic_map()[0];  // code 0: about -0.99296875
  dobi::Factors a = dobi::dequantize("a", tensors("a"), 3, 2);
  EXPECT_EQ(a.k, 2);
  // us [3, 2]: column i is rank vector i: codes us_quan[i][j] times us_absmax[i]; row 2 is the
  // overhang.
  EXPECT_EQ(a.us, (std::vector<float>{2.0f, f16(c0 * 0.5f), 0.0f, 0.5f, 0.25f, -3.0f}));
  EXPECT_EQ(f16(c0 * 0.5f), -0.49658203125f);  // the f16 rounding Dobi's loader applies
  // vt [2, 2]: row i: codes vt_quan[i][j] times vt_absmax[i].
  EXPECT_EQ(a.vt, (std::vector<float>{1.0f, f16(c0), 0.0f, 4.0f}));
  // "b": square, tuple_info None.
  dobi::Factors b = dobi::dequantize("b", tensors("b"), 2, 2);
  EXPECT_EQ(b.us, (std::vector<float>{1.5f, 0.0f}));
  EXPECT_EQ(b.vt, (std::vector<float>{0.0f, 0.75f}));

  // Every inconsistency names what is wrong.
  auto has = [](const std::function<void()>& f, const std::string& want) {
    const std::string e = error_of(f);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  };
  has([&] { dobi::dequantize("a", tensors("a"), 2, 3); },
      "a: tuple_info must be (\"vt\", overhang) for a [2, 3] matrix; found (\"us\", ...)");
  has([&] { dobi::dequantize("b", tensors("b"), 3, 2); },
      "b: tuple_info must be (\"us\", overhang) for a [3, 2] matrix; found None");
  has([&] { dobi::dequantize("a", tensors("a"), 4, 2); },
      "a: tuple_info[1] has shape [1, 2], expected [2, 2]");
  has([&] { dobi::dequantize("a", tensors("a"), 3, 3); },
      "a: us_quan has shape [2, 2], expected [2, 3]");
  has([&] { dobi::dequantize("a", tensors("a"), 3, 1); },
      "a: us_quan has 2 rank vectors, expected 1 to 1");
  dobi::RemappedTensors sq = tensors("b");
  sq.side = "us";
  has([&] { dobi::dequantize("b", sq, 2, 2); },
      "b: tuple_info holds a 'us' overhang, but a square [2, 2] matrix has none");
  dobi::RemappedTensors f32codes = tensors("a");
  f32codes.vt_quan.storage = "FloatStorage";
  has([&] { dobi::dequantize("a", f32codes, 3, 2); },
      "a: vt_quan is stored as FloatStorage, expected uint8 codes");
  dobi::RemappedTensors short_scale = tensors("a");
  short_scale.vt_absmax.shape = {1};
  short_scale.vt_absmax.nbytes = 2;
  has([&] { dobi::dequantize("a", short_scale, 3, 2); },
      "a: vt_absmax has shape [1], expected [2]");
}

TEST(TorchCheckpoint, ContainersSharedExponentiallyAreRefused) {
  const std::string e = error_of([] {
    TorchCheckpoint::open(LOWRANK_SOURCE_DIR "/tests/fixtures/torch/shared_containers.pt");
  });
  EXPECT_NE(e.find("refer to each other too many times over"), std::string::npos) << e;
}

}  // namespace
}  // namespace lr
