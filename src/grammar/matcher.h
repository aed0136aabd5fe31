// Per-sequence grammar state: the set of parse stacks after the text so far.
// Copy it to fork a sequence (n > 1) or to keep a rollback point for
// speculative decoding; the copy is a few small vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stacks.h"
#include "grammar/utf8.h"

namespace lr::grammar {

class Matcher {
 public:
  // Throws lr::Error if the grammar's start state alone exceeds kMaxStacks.
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Advances over raw bytes (UTF-8; a code point may be split across calls).
  // Returns false, leaving the state unchanged, when the bytes are not a
  // prefix of some sentence continuation, are invalid UTF-8, or would exceed
  // the matcher limits (grammar.h).
  bool accept_bytes(std::string_view bytes);
  // The text so far is a complete sentence (and ends on a code point boundary).
  bool can_end() const;
  // No further byte can be accepted (the sentence is complete, or the
  // grammar's language is empty).
  bool dead() const;
  size_t stack_count() const { return tops_.size(); }
  // The state as bytes: equal keys, equal futures (and equal masks). The
  // stacks as their positions from the top down, sorted, and a partial
  // UTF-8 character.
  std::string state_key() const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  friend class TokenMask;
  void compact();
  std::shared_ptr<const Grammar> grammar_;
  StackPool pool_;
  std::vector<uint32_t> tops_;  // ids of the stacks; 0 = may end here
  Utf8State utf8_;
};

}  // namespace lr::grammar
