// One answer, token by token: what every command does with a sequence's
// logits. Sampling (penalties over the prompt and the answer), stop tokens,
// stop strings, streaming detokenization in whole UTF-8 characters (text
// held back while it may begin a stop string), the token limit and the end
// of the context. Written once: the engine (runtime/engine.h) keeps one per
// busy slot, for run, chat and serve alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace lr {

enum class Finish { None, Stop, Length, Cancelled };
// "stop", "length", "cancelled"
inline const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Stop:
      return "stop";
    case Finish::Length:
      return "length";
    case Finish::Cancelled:
      return "cancelled";
    case Finish::None:
      break;
  }
  return "";
}

struct GenParams {
  SamplerParams sampling;
  int max_tokens = 256;           // tokens generated at most (the context may end it sooner)
  std::vector<std::string> stop;  // stop strings (the text ends before the first)
  std::set<int32_t> stop_tokens;  // tokens that end the answer (end of turn, end of sequence)
  int top_logprobs =
      -1;  // -1: no log-probabilities; 0..20: each token's, with this many alternatives
  // The answer is a sentence of this grammar (a JSON schema's, a tool
  // call's, a raw GBNF): each step masks the tokens that cannot continue it,
  // after the logits (so a batch stays invariant); a stop token only where
  // the sentence may end. Null: free text.
  std::shared_ptr<const grammar::Grammar> grammar;
};

// The tokens' bytes as a grammar sees them (control tokens: none), in a trie: built once per
// vocabulary.
std::unique_ptr<grammar::TokenMask> token_mask(const Tokenizer& tok);

struct TokenOut {
  int32_t id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

class Sequence {
 public:
  // Throws lr::Error on bad sampling parameters. mask: the vocabulary's
  // (token_mask), needed when p.grammar is set.
  Sequence(const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenParams& p,
           const grammar::TokenMask* mask = nullptr);

  struct Step {
    int32_t id = -1;                // the sampled token (fed back unless finished)
    std::string text;               // text that may go out now
    std::optional<TokenOut> token;  // with log-probabilities, when asked for
    Finish finish = Finish::None;   // Stop or Length: the answer ends here
    double mask_s = 0;              // seconds the grammar's mask took (0: none)
  };
  // A drafted token and the distribution it was drawn from.
  struct Proposal {
    int32_t id;
    const TokenDist* q;
  };
  // Samples the next token from logits [vocab]. `room`: the context has a
  // position for feeding it back (else the answer ends with Length).
  // `draft`: speculative sampling's rule decides instead (Sampler::verify):
  // the drafted token, or one the draft did not propose.
  Step next(const float* logits, int vocab, bool room, const Proposal* draft = nullptr);

  // Tokens sampled so far (a stop token included).
  const std::vector<int32_t>& generated() const { return generated_; }
  // The answer's text so far (cut at a stop string).
  const std::string& text() const { return text_; }

 private:
  // Text from sent_ on that may go out (final: all of it).
  std::string release(bool final);
  // The grammar's mask for this step into allowed_; false when no token may follow.
  bool mask(int vocab);

  GenParams p_;
  Sampler sampler_;
  StreamDecoder decoder_;
  std::vector<int32_t> history_;  // prompt, then the generated tokens
  size_t n_prompt_;
  const Tokenizer& tok_;
  const grammar::TokenMask* mask_ = nullptr;
  std::optional<grammar::Matcher> matcher_;  // p_.grammar's state
  std::vector<uint8_t> allowed_;
  // Masks of states met before (a JSON string's inside recurs at every
  // character): Matcher::state_key -> the trie walk's answer; at most kMaskCache.
  std::unordered_map<std::string, std::vector<uint8_t>> mask_cache_;
  static constexpr size_t kMaskCache = 32;
  std::vector<int32_t> generated_;
  std::string text_;
  size_t sent_ = 0;  // bytes of text_ released
};

}  // namespace lr
