#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#ifndef LOWRANK_NO_PCRE2
#include <pcre2.h>
#endif

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace lr {

namespace {

// GPT-2 (also the default): contractions, letters, digits, other symbols, each
// optionally led by one space; whitespace runs leave their last space to the
// next word.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

#ifndef LOWRANK_NO_PCRE2
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

#endif

}  // namespace

#ifdef LOWRANK_NO_PCRE2
// A build without PCRE2 (LOWRANK_NO_PCRE2: a LOWRANK_DEPS build on a machine without it): SentencePiece vocabularies work,
// byte-level BPE ones (which split text with these regexes) say what is missing.
struct PreTokenizer::Regex {};
PreTokenizer::PreTokenizer(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
  fail("tokenizer: byte-level BPE vocabularies need PCRE2, and this lowrank was built without it "
       "(none was found for this LOWRANK_DEPS build)");
}
void PreTokenizer::split_valid(std::string_view, std::vector<std::string_view>&) const {}
#else
struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
  for (const std::string& p : patterns_) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto re = std::make_unique<Regex>();
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!re->code) {
      fail("tokenizer: pre-tokenizer regex '{}' does not compile at offset {}: {}", p, off,
           pcre2_message(err));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back when absent
    regexes_.push_back(std::move(re));
  }
}

#endif

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::patterns_for(std::string_view pre, bool* known) {
  if (known) *known = true;
  if (pre == "gpt2" || pre == "gpt-2" || pre == "default" || pre.empty()) return {kGpt2};
  // SmolLM: every digit is a word of its own, then the GPT-2 split.
  if (pre == "smollm") return {R"(\p{N})", kGpt2};
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "dbrx" ||
      pre == "smaug-bpe")
    return {kLlama3};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {kQwen2};
  if (known) *known = false;
  return {kGpt2};
}

bool PreTokenizer::ignores_merges(std::string_view pre) {
  return pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3";
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  // PCRE2 in UTF mode needs valid UTF-8: run it on valid stretches only.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8::valid_char_len(text, i);
    if (n > 0) {
      i += n;
      continue;
    }
    if (i > start) split_valid(text.substr(start, i - start), out);
    out.push_back(text.substr(i, 1));
    start = ++i;
  }
  if (i > start) split_valid(text.substr(start, i - start), out);
}

#ifndef LOWRANK_NO_PCRE2
void PreTokenizer::split_valid(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> cur{text}, next;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    if (!md) fail("tokenizer: out of memory for regex match data");
    next.clear();
    for (std::string_view piece : cur) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, last = 0;
      while (pos < piece.size()) {
        int rc = pcre2_match(re->code, subj, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
          rc = pcre2_match(re->code, subj, piece.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                           nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          fail("tokenizer: regex match failed: {}", pcre2_message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t s = ov[0], e = ov[1];
        if (e == s) {  // empty match: step over one character
          pos = s + std::max<size_t>(1, utf8::valid_char_len(piece, s));
          continue;
        }
        if (s > last) next.push_back(piece.substr(last, s - last));
        next.push_back(piece.substr(s, e - s));
        last = pos = e;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pcre2_match_data_free(md);
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

#endif

}  // namespace lr
