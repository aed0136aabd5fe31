// Loading the golden data of tests/fixtures/grammar (scripts/make_grammar_fixtures.py).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace lr::grammar::test {

inline std::string fixture_path(const std::string& name) {
  return std::string(LOWRANK_SOURCE_DIR) + "/tests/fixtures/grammar/" + name;
}

inline std::string read_fixture(const std::string& name) {
  std::ifstream f(fixture_path(name), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A JSON string whose characters are all below U+0100, back to the bytes.
inline std::string latin1_bytes(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    auto c = static_cast<unsigned char>(utf8[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(utf8[++i]) & 0x3F));
    }
  }
  return out;
}

}  // namespace lr::grammar::test
