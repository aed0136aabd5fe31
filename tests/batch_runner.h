// Drives a batch (backend/batch.h) the way a server's slots would, for the
// CPU and CUDA batch tests: sequences of a prompt and then tokens fed back
// as generated ones, run together or one at a time, prompts cut into chunks
// of random sizes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/batch.h"

namespace lr::test {

struct Seq {
  std::vector<int32_t> tokens;
  int prompt = 0;  // tokens[0, prompt) are the prompt
};

using AllLogits = std::vector<std::vector<std::vector<float>>>;  // [sequence][position]

// Every sequence through `b`: each step takes, from every unfinished
// sequence (together) or from one at a time, its next generated token or a
// prompt chunk of 1..most tokens (a random size); verify > 1: its next
// 1..verify generated tokens in one chunk with every token's logits (as
// speculative decoding verifies drafted tokens). Returns the logits after
// every position that ended a chunk or had its logits (empty elsewhere);
// checks n_past.
inline AllLogits run_batch(BatchBackend& b, const std::vector<Seq>& seqs, bool together, int most,
                           uint64_t seed, int verify = 1) {
  const int vocab = b.weights().cfg.vocab, S = int(seqs.size());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int> done(size_t(S), 0);
  AllLogits out(static_cast<size_t>(S));
  for (int i = 0; i < S; ++i) out[size_t(i)].resize(seqs[size_t(i)].tokens.size());
  for (int cur = 0;;) {
    std::vector<BatchBackend::Chunk> gen, prompt;
    for (int k = 0; k < S; ++k) {
      const int i = together ? k : cur;
      const Seq& q = seqs[size_t(i)];
      const int at = done[size_t(i)], left = int(q.tokens.size()) - at;
      if (left > 0 && at >= q.prompt)
        gen.push_back({i, q.tokens.data() + at,
                       verify > 1 ? std::min(left, 1 + int(rng() % uint32_t(verify))) : 1, true,
                       /*generated=*/true, /*every_logits=*/verify > 1});
      else if (left > 0)
        prompt.push_back({i, q.tokens.data() + at,
                          std::min(q.prompt - at, 1 + int(rng() % uint32_t(most))), true});
      if (!together) break;
    }
    gen.insert(gen.end(), prompt.begin(), prompt.end());
    if (gen.empty()) {
      if (together || ++cur == S) break;
      continue;
    }
    size_t rows = 0;
    for (const BatchBackend::Chunk& c : gen) rows += c.every_logits ? size_t(c.n) : 1;
    std::vector<float> logits(rows * size_t(vocab));
    b.step(gen, logits.data());
    const float* row = logits.data();
    for (const BatchBackend::Chunk& c : gen) {
      const int i = c.slot;
      for (int t = c.every_logits ? 0 : c.n - 1; t < c.n; ++t, row += vocab)
        out[size_t(i)][size_t(done[size_t(i)] + t)].assign(row, row + vocab);
      done[size_t(i)] += c.n;
      EXPECT_EQ(b.n_past(i), done[size_t(i)]);
    }
  }
  return out;
}

// Every logit row `got` has is `want`'s, bit for bit (and more rows than
// sequences were compared).
inline void expect_same_bits(const AllLogits& got, const AllLogits& want) {
  int compared = 0;
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t p = 0; p < got[i].size(); ++p) {
      if (got[i][p].empty()) continue;
      ASSERT_EQ(want[i][p].size(), got[i][p].size()) << "sequence " << i << " at position " << p;
      ASSERT_EQ(std::memcmp(got[i][p].data(), want[i][p].data(), got[i][p].size() * 4), 0)
          << "sequence " << i << " at position " << p;
      ++compared;
    }
  EXPECT_GT(compared, int(got.size()));
}

}  // namespace lr::test
