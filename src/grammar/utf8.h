// Incremental UTF-8 decoding for the matcher and the token trie walk: a code
// point may be split across tokens, so the decoder state travels with them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "grammar/grammar.h"

namespace lr::grammar {

struct Utf8State {
  uint32_t value = 0;  // the bits read so far
  uint8_t remain = 0;  // continuation bytes still expected (0: between code points)
  uint8_t len = 0;     // the length of the sequence being read

  enum Result { Invalid, Partial, Complete };

  // Feeds one byte; on Complete, `cp` is the code point and the state is reset.
  // Leads that can never start a valid sequence (continuation bytes, C0, C1,
  // F5..FF) are Invalid, as are overlong or out-of-range prefixes.
  Result feed(uint8_t b, uint32_t& cp) {
    if (remain == 0) {
      if (b < 0x80) {
        cp = b;
        return Complete;
      }
      if (b < 0xC2 || b > 0xF4) return Invalid;
      len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      remain = static_cast<uint8_t>(len - 1);
      value = b & (0x7Fu >> len);
      return Partial;
    }
    if ((b & 0xC0) != 0x80) return Invalid;
    value = (value << 6) | (b & 0x3F);
    --remain;
    uint32_t lo = 0, hi = 0;
    if (!bounds(lo, hi)) return Invalid;
    if (remain > 0) return Partial;
    cp = value;
    *this = Utf8State();
    return Complete;
  }

  // The code points this partial sequence can still complete to.
  bool bounds(uint32_t& lo, uint32_t& hi) const {
    lo = value << (6 * remain);
    hi = lo | ((1u << (6 * remain)) - 1);
    uint32_t min = len == 4 ? 0x10000 : len == 3 ? 0x800 : 0x80;
    lo = std::max(lo, min);
    hi = std::min(hi, kMaxCodePoint);
    return lo <= hi;
  }
};

}  // namespace lr::grammar
