#include "template/unicode.h"

#include <cstdint>
#include <cstring>

#include "template/value.h"

namespace lr::jinja::utf8 {

namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // surrogateescape: byte b <-> U+DC00 + b

bool cont(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// Ranges where upper and lower case alternate: even code point upper when
// `even_upper`, odd otherwise.
struct PairRange {
  char32_t lo, hi;
  bool even_upper;
};
constexpr PairRange kPairs[] = {
    {0x100, 0x12F, true},  {0x132, 0x137, true}, {0x139, 0x148, false}, {0x14A, 0x177, true},
    {0x179, 0x17E, false}, {0x182, 0x185, true}, {0x1A0, 0x1A5, true},  {0x1DE, 0x1EF, true},
    {0x1F8, 0x21F, true},  {0x222, 0x233, true}, {0x460, 0x481, true},  {0x48A, 0x4BF, true},
    {0x4C1, 0x4CE, false}, {0x4D0, 0x52F, true},
};

// Ranges where lower = upper + offset.
struct ShiftRange {
  char32_t lo, hi;  // the upper-case range
  char32_t offset;
};
constexpr ShiftRange kShifts[] = {
    {'A', 'Z', 32},     {0xC0, 0xD6, 32},   {0xD8, 0xDE, 32},     {0x391, 0x3A1, 32},
    {0x3A3, 0x3AB, 32}, {0x388, 0x38A, 37}, {0x38E, 0x38F, 63},   {0x410, 0x42F, 32},
    {0x400, 0x40F, 80}, {0x531, 0x556, 48}, {0xFF21, 0xFF3A, 32},
};

}  // namespace

char32_t next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = 0;
  char32_t c = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 1, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 2, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 3, c = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return kEscapeBase + b0;
  }
  if (i + n >= s.size()) {
    ++i;
    return kEscapeBase + b0;
  }
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!cont(b)) {
      ++i;
      return kEscapeBase + b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kEscapeBase + b0;
  }
  i += n + 1;
  return c;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
    out += static_cast<char>(c - kEscapeBase);  // an undecodable byte, as it was
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string decode(std::string_view s) {
  tick(s.size() >> 4);  // decoding is work: a step per 16 bytes
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out += next(s, i);
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

size_t length(std::string_view s) {
  tick_bytes(s.size());
  if (is_ascii(s)) return s.size();
  tick(s.size() >> 4);
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) next(s, i);
  return n;
}

bool is_ascii(std::string_view s) {
  tick_bytes(s.size());
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {  // a word at a time
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) return false;
  }
  for (; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0x80) return false;
  return true;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E)
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c >= 0xFFFE)
    return c > 0xFFFF && c < 0xE0000;
  return true;
}

bool is_digit(char32_t c) {
  if (c >= '0' && c <= '9') return true;
  // Other scripts' decimal digits (Arabic-Indic, Devanagari, fullwidth) and
  // the super/subscripts str.isdigit also accepts.
  return (c >= 0x660 && c <= 0x669) || (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) ||
         (c >= 0xFF10 && c <= 0xFF19) || c == 0xB2 || c == 0xB3 || c == 0xB9 ||
         (c >= 0x2070 && c <= 0x2079 && c != 0x2071 && c != 0x2072 && c != 0x2073) ||
         (c >= 0x2080 && c <= 0x2089);
}

bool is_upper(char32_t c) {
  return to_lower(c) != c;
}
bool is_lower(char32_t c) {
  return to_upper(c) != c || c == 0xDF || c == 0xAA || c == 0xBA || c == 0x138;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xC0 && c <= 0x2C1) return c != 0xD7 && c != 0xF7;
  if (c >= 0x370 && c <= 0x3FF)
    return c != 0x375 && c != 0x37E && c != 0x384 && c != 0x385 && c != 0x387 && c != 0x3F6;
  if (c >= 0x400 && c <= 0x52F) return c < 0x482 || c > 0x489;
  if (c >= 0x531 && c <= 0x587) return c < 0x557 || c > 0x560;
  if ((c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A)) return true;
  if ((c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA)) return true;
  if ((c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF)) return true;
  if ((c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xFF21 && c <= 0xFF3A) || (c >= 0xFF41 && c <= 0xFF5A))
    return true;
  return false;
}

bool is_word(char32_t c) {
  return c == '_' || is_alpha(c) || is_digit(c);
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  for (const ShiftRange& r : kShifts)
    if (c >= r.lo && c <= r.hi) return c + r.offset;
  for (const PairRange& r : kPairs)
    if (c >= r.lo && c <= r.hi) return ((c & 1) == 0) == r.even_upper ? c + 1 : c;
  switch (c) {
    case 0x178:
      return 0xFF;
    case 0x386:
      return 0x3AC;
    case 0x38C:
      return 0x3CC;
    case 0x4C0:
      return 0x4CF;
    default:
      return c;
  }
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  for (const ShiftRange& r : kShifts)
    if (c >= r.lo + r.offset && c <= r.hi + r.offset) return c - r.offset;
  for (const PairRange& r : kPairs)
    if (c >= r.lo && c <= r.hi) return ((c & 1) == 0) == r.even_upper ? c : c - 1;
  switch (c) {
    case 0xFF:
      return 0x178;
    case 0xB5:
      return 0x39C;
    case 0x131:
      return 'I';
    case 0x17F:
      return 'S';
    case 0x3C2:
      return 0x3A3;
    case 0x3AC:
      return 0x386;
    case 0x3CC:
      return 0x38C;
    case 0x4CF:
      return 0x4C0;
    default:
      return c;
  }
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    if (c == 0xDF) {
      out += "SS";  // 'ß'.upper()
    } else {
      append(out, to_upper(c));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append(out, to_lower(next(s, i)));
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (size_t i = 0; i < s.size(); first = false) {
    const char32_t c = next(s, i);
    if (first && c == 0xDF) {
      out += "Ss";
    } else {
      append(out, first ? to_upper(c) : to_lower(c));
    }
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next(s, i);
    const bool cased = is_upper(c) || is_lower(c);
    if (!prev_cased && c == 0xDF) {
      out += "Ss";
    } else {
      append(out, prev_cased ? to_lower(c) : to_upper(c));
    }
    prev_cased = cased;
  }
  return out;
}

}  // namespace lr::jinja::utf8
