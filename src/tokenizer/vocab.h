// Vocabulary data: the raw description a loader fills in (VocabSpec, named after
// the GGUF tokenizer.ggml.* keys) and the validated, indexed form the encoders
// use (Vocab).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lr {

// Values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

enum class VocabKind {
  BytePairGpt2,  // "gpt2": byte-level BPE with ranked merges
  SentencePiece, // "llama": SentencePiece-style BPE over scores with <0xNN> byte fallback
};

// What a loader read. Empty `scores` / `types` mean the key was absent; ids are
// -1 when absent.
struct VocabSpec {
  std::string source;  // file name for messages
  std::string model;   // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;     // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // "left right"
  int64_t bos = -1, eos = -1, unk = -1, eot = -1;
  std::optional<bool> add_bos;
  std::optional<bool> add_space_prefix;
  std::string chat_template;
  // Byte-level BPE only: an explicit regex chain overriding the one `pre` names
  // (tokenizer.json pre-tokenizers), and HF "ignore_merges" (default: by `pre`).
  std::vector<std::string> pre_patterns;
  std::optional<bool> ignore_merges;
  // "llama" only: absent bos/eos/unk default to the SentencePiece ids 1/2/0.
  bool sentencepiece_default_ids = true;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  VocabKind kind = VocabKind::BytePairGpt2;
  std::string pre;
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> to_id;

  struct Merge {
    int32_t rank;
    int32_t result;  // id of left+right, -1 when the vocab lacks it
  };
  std::unordered_map<uint64_t, Merge> merges;  // key: left id << 32 | right id

  // Tokens matched as whole units before pre-tokenization (control, unknown and
  // user-defined types), longest text first.
  std::vector<int32_t> specials;

  // SentencePiece: the <0xNN> token of each byte (-1 when missing).
  // Byte-level BPE: the token of each byte's single-character text.
  std::array<int32_t, 256> byte_token{};

  int32_t bos = -1, eos = -1, unk = -1, eot = -1;
  bool add_bos = false;
  bool add_space_prefix = false;
  std::string chat_template;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  std::optional<int32_t> find(std::string_view s) const {
    auto it = to_id.find(s);
    if (it == to_id.end()) return std::nullopt;
    return it->second;
  }
  static uint64_t pair_key(int32_t l, int32_t r) {
    return static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32 | static_cast<uint32_t>(r);
  }
  const Merge* find_merge(int32_t l, int32_t r) const {
    auto it = merges.find(pair_key(l, r));
    return it == merges.end() ? nullptr : &it->second;
  }
};

// Validates and indexes a spec. Throws lr::Error naming the offending
// tokenizer.ggml.* key (and spec.source) when it is malformed.
Vocab build_vocab(VocabSpec spec);

}  // namespace lr
