#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace {

std::string message(bool avx2, bool fma, bool f16c) {
  try {
    lr::require_cpu_features(avx2, fma, f16c);
  } catch (const lr::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuFeatures, ThisMachineHasThem) {
  // The test binary itself is built with -mavx2 -mfma -mf16c, so reaching
  // here means the CPU has them.
  EXPECT_TRUE(lr::cpu_has_avx2_fma_f16c());
  EXPECT_NO_THROW(lr::require_cpu_features());
}

TEST(CpuFeatures, MessageNamesMissingFeatures) {
  const std::string prefix = "this build of lowrank needs a CPU with AVX2, FMA and F16C; this CPU lacks: ";
  EXPECT_EQ(message(true, true, true), "");
  EXPECT_EQ(message(true, false, true), prefix + "FMA");
  EXPECT_EQ(message(false, true, true), prefix + "AVX2");
  EXPECT_EQ(message(true, true, false), prefix + "F16C");
  EXPECT_EQ(message(false, false, true), prefix + "AVX2, FMA");
  EXPECT_EQ(message(false, false, false), prefix + "AVX2, FMA, F16C");
}

}  // namespace
