// Everything in this file is compiled for the baseline x86-64 ISA (see
// LR_BASELINE) and avoids std::string / fmt, whose inline code would be
// compiled with the project's AVX flags: it must run on CPUs without AVX.
#include "core/cpu_features.h"

#include <cpuid.h>

#include "core/error.h"

#if defined(__clang__)
#define LR_BASELINE __attribute__((target("no-avx"), noinline))
#elif defined(__GNUC__)
#define LR_BASELINE __attribute__((target("no-avx,no-avx2,no-fma,no-f16c"), noinline))
#else
#define LR_BASELINE
#endif

namespace lr {

namespace {

LR_BASELINE bool has_f16c() {
#if defined(__clang__)
  // clang's __builtin_cpu_supports does not know "f16c": CPUID.1:ECX bit 29.
  // (AVX2 support, checked alongside, already implies the OS saves YMM state.)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c >> 29) & 1u;
#else
  return __builtin_cpu_supports("f16c");
#endif
}

LR_BASELINE void append(char* buf, unsigned& len, unsigned cap, const char* s) {
  while (*s && len + 1 < cap) buf[len++] = *s++;
  buf[len] = '\0';
}

}  // namespace

LR_BASELINE bool cpu_has_avx2_fma_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

LR_BASELINE void require_cpu_features(bool has_avx2, bool has_fma, bool has_f16c) {
  if (has_avx2 && has_fma && has_f16c) return;
  char msg[160];
  unsigned len = 0;
  msg[0] = '\0';
  append(msg, len, sizeof msg,
         "this build of lowrank needs a CPU with AVX2, FMA and F16C; this CPU lacks: ");
  const char* names[3] = {"AVX2", "FMA", "F16C"};
  const bool have[3] = {has_avx2, has_fma, has_f16c};
  bool first = true;
  for (int i = 0; i < 3; ++i) {
    if (have[i]) continue;
    if (!first) append(msg, len, sizeof msg, ", ");
    append(msg, len, sizeof msg, names[i]);
    first = false;
  }
  throw Error(msg);
}

LR_BASELINE void require_cpu_features() {
  __builtin_cpu_init();
  require_cpu_features(__builtin_cpu_supports("avx2") != 0, __builtin_cpu_supports("fma") != 0,
                       has_f16c());
}

__attribute__((target("arch=x86-64"))) std::string cpu_kernel_path() {
  __builtin_cpu_init();
  std::string unused;
  auto note = [&](bool has, const char* name) {
    if (has) unused += std::string(unused.empty() ? "" : ", ") + name;
  };
  note(__builtin_cpu_supports("avx512f"), "avx512f");
  note(__builtin_cpu_supports("avx512bw"), "avx512bw");
  note(__builtin_cpu_supports("avx512vl"), "avx512vl");
  note(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  note(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  return std::string("avx2 (AVX2+FMA+F16C)") + (unused.empty() ? "" : "; this CPU also has " + unused +
                                                                         ", which no kernel uses yet");
}

}  // namespace lr
