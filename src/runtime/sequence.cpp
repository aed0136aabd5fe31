#include "runtime/sequence.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace lr {

namespace {

// Bytes at the end of `text` that begin one of the stop strings (a match may still follow).
size_t held_back(const std::string& text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& s : stop)
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

}  // namespace

std::unique_ptr<grammar::TokenMask> token_mask(const Tokenizer& tok) {
  std::vector<std::string> bytes(size_t(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) bytes[size_t(id)] = tok.token_piece(id);
  return std::make_unique<grammar::TokenMask>(std::move(bytes), std::vector<int32_t>{});
}

Sequence::Sequence(const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenParams& p,
                   const grammar::TokenMask* mask)
    : p_(p),
      sampler_(p.sampling),
      decoder_(tok),
      history_(prompt),
      n_prompt_(prompt.size()),
      tok_(tok),
      mask_(mask) {
  p_.stop.erase(std::remove(p_.stop.begin(), p_.stop.end(), std::string()), p_.stop.end());
  if (p.grammar) {
    LR_ASSERT(mask && int64_t(mask->vocab_size()) == tok.n_vocab());
    matcher_.emplace(p.grammar);
  }
}

bool Sequence::mask(int vocab) {
  std::string key = matcher_->state_key();
  if (auto it = mask_cache_.find(key); it != mask_cache_.end()) {
    allowed_ = it->second;
  } else {
    mask_->fill(*matcher_, allowed_);
    if (mask_cache_.size() >= kMaskCache) mask_cache_.clear();
    mask_cache_.emplace(std::move(key), allowed_);
  }
  const bool end = matcher_->can_end();
  for (int32_t id : p_.stop_tokens)
    if (id >= 0 && id < vocab) allowed_[size_t(id)] = end;
  return std::any_of(allowed_.begin(), allowed_.end(), [](uint8_t a) { return a != 0; });
}

Sequence::Step Sequence::next(const float* logits, int vocab, bool room, const Proposal* draft) {
  Step out;
  bool masked = false;
  if (matcher_) {  // (free text reads no clock)
    const auto t0 = std::chrono::steady_clock::now();
    masked = mask(vocab);
    out.mask_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (matcher_ && !masked) {  // the sentence is complete (and no stop token may end it)
    text_ += decoder_.flush();
    out.text = release(true);
    out.finish = Finish::Stop;
    return out;
  }
  const uint8_t* allowed = matcher_ ? allowed_.data() : nullptr;
  out.id =
      draft ? sampler_.verify(logits, vocab, history_, n_prompt_, allowed, draft->id, *draft->q).id
            : sampler_.sample(logits, vocab, history_, n_prompt_, allowed);
  if (matcher_ && !p_.stop_tokens.count(out.id)) {
    const bool ok = matcher_->accept_bytes(tok_.token_piece(out.id));
    LR_ASSERT(ok);  // the mask allowed it
  }
  history_.push_back(out.id);
  generated_.push_back(out.id);
  if (p_.top_logprobs >= 0) {
    TokenOut t;
    t.id = out.id;
    t.logprob = token_logprob(logits, vocab, out.id, p_.top_logprobs, &t.top);
    out.token = std::move(t);
  }
  if (p_.stop_tokens.count(out.id)) {
    out.text = release(true);
    out.finish = Finish::Stop;
    return out;
  }
  text_ += decoder_.push(out.id);
  for (const std::string& stop : p_.stop) {
    const size_t at = text_.find(stop, sent_ >= stop.size() ? sent_ - stop.size() : 0);
    if (at != std::string::npos) {
      text_.resize(at);
      sent_ = std::min(sent_, at);
      out.text = release(true);
      out.finish = Finish::Stop;
      return out;
    }
  }
  if (int(generated_.size()) >= p_.max_tokens || !room) {
    text_ += decoder_.flush();
    out.text = release(true);
    out.finish = Finish::Length;
    return out;
  }
  out.text = release(false);
  return out;
}

std::string Sequence::release(bool final) {
  const size_t upto = final ? text_.size() : text_.size() - held_back(text_, p_.stop);
  std::string text = upto > sent_ ? text_.substr(sent_, upto - sent_) : "";
  sent_ = std::max(sent_, upto);
  return text;
}

}  // namespace lr
