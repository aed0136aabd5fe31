#include <cpuid.h>
#include <gtest/gtest.h>

#include <string>

#include "core/cpu_features.h"
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
  const std::string prefix =
      "this build of lowrank needs a CPU with AVX2, FMA and F16C; this CPU lacks: ";
  EXPECT_EQ(message(true, true, true), "");
  EXPECT_EQ(message(true, false, true), prefix + "FMA");
  EXPECT_EQ(message(false, true, true), prefix + "AVX2");
  EXPECT_EQ(message(true, true, false), prefix + "F16C");
  EXPECT_EQ(message(false, false, true), prefix + "AVX2, FMA");
  EXPECT_EQ(message(false, false, false), prefix + "AVX2, FMA, F16C");
}

// LOWRANK_ISA: unset, empty or "auto" gives the best path the CPU has; a
// named path is taken when the CPU has it; anything else names the variable.
TEST(CpuFeatures, KernelPathFromTheEnvironment) {
  using lr::Isa;
  EXPECT_EQ(lr::isa_from_env(nullptr, true), Isa::Avx512Vnni);
  EXPECT_EQ(lr::isa_from_env("", false), Isa::Avx2);
  EXPECT_EQ(lr::isa_from_env("auto", true), Isa::Avx512Vnni);
  EXPECT_EQ(lr::isa_from_env("auto", false), Isa::Avx2);
  EXPECT_EQ(lr::isa_from_env("avx2", true), Isa::Avx2);
  EXPECT_EQ(lr::isa_from_env("avx512vnni", true), Isa::Avx512Vnni);
  auto error = [](const char* v, bool has) {
    try {
      lr::isa_from_env(v, has);
    } catch (const lr::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("avx512vnni", false),
            "LOWRANK_ISA=avx512vnni: this CPU lacks AVX-512 F/BW/VL with VNNI (use avx2 or auto)");
  EXPECT_EQ(error("AVX2", true),
            "LOWRANK_ISA='AVX2' is not a kernel path (expected auto, avx2 or avx512vnni)");
  EXPECT_EQ(error("sse", false),
            "LOWRANK_ISA='sse' is not a kernel path (expected auto, avx2 or avx512vnni)");
}

TEST(CpuFeatures, KernelPathCanBeSwitchedOnlyToWhatTheCpuHas) {
  const lr::Isa saved = lr::kernel_isa();
  EXPECT_TRUE(lr::cpu_supports(lr::Isa::Avx2));
  EXPECT_NO_THROW(lr::set_kernel_isa(lr::Isa::Avx2));
  EXPECT_EQ(lr::kernel_isa(), lr::Isa::Avx2);
  EXPECT_NE(lr::cpu_kernel_path().find("avx2 (AVX2+FMA+F16C)"), std::string::npos)
      << lr::cpu_kernel_path();
  if (lr::cpu_supports(lr::Isa::Avx512Vnni)) {
    lr::set_kernel_isa(lr::Isa::Avx512Vnni);
    EXPECT_EQ(lr::kernel_isa(), lr::Isa::Avx512Vnni);
    EXPECT_EQ(lr::cpu_kernel_path().rfind("avx512vnni (", 0), 0u) << lr::cpu_kernel_path();
  } else {
    EXPECT_THROW(lr::set_kernel_isa(lr::Isa::Avx512Vnni), lr::Error);
    EXPECT_EQ(lr::kernel_isa(), lr::Isa::Avx2);
  }
  lr::set_kernel_isa(saved);
}

}  // namespace

// AMX is reported as the probe found it: "not listed" exactly when CPUID
// leaf 7 does not list AMX-TILE; otherwise the kernel path names the state,
// and probing never harms this process (the tile instructions ran in a child).
TEST(CpuFeatures, AmxIsProbedWithoutRisk) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool listed = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 24) & 1u);
  const lr::Amx amx = lr::amx_status();
  EXPECT_EQ(amx == lr::Amx::NotListed, !listed);
  EXPECT_EQ(lr::amx_status(), amx);  // probed once
  const std::string path = lr::cpu_kernel_path();
  if (listed)
    EXPECT_NE(path.find(std::string("amx (") + lr::amx_status_name(amx) + ")"), std::string::npos)
        << path;
  else
    EXPECT_EQ(path.find("amx"), std::string::npos) << path;
}
