// Text <-> token ids for LLaMA-family models.
//
// Two vocabulary kinds (GGUF tokenizer.ggml.model):
//   "gpt2"  byte-level BPE: regex pre-tokenizer chosen by tokenizer.ggml.pre,
//           then ranked merges (tokenizer.ggml.merges) over GPT-2 byte symbols;
//   "llama" SentencePiece-style BPE: spaces -> U+2581 plus a leading one
//           (add_space_prefix), greedy highest-score merging, <0xNN> byte
//           fallback, else the unknown token.
// Special tokens: user-defined entries (type 4) always encode as whole units;
// control (3) and unknown (2) entries only with parse_special; longest first.
//
// A Tokenizer is immutable after construction; encode/decode may run
// concurrently from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace lr::gguf {
class File;
}

namespace lr {

class Tokenizer {
 public:
  // Reads the tokenizer.ggml.* keys (and tokenizer.chat_template). Throws
  // lr::Error naming the key when the vocabulary is missing or malformed.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  // HuggingFace tokenizer.json: BPE (byte-level, or SentencePiece-style with
  // byte_fallback, scored by merge rank) and Unigram (scores used for
  // SentencePiece-style merging). A tokenizer_config.json next to it supplies
  // bos/eos tokens, add_bos_token and chat_template when present.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& path);
  // From an in-memory description (tests, converters); validated like a file.
  static std::unique_ptr<Tokenizer> from_spec(VocabSpec spec);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_bos: prepend bos_id() (when the vocab has one). parse_special: encode
  // control-token texts such as "<|im_start|>" as those tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const;

  // The raw bytes token `id` stands for: byte-level text decoded, U+2581 -> ' ',
  // <0xNN> -> that byte. Control, unknown and unused tokens give "" unless
  // render_special, which gives their vocab text. Throws lr::Error when id is
  // outside [0, n_vocab()).
  std::string token_piece(int32_t id) const { return token_piece(id, false); }
  std::string token_piece(int32_t id, bool render_special) const;

  // Concatenated pieces; for "llama" vocabs with add_space_prefix the space the
  // encoder prepends is removed from the first text token again.
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids, false); }
  // render_special: control/unknown tokens appear as their vocab text.
  std::string decode(const std::vector<int32_t>& ids, bool render_special) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when absent
  int32_t eos_id() const;  // -1 when absent
  int32_t eot_id() const;  // tokenizer.ggml.eot_token_id, -1 when absent
  int32_t unk_id() const;  // -1 when absent
  bool add_bos() const;    // tokenizer.ggml.add_bos_token (default: true for llama, false for gpt2)
  std::optional<int32_t> find(std::string_view token_text) const;  // exact vocab entry
  bool is_control(int32_t id) const;                               // token_type CONTROL (3)
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // the vocab entry as stored
  const std::string& chat_template() const;          // tokenizer.chat_template or ""
  VocabKind kind() const;
  const std::string& pre() const;  // tokenizer.ggml.pre as given

 private:
  friend class StreamDecoder;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  void check_id(int32_t id) const;
  // Appends the piece of `id`, dropping the prefix space of the first text token
  // (see decode). `at_start` tracks whether any text token was seen yet.
  void append_piece(int32_t id, bool render_special, bool& at_start, std::string& out) const;

  std::unique_ptr<Impl> impl_;
};

// Streaming detokenizer: push() returns the text that became complete; bytes of
// an unfinished UTF-8 character are held back until the character completes
// (or turns out invalid, when they are passed through unchanged). The
// concatenation of all push() results and flush() equals decode() of the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false);
  std::string push(int32_t id);
  // Returns whatever is held back (possibly an incomplete character).
  std::string flush();
  // Starts a new text: the next token is treated like the first of decode().
  void reset();

 private:
  const Tokenizer& tok_;
  bool render_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace lr
