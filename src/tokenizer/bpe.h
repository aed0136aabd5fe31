// Byte-level BPE (GPT-2 style): a word's bytes start as one symbol each and the
// adjacent pair with the lowest merge rank is merged until no ranked pair is
// left (ties: leftmost first).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace lr {

// Encodes one pre-tokenized word (raw bytes), appending ids to `out`. With
// `ignore_merges`, a word that is itself a vocab entry is emitted whole.
void bpe_encode_word(const Vocab& v, std::string_view word, bool ignore_merges,
                     std::vector<int32_t>& out);

}  // namespace lr
