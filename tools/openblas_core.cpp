#include "openblas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/cpu_features.h"

namespace lr::cli {
namespace {

// OpenBLAS's name for the kernels it uses, or nullptr when the BLAS is not OpenBLAS.
const char* openblas_corename() {
  using Fn = char* (*)();
  auto get = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return get ? get() : nullptr;
}

const char* best_core() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  return cpu_has_avx2_fma_f16c() ? "Haswell" : nullptr;
}

}  // namespace

void fix_openblas_core(char** argv) {
  const char* core = openblas_corename();
  if (!core || std::strcmp(core, "Prescott") != 0 || std::getenv("OPENBLAS_CORETYPE")) return;
  const char* want = best_core();
  if (!want || setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with Prescott's kernels
}

std::string blas_description() {
  const char* core = openblas_corename();
  if (!core) return "not OpenBLAS";
  std::string s = std::string("OpenBLAS, ") + core + " kernels";
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"))
    s += std::string(" (OPENBLAS_CORETYPE=") + set + ")";
  return s;
}

}  // namespace lr::cli
