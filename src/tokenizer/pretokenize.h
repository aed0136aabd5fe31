// Pre-tokenizer: splits text into words with a chain of regexes (PCRE2, UTF +
// UCP mode). Each regex refines the pieces produced by the previous one; text a
// regex does not match stays a piece of its own, so the pieces always cover the
// input exactly. Lookarounds only see the piece being split.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lr {

class PreTokenizer {
 public:
  // Compiles the patterns; throws lr::Error naming the pattern on failure.
  explicit PreTokenizer(std::vector<std::string> patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // The regex chain for a tokenizer.ggml.pre name. Unknown names get the GPT-2
  // pattern and *known is set to false.
  static std::vector<std::string> patterns_for(std::string_view pre, bool* known);
  // Whether a pre name keeps a word whole when it is itself a vocab entry
  // (HF "ignore_merges", used by LLaMA 3).
  static bool ignores_merges(std::string_view pre);

  // Appends the pieces of `text` to `out` (views into `text`). Invalid UTF-8
  // bytes become one-byte pieces of their own.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Regex;
  void split_valid(std::string_view text, std::vector<std::string_view>& out) const;

  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace lr
