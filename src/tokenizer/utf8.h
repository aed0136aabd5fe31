// Small UTF-8 helpers shared by the tokenizer: strict validation (no overlongs,
// no surrogates, nothing above U+10FFFF), encoding, and the incomplete-tail
// check the streaming detokenizer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lr::utf8 {

// Sequence length announced by a lead byte (1..4), or 0 for a byte that cannot
// start a sequence (continuation bytes, 0xC0/0xC1, 0xF5..0xFF).
int lead_len(unsigned char c);

// Length of the valid UTF-8 character starting at s[pos], or 0 when the bytes
// there are not a complete, valid character.
size_t valid_char_len(std::string_view s, size_t pos);

// Decodes the valid character at s[pos] (call only when valid_char_len > 0).
uint32_t decode_at(std::string_view s, size_t pos, size_t len);

// Appends the UTF-8 encoding of code point cp (cp <= 0x10FFFF).
void append(std::string& out, uint32_t cp);

bool is_valid(std::string_view s);

// Number of trailing bytes of s that are a proper prefix of a valid character
// (a lead byte plus fewer continuation bytes than it needs, each still
// admissible). Those bytes may become valid once more bytes arrive; 0..3.
size_t incomplete_tail(std::string_view s);

}  // namespace lr::utf8
