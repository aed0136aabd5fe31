// Which tokens of a vocabulary keep a Matcher on a valid path. Built once per
// vocabulary (it does not depend on the grammar): the token byte strings in a
// trie, walked depth-first with the matcher's stacks so that a rejected
// prefix prunes every token under it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace lr::grammar {

class TokenMask {
 public:
  // token_bytes[id]: the raw bytes token id decodes to; empty = never allowed
  // (control tokens). end_tokens: allowed exactly when the matcher can end.
  TokenMask(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens);

  // allowed is resized to the vocabulary; allowed[id] = 1 if appending the
  // token's bytes keeps `m` on a valid path (a trailing partial UTF-8
  // sequence counts when some completion of it could be accepted).
  // Thread-safe: the scratch state is per thread.
  void fill(const Matcher& m, std::vector<uint8_t>& allowed) const;
  size_t vocab_size() const { return n_vocab_; }
  size_t trie_nodes() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t depth;      // bytes from the root (1 for a token's first byte)
    uint32_t end;        // the index after this node's subtree (preorder)
    uint32_t tok_begin;  // tokens ending here: ids_[tok_begin, tok_begin + tok_count)
    uint32_t tok_count;
    uint8_t byte;
  };
  size_t n_vocab_ = 0;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> end_tokens_;
  uint32_t max_depth_ = 0;
};

}  // namespace lr::grammar
