#include "core/half.h"

#include <immintrin.h>

namespace lr {

uint16_t f32_to_f16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace lr
