// Chat templates. lowrank recognises the template families by their markup
// (reading `tokenizer.chat_template`) rather than running Jinja: ChatML
// (<|im_start|>role ... <|im_end|>, SmolLM2, Qwen), Llama-3 headers, and
// Llama-2 [INST].
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace lr {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { ChatML, Llama3, Llama2 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::ChatML;
  std::string default_system;  // injected when the conversation has no system message
};

// Recognises `jinja` (may be empty: ChatML without default system prompt).
// Throws lr::Error for a template of an unknown family.
ChatTemplate parse_chat_template(const std::string& jinja);

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// Names of the tokens that end a turn in this format (looked up in the vocab).
std::vector<std::string> chat_end_tokens(const ChatTemplate& t);

class Tokenizer;

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
// Plain text continued as it is (BOS as the tokenizer wants; special tokens as text).
PromptTokens text_prompt(const Tokenizer& tok, const std::string& text);

}  // namespace lr
