// SentencePiece-style BPE: the text (spaces already escaped as U+2581) starts as
// one symbol per UTF-8 character; the adjacent pair whose concatenation is the
// vocab entry with the highest score is merged until no pair forms an entry
// (ties: leftmost first). A final symbol that is not an entry falls back to
// <0xNN> byte tokens, or to the unknown token when those are missing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace lr {

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out);

// " " -> U+2581 (the SentencePiece whitespace mark).
std::string spm_escape_spaces(std::string_view text);

}  // namespace lr
