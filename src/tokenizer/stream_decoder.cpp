#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace lr {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
  tok_.append_piece(id, render_special_, at_start_, pending_);
  const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

void StreamDecoder::reset() {
  at_start_ = true;
  pending_.clear();
}

}  // namespace lr
