// Prompt lookup (n-gram) drafts for speculative decoding: no model, the
// sequence's own text. The tokens that followed the latest earlier
// occurrence of the sequence's last n tokens are guessed to follow again
// (n from n_max down to n_min: the longest match wins). Code edits, quoted
// passages and repetitive text draft well; other text drafts nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace lr {

struct NgramDraft {
  int n_min = 2, n_max = 4;  // match lengths tried, longest first
};

// At most k tokens to follow hist (the prompt and what was generated, the
// last token included); empty when no n-gram of hist's end recurs.
std::vector<int32_t> ngram_draft(const std::vector<int32_t>& hist, int k, const NgramDraft& o = {});

}  // namespace lr
