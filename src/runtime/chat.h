// Chat templates: the model's own `tokenizer.chat_template` (or a file given
// with --chat-template), a Jinja program rendered as HF transformers renders
// it (template/template.h); ChatML for a model that has none, as
// llama-server falls back to it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace lr {

namespace jinja {
class Template;
}
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // ChatML (the fallback), with no bos or eos token.
  ChatTemplate();
  // The Jinja `source`; bos_token and eos_token are the texts the template
  // sees under those names. Throws lr::Error naming the line and the
  // construct the engine lacks.
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token);
  // The file `path`, when given; else the tokenizer's template; else ChatML
  // (fallback() tells). Throws lr::Error for an unreadable file or a
  // template the engine cannot run.
  static ChatTemplate of(const Tokenizer& tok, const std::string& path = "");

  // The prompt for `messages` (OpenAI's form: [{"role", "content", ...}])
  // and `tools` (an array of OpenAI tool definitions, or null: none), as the
  // template writes it. Throws lr::Error for what the template raises.
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt) const;
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // True for ChatML given because the model has no template of its own.
  bool fallback() const { return fallback_; }
  // The texts of the tokens that end a turn here: those of the known
  // end-of-turn tokens that the template writes.
  const std::vector<std::string>& end_tokens() const { return end_tokens_; }
  // The Jinja source (what tells a model's tool-call syntax).
  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<const jinja::Template> t_;
  std::string source_;
  std::string bos_, eos_;
  bool fallback_ = false;
  std::vector<std::string> end_tokens_;
};

// A prompt as token ids, and the tokens that end the model's answer to it.
struct PromptTokens {
  std::vector<int32_t> ids;
  std::set<int32_t> stop;
};
// A conversation through template t: rendered with the generation prompt,
// BOS added where the tokenizer wants one and the template does not write
// it, special tokens parsed; stop: end of sequence and the turn's end tokens.
PromptTokens chat_prompt(const Tokenizer& tok, const ChatTemplate& t,
                         const std::vector<ChatMessage>& messages);
// The same for messages in OpenAI's form and tool definitions (null: none).
PromptTokens chat_prompt(const Tokenizer& tok, const ChatTemplate& t,
                         const nlohmann::ordered_json& messages,
                         const nlohmann::ordered_json& tools);
// Plain text continued as it is (BOS as the tokenizer wants; special tokens as text).
PromptTokens text_prompt(const Tokenizer& tok, const std::string& text);

}  // namespace lr
