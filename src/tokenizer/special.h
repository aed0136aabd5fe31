// Splits text at occurrences of special tokens so they encode as whole units.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace lr {

struct Fragment {
  int32_t token;     // >= 0: a matched special token; -1: raw text
  size_t off, len;   // raw text range
};

// User-defined tokens are always matched; control and unknown tokens only when
// `parse_special`. Tokens are tried longest text first, each one splitting every
// raw fragment left to right (the llama.cpp partition order).
std::vector<Fragment> partition_specials(const Vocab& v, std::string_view text,
                                         bool parse_special);

}  // namespace lr
