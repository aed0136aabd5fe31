#include "tokenizer/utf8.h"

namespace lr::utf8 {

int lead_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;  // continuation byte or overlong lead
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  if (c < 0xF5) return 4;
  return 0;
}

namespace {

// Admissible range of the second byte given the lead byte (rules out overlongs,
// surrogates and code points above U+10FFFF).
void second_range(unsigned char lead, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  else if (lead == 0xED) hi = 0x9F;
  else if (lead == 0xF0) lo = 0x90;
  else if (lead == 0xF4) hi = 0x8F;
}

}  // namespace

size_t valid_char_len(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c0 = static_cast<unsigned char>(s[pos]);
  const int n = lead_len(c0);
  if (n == 0) return 0;
  if (n == 1) return 1;
  if (pos + n > s.size()) return 0;
  unsigned char lo, hi;
  second_range(c0, lo, hi);
  const auto c1 = static_cast<unsigned char>(s[pos + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (int k = 2; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[pos + k]);
    if (c < 0x80 || c > 0xBF) return 0;
  }
  return static_cast<size_t>(n);
}

uint32_t decode_at(std::string_view s, size_t pos, size_t len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[pos + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    case 3: return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    default: return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_char_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t incomplete_tail(std::string_view s) {
  // A pending character starts at most 3 bytes before the end.
  const size_t first = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t start = s.size(); start-- > first;) {
    const auto c0 = static_cast<unsigned char>(s[start]);
    if (c0 >= 0x80 && c0 <= 0xBF) continue;  // continuation: keep looking for the lead
    const int n = lead_len(c0);
    const size_t have = s.size() - start;
    if (n <= 1 || have >= static_cast<size_t>(n)) return 0;  // ASCII, invalid or complete
    // Check that the bytes present are admissible so far.
    if (have >= 2) {
      unsigned char lo, hi;
      second_range(c0, lo, hi);
      const auto c1 = static_cast<unsigned char>(s[start + 1]);
      if (c1 < lo || c1 > hi) return 0;
      for (size_t k = 2; k < have; ++k) {
        const auto c = static_cast<unsigned char>(s[start + k]);
        if (c < 0x80 || c > 0xBF) return 0;
      }
    }
    return have;
  }
  return 0;
}

}  // namespace lr::utf8
