// Prompt-lookup drafts (runtime/ngram_draft.h): the tokens after the
// latest earlier occurrence of the history's last n tokens, the longest n
// first, at most k of them.
#include <gtest/gtest.h>

#include "runtime/ngram_draft.h"

namespace lr {
namespace {

using V = std::vector<int32_t>;

TEST(NgramDraft, TheLatestLongestMatchIsContinued) {
  // "1 2 3" recurs at 0 and 5; the latest earlier one (5) is followed by 9 9.
  EXPECT_EQ(ngram_draft({1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 7, 1, 2, 3}, 3), (V{9, 9, 7}));
  EXPECT_EQ(ngram_draft({1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 7, 1, 2, 3}, 1), (V{9}));
  // The 4-gram "8 1 2 3" beats the later 3-gram "1 2 3".
  EXPECT_EQ(ngram_draft({8, 1, 2, 3, 4, 6, 1, 2, 3, 5, 8, 1, 2, 3}, 2), (V{4, 6}));
  // A draft stops at the history's end.
  EXPECT_EQ(ngram_draft({5, 6, 5, 6}, 8), (V{5, 6}));
  // n_min 2: a lone recurring token drafts nothing; n_min 1 continues it.
  EXPECT_EQ(ngram_draft({4, 7, 9, 4}, 3), V{});
  EXPECT_EQ(ngram_draft({4, 7, 9, 4}, 3, {1, 4}), (V{7, 9, 4}));
  EXPECT_EQ(ngram_draft({}, 3), V{});
  EXPECT_EQ(ngram_draft({1, 2, 1, 2}, 0), V{});
}

}  // namespace
}  // namespace lr
