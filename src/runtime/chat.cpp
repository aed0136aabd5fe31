#include "runtime/chat.h"

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lr {

ChatTemplate parse_chat_template(const std::string& jinja) {
  ChatTemplate t;
  if (jinja.empty() || jinja.find("<|im_start|>") != std::string::npos) {
    t.format = ChatFormat::ChatML;
    // A default system turn written literally in the template, as SmolLM2's is:
    // '<|im_start|>system\n...<|im_end|>'.
    const std::string open = "<|im_start|>system\n";
    size_t a = jinja.find(open);
    if (a != std::string::npos) {
      size_t b = jinja.find("<|im_end|>", a + open.size());
      if (b != std::string::npos) t.default_system = jinja.substr(a + open.size(), b - a - open.size());
    }
    return t;
  }
  if (jinja.find("<|start_header_id|>") != std::string::npos) {
    t.format = ChatFormat::Llama3;
    return t;
  }
  if (jinja.find("[INST]") != std::string::npos) {
    t.format = ChatFormat::Llama2;
    return t;
  }
  fail("unsupported chat template (lowrank recognises ChatML, Llama-3 and Llama-2 [INST] forms)");
}

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  std::vector<ChatMessage> msgs = messages;
  if (!t.default_system.empty() && (msgs.empty() || msgs[0].role != "system"))
    msgs.insert(msgs.begin(), {"system", t.default_system});
  std::string out;
  switch (t.format) {
    case ChatFormat::ChatML:
      for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatFormat::Llama3:
      out = "<|begin_of_text|>";
      for (const auto& m : msgs)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::Llama2: {
      std::string system;
      for (const auto& m : msgs) {
        if (m.role == "system") {
          system = "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n";
        } else if (m.role == "user") {
          out += "<s>[INST] " + system + m.content + " [/INST]";
          system.clear();
        } else {
          out += " " + m.content + " </s>";
        }
      }
      break;
    }
  }
  return out;
}

std::vector<std::string> chat_end_tokens(const ChatTemplate& t) {
  switch (t.format) {
    case ChatFormat::ChatML: return {"<|im_end|>", "<|endoftext|>"};
    case ChatFormat::Llama3: return {"<|eot_id|>", "<|end_of_text|>"};
    case ChatFormat::Llama2: return {"</s>"};
  }
  return {};
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
  PromptTokens p{{}, end_of_sequence(tok)};
  const std::string text = render_chat(t, messages, true);
  for (const std::string& name : chat_end_tokens(t))
    if (auto id = tok.find(name)) p.stop.insert(*id);
  // A template that writes BOS itself must not get a second one.
  bool add_bos = tok.add_bos();
  const std::string bos = tok.bos_id() >= 0 ? tok.token_piece(tok.bos_id()) : "";
  if (!bos.empty() && text.rfind(bos, 0) == 0) add_bos = false;
  p.ids = tok.encode(text, add_bos, /*parse_special=*/true);
  return p;
}

PromptTokens text_prompt(const Tokenizer& tok, const std::string& text) {
  return {tok.encode(text, tok.add_bos(), /*parse_special=*/false), end_of_sequence(tok)};
}

}  // namespace lr
