#include "runtime/chat.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

namespace lr {

namespace {

// ChatML, the template a model without one gets (llama-server's fallback too).
const char* const kChatML =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Tokens that end a turn in the template families people download; a
// template's own are those it writes.
const char* const kEndOfTurn[] = {
    "<|im_end|>",           "<|eot_id|>",      "<|eom_id|>", "<|end|>",    "<end_of_turn>",
    "<|endoftext|>",        "<|end_of_text|>", "</s>",       "<|return|>", "<|END_OF_TURN_TOKEN|>",
    "<｜end▁of▁sentence｜>"};

std::string special_text(const Tokenizer& tok, int32_t id) {
  return id >= 0 ? tok.token_piece(id, /*render_special=*/true) : "";
}

}  // namespace

ChatTemplate::ChatTemplate() : ChatTemplate(kChatML, "", "") {
  fallback_ = true;
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : t_(std::make_shared<const jinja::Template>(source)),
      source_(source),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)) {
  for (const char* e : kEndOfTurn)
    if (source.find(e) != std::string::npos) end_tokens_.push_back(e);
}

ChatTemplate ChatTemplate::of(const Tokenizer& tok, const std::string& path) {
  std::string source = tok.chat_template();
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("--chat-template {}: cannot open the file", path);
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    if (source.empty()) fail("--chat-template {}: the file is empty", path);
  }
  if (source.empty()) {
    ChatTemplate t;
    t.bos_ = special_text(tok, tok.bos_id());
    t.eos_ = special_text(tok, tok.eos_id());
    return t;
  }
  try {
    return ChatTemplate(source, special_text(tok, tok.bos_id()), special_text(tok, tok.eos_id()));
  } catch (const Error& e) {
    fail("{}: {}", path.empty() ? std::string("the model's chat template") : path, e.what());
  }
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools,
                                bool add_generation_prompt) const {
  // The variables transformers' apply_chat_template sets: tools and
  // documents are always defined (None when not given), so a template's
  // `tools is defined` sees what it sees there.
  nlohmann::ordered_json ctx = {
      {"messages", messages}, {"tools", tools},
      {"documents", nullptr}, {"add_generation_prompt", add_generation_prompt},
      {"bos_token", bos_},    {"eos_token", eos_}};
  return t_->render(ctx);
}

namespace {

// Messages in OpenAI's form, as templates read them.
nlohmann::ordered_json messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  for (const ChatMessage& c : messages) m.push_back({{"role", c.role}, {"content", c.content}});
  return m;
}

}  // namespace

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  return apply(messages_json(messages), nullptr, add_generation_prompt);
}

namespace {

std::set<int32_t> end_of_sequence(const Tokenizer& tok) {
  std::set<int32_t> stop;
  if (tok.eos_id() >= 0) stop.insert(tok.eos_id());
  return stop;
}

}  // namespace

PromptTokens chat_prompt(const Tokenizer& tok, const ChatTemplate& t,
                         const std::vector<ChatMessage>& messages) {
  return chat_prompt(tok, t, messages_json(messages), nullptr);
}

PromptTokens chat_prompt(const Tokenizer& tok, const ChatTemplate& t,
                         const nlohmann::ordered_json& messages,
                         const nlohmann::ordered_json& tools) {
  PromptTokens p{{}, end_of_sequence(tok)};
  const std::string text = t.apply(messages, tools, true);
  for (const std::string& name : t.end_tokens())
    if (auto id = tok.find(name)) p.stop.insert(*id);
  // A template that writes BOS itself must not get a second one.
  bool add_bos = tok.add_bos();
  const std::string bos = special_text(tok, tok.bos_id());
  if (!bos.empty() && text.rfind(bos, 0) == 0) add_bos = false;
  p.ids = tok.encode(text, add_bos, /*parse_special=*/true);
  return p;
}

PromptTokens text_prompt(const Tokenizer& tok, const std::string& text) {
  return {tok.encode(text, tok.add_bos(), /*parse_special=*/false), end_of_sequence(tok)};
}

}  // namespace lr
