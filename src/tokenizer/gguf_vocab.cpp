// Tokenizer::from_gguf: reads the tokenizer.ggml.* metadata keys.
#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace lr {

namespace {

int64_t optional_id(const gguf::File& f, std::string_view key) {
  return f.has(key) ? f.get_int(key) : -1;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  VocabSpec s;
  s.source = f.path();
  if (!f.has("tokenizer.ggml.model")) fail("{}: missing key tokenizer.ggml.model", f.path());
  s.model = f.get_string("tokenizer.ggml.model");
  s.pre = f.get_string("tokenizer.ggml.pre", "default");
  if (!f.has("tokenizer.ggml.tokens")) fail("{}: missing key tokenizer.ggml.tokens", f.path());
  s.tokens = f.get_strings("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.scores")) {
    const std::vector<double>& sc = f.get_floats("tokenizer.ggml.scores");
    s.scores.assign(sc.begin(), sc.end());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t>& ty = f.get_ints("tokenizer.ggml.token_type");
    s.types.reserve(ty.size());
    for (size_t i = 0; i < ty.size(); ++i) {
      if (ty[i] < 0 || ty[i] > 6)
        fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6)", f.path(), i, ty[i]);
      s.types.push_back(static_cast<int32_t>(ty[i]));
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    s.merges = f.get_strings("tokenizer.ggml.merges");
  } else if (s.model == "gpt2") {
    fail("{}: missing key tokenizer.ggml.merges (required for tokenizer.ggml.model 'gpt2')", f.path());
  }
  s.bos = optional_id(f, "tokenizer.ggml.bos_token_id");
  s.eos = optional_id(f, "tokenizer.ggml.eos_token_id");
  s.unk = optional_id(f, "tokenizer.ggml.unknown_token_id");
  s.eot = optional_id(f, "tokenizer.ggml.eot_token_id");
  if (f.has("tokenizer.ggml.add_bos_token")) s.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.has("tokenizer.ggml.add_space_prefix"))
    s.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  s.chat_template = f.get_string("tokenizer.chat_template", "");
  return from_spec(std::move(s));
}

}  // namespace lr
