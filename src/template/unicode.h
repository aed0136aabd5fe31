// UTF-8 and the Python str character classes the template engine needs.
//
// Strings are UTF-8 bytes; Python indexes, slices and measures them by code
// point, so the operations that do (len, [i], slices, center, ...) decode
// first. Invalid bytes decode to U+DC80..U+DCFF (Python's surrogateescape)
// and encode back to the same byte, so no operation loses or invents bytes.
// The case mappings and classes cover ASCII, Latin-1, Latin Extended-A/B,
// Greek and Cyrillic; characters elsewhere are treated as caseless (right for
// CJK, emoji and symbols).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lr::jinja::utf8 {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append(std::string& out, char32_t c);
// The code point at s[i] (advancing i past it).
char32_t next(std::string_view s, size_t& i);
// The number of code points in s.
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

bool is_space(char32_t c);      // str.isspace
bool is_linebreak(char32_t c);  // the characters str.splitlines splits at
bool is_printable(char32_t c);  // str.isprintable (repr escapes the others)
bool is_alpha(char32_t c);
bool is_digit(char32_t c);  // str.isdigit (ASCII and the other decimal digits we know)
bool is_word(char32_t c);   // regex \w
bool is_upper(char32_t c);
bool is_lower(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title

}  // namespace lr::jinja::utf8
