#include "tokenizer/vocab.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace lr {

namespace {

int32_t check_id(const VocabSpec& s, int64_t id, const char* key, int32_t n) {
  if (id < -1 || id >= n) fail("{}: {} = {} is outside the vocabulary (0..{})", s.source, key, id, n - 1);
  return static_cast<int32_t>(id);
}

}  // namespace

Vocab build_vocab(VocabSpec spec) {
  Vocab v;
  const std::string& src = spec.source;
  if (spec.model == "gpt2") {
    v.kind = VocabKind::BytePairGpt2;
  } else if (spec.model == "llama") {
    v.kind = VocabKind::SentencePiece;
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (expected 'gpt2' or 'llama')", src,
         spec.model);
  }
  const bool spm = v.kind == VocabKind::SentencePiece;

  if (spec.tokens.empty()) fail("{}: tokenizer.ggml.tokens is empty", src);
  if (spec.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2))
    fail("{}: tokenizer.ggml.tokens has too many entries ({})", src, spec.tokens.size());
  const auto n = static_cast<int32_t>(spec.tokens.size());

  if (!spec.scores.empty() && spec.scores.size() != spec.tokens.size())
    fail("{}: tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", src,
         spec.scores.size(), spec.tokens.size());
  if (spm && spec.scores.empty())
    fail("{}: tokenizer.ggml.scores is missing (required for tokenizer.ggml.model 'llama')", src);
  if (!spec.types.empty() && spec.types.size() != spec.tokens.size())
    fail("{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", src,
         spec.types.size(), spec.tokens.size());

  v.pre = std::move(spec.pre);
  v.text = std::move(spec.tokens);
  v.score = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  v.type.assign(n, TokenType::Normal);
  for (int32_t i = 0; i < static_cast<int32_t>(spec.types.size()); ++i) {
    const int32_t t = spec.types[i];
    if (t < 0 || t > 6) fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", src, i, t);
    v.type[i] = static_cast<TokenType>(t);
  }

  v.to_id.reserve(static_cast<size_t>(n) * 2);
  for (int32_t i = 0; i < n; ++i) v.to_id[v.text[i]] = i;  // a duplicate text maps to its last id

  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size())
      fail("{}: tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", src, r, m);
    const std::string_view left = std::string_view(m).substr(0, sp);
    const std::string_view right = std::string_view(m).substr(sp + 1);
    const auto l = v.find(left);
    const auto rt = v.find(right);
    if (!l || !rt)
      fail("{}: tokenizer.ggml.merges[{}] = '{}' refers to unknown token '{}'", src, r, m,
           l ? right : left);
    std::string joined;
    joined.reserve(m.size() - 1);
    joined.append(left).append(right);
    const auto res = v.find(joined);
    v.merges.try_emplace(Vocab::pair_key(*l, *rt),
                         Vocab::Merge{static_cast<int32_t>(r), res ? *res : -1});
  }

  for (int32_t i = 0; i < n; ++i) {
    const TokenType t = v.type[i];
    if ((t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined) &&
        !v.text[i].empty())
      v.specials.push_back(i);
  }
  std::stable_sort(v.specials.begin(), v.specials.end(), [&](int32_t a, int32_t b) {
    return v.text[a].size() > v.text[b].size();
  });

  for (int b = 0; b < 256; ++b) {
    const auto id = spm ? v.find(fmt::format("<0x{:02X}>", b))
                        : v.find(byte_level::byte_to_text(static_cast<uint8_t>(b)));
    v.byte_token[b] = id ? *id : -1;
  }

  v.bos = check_id(spec, spec.bos, "tokenizer.ggml.bos_token_id", n);
  v.eos = check_id(spec, spec.eos, "tokenizer.ggml.eos_token_id", n);
  v.unk = check_id(spec, spec.unk, "tokenizer.ggml.unknown_token_id", n);
  v.eot = check_id(spec, spec.eot, "tokenizer.ggml.eot_token_id", n);
  if (spm && spec.sentencepiece_default_ids) {  // SentencePiece conventions when the ids are not given
    if (spec.unk < 0 && n > 0) v.unk = 0;
    if (spec.bos < 0 && n > 1) v.bos = 1;
    if (spec.eos < 0 && n > 2) v.eos = 2;
  }
  v.add_bos = spec.add_bos.value_or(spm);
  v.add_space_prefix = spec.add_space_prefix.value_or(spm);
  v.chat_template = std::move(spec.chat_template);
  return v;
}

}  // namespace lr
