// The GPT-2 byte <-> unicode mapping used by byte-level BPE vocabularies: every
// byte is shown as a printable code point (printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order), so "\n" -> "Ċ"
// and " " -> "Ġ".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lr::byte_level {

// UTF-8 of the code point that stands for byte b.
const std::string& byte_to_text(uint8_t b);

// Maps raw bytes to their byte-level text.
std::string encode(std::string_view bytes);

// Maps byte-level text back to raw bytes. Characters outside the mapping (or
// invalid UTF-8) are copied through unchanged.
std::string decode(std::string_view text);

}  // namespace lr::byte_level
