// Splits a template into tokens as jinja2's lexer does with transformers'
// settings: trim_blocks, lstrip_blocks, `-`/`+` whitespace control, comments
// dropped, {% raw %} kept verbatim, newlines normalized to \n and one
// trailing newline removed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lr::jinja {

enum class Tok : uint8_t {
  Data,        // template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,
  Int,
  Float,
  Op,  // operators and punctuation, text in `text`
  Eof,
};

struct Token {
  Tok type = Tok::Eof;
  int line = 0;
  std::string text;  // Data, Name, String (unescaped), Op; the literal for Int/Float
  int64_t integer = 0;
  double number = 0;
};

// Throws lr::Error "chat template line N: ..." on text jinja2 cannot lex.
std::vector<Token> tokenize(std::string_view source);

// For messages: how a token reads ("end of template", "'}}'", "name 'foo'").
std::string describe(const Token& t);

}  // namespace lr::jinja
