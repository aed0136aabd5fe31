#include "tokenizer/tokenizer.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special.h"
#include "tokenizer/spm.h"

namespace lr {

struct Tokenizer::Impl {
  Vocab vocab;
  std::unique_ptr<PreTokenizer> pre;  // byte-level BPE only
  bool ignore_merges = false;
};

namespace {

void warn_unknown_pre(const std::string& pre) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(pre).second)
    std::fprintf(stderr, "lowrank: warning: unknown tokenizer.ggml.pre '%s', using the GPT-2 pre-tokenizer\n",
                 pre.c_str());
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> NN, else -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_spec(VocabSpec spec) {
  auto impl = std::make_unique<Impl>();
  std::vector<std::string> patterns = std::move(spec.pre_patterns);
  const std::optional<bool> ignore_merges = spec.ignore_merges;
  impl->vocab = build_vocab(std::move(spec));
  if (impl->vocab.kind == VocabKind::BytePairGpt2) {
    if (patterns.empty()) {
      bool known = true;
      patterns = PreTokenizer::patterns_for(impl->vocab.pre, &known);
      if (!known) warn_unknown_pre(impl->vocab.pre);
    }
    impl->pre = std::make_unique<PreTokenizer>(std::move(patterns));
    impl->ignore_merges = ignore_merges.value_or(PreTokenizer::ignores_merges(impl->vocab.pre));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Vocab& v = impl_->vocab;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && v.bos >= 0) out.push_back(v.bos);
  const std::vector<Fragment> frags = partition_specials(v, text, parse_special);

  if (v.kind == VocabKind::BytePairGpt2) {
    std::vector<std::string_view> words;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      words.clear();
      impl_->pre->split(text.substr(f.off, f.len), words);
      for (std::string_view w : words) bpe_encode_word(v, w, impl_->ignore_merges, out);
    }
    return out;
  }

  // SentencePiece: a space is prepended to the text at the start and after
  // every special token.
  bool prev_special = true;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string raw;
    if (v.add_space_prefix && prev_special) raw = ' ';
    raw.append(text.substr(f.off, f.len));
    spm_encode(v, spm_escape_spaces(raw), out);
    prev_special = false;
  }
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= impl_->vocab.size())
    fail("tokenizer: token id {} is outside the vocabulary (0..{})", id, impl_->vocab.size() - 1);
}

std::string Tokenizer::token_piece(int32_t id, bool render_special) const {
  check_id(id);
  const Vocab& v = impl_->vocab;
  const std::string& text = v.text[id];
  switch (v.type[id]) {
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::Unused:
      return render_special ? text : std::string();
    case TokenType::UserDefined:
      return text;
    case TokenType::Byte:
      if (v.kind == VocabKind::SentencePiece) {
        if (const int b = parse_byte_token(text); b >= 0) return std::string(1, static_cast<char>(b));
      }
      break;
    default:
      break;
  }
  if (v.kind == VocabKind::BytePairGpt2) return byte_level::decode(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

void Tokenizer::append_piece(int32_t id, bool render_special, bool& at_start, std::string& out) const {
  std::string piece = token_piece(id, render_special);
  const Vocab& v = impl_->vocab;
  const TokenType t = v.type[id];
  if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) {
    out += piece;  // "" unless rendered; does not end the start of the text
    return;
  }
  if (at_start && v.kind == VocabKind::SentencePiece && v.add_space_prefix &&
      (t == TokenType::Normal || t == TokenType::Undefined) && !piece.empty() && piece[0] == ' ')
    piece.erase(0, 1);
  at_start = false;
  out += piece;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) append_piece(id, render_special, at_start, out);
  return out;
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.size(); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot_id() const { return impl_->vocab.eot; }
int32_t Tokenizer::unk_id() const { return impl_->vocab.unk; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
std::optional<int32_t> Tokenizer::find(std::string_view token_text) const {
  return impl_->vocab.find(token_text);
}
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->vocab.type[id] == TokenType::Control;
}
TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return impl_->vocab.type[id];
}
const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return impl_->vocab.text[id];
}
const std::string& Tokenizer::chat_template() const { return impl_->vocab.chat_template; }
VocabKind Tokenizer::kind() const { return impl_->vocab.kind; }
const std::string& Tokenizer::pre() const { return impl_->vocab.pre; }

}  // namespace lr
