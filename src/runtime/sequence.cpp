#include "runtime/sequence.h"

#include <algorithm>

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

Sequence::Sequence(const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenParams& p)
    : p_(p), sampler_(p.sampling), decoder_(tok), history_(prompt), n_prompt_(prompt.size()) {
  p_.stop.erase(std::remove(p_.stop.begin(), p_.stop.end(), std::string()), p_.stop.end());
}

Sequence::Step Sequence::next(const float* logits, int vocab, bool room) {
  Step out;
  out.id = sampler_.sample(logits, vocab, history_, n_prompt_);
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
