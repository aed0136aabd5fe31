// Runs a kernel test on every instruction-set path this CPU supports
// (core/cpu_features.h), so an AVX-512 host tests its AVX2 path too.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "core/cpu_features.h"

namespace lr::test {

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::Avx2, Isa::Avx512Vnni})
    if (cpu_supports(i)) out.push_back(i);
  return out;
}

// Selects a path for the scope and restores the one before.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : saved_(kernel_isa()) { set_kernel_isa(isa); }
  ~IsaScope() { set_kernel_isa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa saved_;
};

}  // namespace lr::test
