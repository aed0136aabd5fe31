// Helpers shared by the tokenizer tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

#define EXPECT_HAS(msg, sub)                                             \
  EXPECT_NE(std::string(msg).find(sub), std::string::npos)               \
      << "message: " << (msg) << "\nexpected to contain: " << (sub)

namespace lr::tok_test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string shared_tokenizer_dir() { return LOWRANK_SHARED_DIR "/data/tokenizer/"; }

// The default model's GGUF: $LOWRANK_MODEL, else the model cache; "" when absent.
inline std::string default_model_path() {
  if (const char* env = std::getenv("LOWRANK_MODEL"); env && *env)
    return std::filesystem::exists(env) ? env : "";
  if (const char* home = std::getenv("HOME")) {
    const std::string p = std::string(home) + "/.cache/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

// Printable form of a byte string for failure messages.
inline std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20) {
      out += "\\x";
      out += "0123456789abcdef"[c >> 4];
      out += "0123456789abcdef"[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out += ' ';
    out += std::to_string(id);
  }
  return out;
}

}  // namespace lr::tok_test
