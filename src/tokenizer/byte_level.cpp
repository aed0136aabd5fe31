#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace lr::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> to_text;
  std::array<int16_t, 324> to_byte;  // code point (< 324) -> byte, or -1

  Tables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      utf8::append(to_text[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_text(uint8_t b) { return tables().to_text[b]; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_text[static_cast<uint8_t>(c)];
  return out;
}

std::string decode(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8::valid_char_len(text, i);
    if (n == 0) {
      out += text[i++];
      continue;
    }
    const uint32_t cp = utf8::decode_at(text, i, n);
    if (cp < t.to_byte.size() && t.to_byte[cp] >= 0) {
      out += static_cast<char>(t.to_byte[cp]);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace lr::byte_level
