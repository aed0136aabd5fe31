// Run-time CPU check. The whole project is compiled with -mavx2 -mfma -mf16c,
// so main() must call require_cpu_features() first, before any code that may
// use those instructions runs. cpu_features.cpp itself is compiled for the
// baseline x86-64 ISA (per-function target attributes), so the check and its
// error message work on a CPU without AVX.
#pragma once

#include <string>

namespace lr {

// True when the CPU (and OS) support AVX2, FMA and F16C.
bool cpu_has_avx2_fma_f16c();

// Throws lr::Error naming the missing features, e.g. "this build of lowrank
// needs a CPU with AVX2, FMA and F16C; this CPU lacks: FMA".
void require_cpu_features();

// The instruction-set path the CPU kernels take, for --version and bench:
// "avx2 (AVX2+FMA+F16C)", with the wider extensions this CPU has that no
// kernel uses yet named after it.
std::string cpu_kernel_path();

// The same check for given feature flags (used by require_cpu_features() and
// by tests).
void require_cpu_features(bool has_avx2, bool has_fma, bool has_f16c);

}  // namespace lr
