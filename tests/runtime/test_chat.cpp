// The chat template as the commands and the server use it (runtime/chat.h):
// the model's Jinja template (rendered as transformers renders it; the
// engine's own goldens are tests/template), ChatML when the model has none,
// --chat-template files, the turn's end tokens and BOS written once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../error_of.h"
#include "core/error.h"
#include "format/gguf.h"
#include "runtime/chat.h"
#include "tokenizer/tokenizer.h"

namespace lr {
namespace {

const std::string kTemplates = LOWRANK_SOURCE_DIR "/tests/fixtures/templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::unique_ptr<Tokenizer> spm_vocab() {  // Llama 2's: <s> (BOS, added), </s>
  return Tokenizer::from_gguf(
      *gguf::File::open(LOWRANK_SHARED_DIR "/data/tokenizer/ggml-vocab-llama-spm.gguf"));
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string p = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// llama-server's ChatML for a model without a template.
TEST(Chat, ChatMLWhenTheModelHasNone) {
  const ChatTemplate t;
  EXPECT_TRUE(t.fallback());
  EXPECT_EQ(t.render({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.render({{"user", "Hi"}, {"assistant", "Hello"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
  EXPECT_EQ(t.end_tokens(), std::vector<std::string>{"<|im_end|>"});
}

// SmolLM2's own template (read from its GGUF): its default system turn, as
// Python's jinja2 renders it under transformers' settings (this literal).
TEST(Chat, TheModelsTemplateWithItsDefaultSystemTurn) {
  const ChatTemplate t(read(kTemplates + "smollm2-135m-instruct.jinja"), "<|im_start|>",
                       "<|im_end|>");
  EXPECT_FALSE(t.fallback());
  EXPECT_EQ(t.render({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.end_tokens(), std::vector<std::string>{"<|im_end|>"});
}

// Qwen2.5's template with tools: the tools section is the template's own
// (the <tools> block and the <tool_call> instructions), key order as given.
TEST(Chat, ToolsReachTheTemplate) {
  const ChatTemplate t(read(kTemplates + "qwen2.5-coder-instruct.jinja"), "", "<|im_end|>");
  const auto tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  const auto msgs =
      nlohmann::ordered_json::parse(R"([{"role":"user","content":"Weather in Oslo?"}])");
  const std::string p = t.apply(msgs, tools, true);
  EXPECT_NE(p.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                   "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                   "\"string\"}}}}}\n</tools>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<tool_call>"), std::string::npos);
  EXPECT_EQ(p.substr(p.size() - 22), "<|im_start|>assistant\n");
  EXPECT_EQ(t.apply(msgs, nullptr, true).find("<tools>"), std::string::npos);
}

// What the commands and the server hand the template is what transformers
// hands it: the models' own templates through ChatTemplate::apply give
// jinja2's renders of golden.json (every case: tools, tool calls, turns).
TEST(Chat, ApplySetsTheVariablesAsTransformers) {
  const auto golden = nlohmann::ordered_json::parse(read(kTemplates + "golden.json"));
  int n = 0;
  for (const auto& c : golden) {
    const std::string name = c["template"];
    if (name != "smollm2-135m-instruct.jinja" && name != "qwen2.5-coder-instruct.jinja") continue;
    const auto& ctx = c["context"];
    ASSERT_TRUE(c.contains("output")) << name << " " << c["case"];
    const ChatTemplate t(read(kTemplates + name), ctx["bos_token"], ctx["eos_token"]);
    EXPECT_EQ(t.apply(ctx["messages"], ctx["tools"], ctx["add_generation_prompt"]),
              c["output"].get<std::string>())
        << name << " " << c["case"];
    ++n;
  }
  EXPECT_EQ(n, 18);
}

// A template that writes BOS itself gets no second one; the turn's end
// tokens and EOS stop the answer.
TEST(Chat, BosOnceAndTheEndTokensStop) {
  const auto tok = spm_vocab();
  ASSERT_TRUE(tok->add_bos());
  const std::string path = temp_file(
      "lowrank-chat-inst.jinja",
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} "
      "[/INST]{% else %}{{ m.content }}</s>{% endif %}{% endfor %}");
  const ChatTemplate t = ChatTemplate::of(*tok, path);
  EXPECT_EQ(t.render({{"user", "Hi"}}, true), "<s>[INST] Hi [/INST]");
  const PromptTokens p = chat_prompt(*tok, t, {{"user", "Hi"}});
  ASSERT_GE(p.ids.size(), 2u);
  EXPECT_EQ(p.ids[0], tok->bos_id());
  EXPECT_NE(p.ids[1], tok->bos_id());
  EXPECT_EQ(p.ids, tok->encode("<s>[INST] Hi [/INST]", false, true));
  EXPECT_EQ(p.stop, std::set<int32_t>{tok->eos_id()});  // </s> is also EOS
  // The vocabulary has no template: ChatML, BOS added by the tokenizer.
  const ChatTemplate chatml = ChatTemplate::of(*tok);
  EXPECT_TRUE(chatml.fallback());
  EXPECT_EQ(chat_prompt(*tok, chatml, {{"user", "Hi"}}).ids[0], tok->bos_id());
}

TEST(Chat, BadTemplateFilesAreNamed) {
  const auto tok = spm_vocab();
  EXPECT_NE(test::error_of([&] {
              ChatTemplate::of(*tok, "/nonexistent/t.jinja");
            }).find("--chat-template /nonexistent/t.jinja: cannot open the file"),
            std::string::npos);
  const std::string bad = temp_file("lowrank-chat-bad.jinja", "{{ messages | wordwrap }}\n");
  const std::string e = test::error_of([&] { ChatTemplate::of(*tok, bad); });
  EXPECT_NE(e.find(bad + ": chat template line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("wordwrap"), std::string::npos) << e;
  // What the template raises reaches the caller.
  const ChatTemplate raising(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first comes the user') }}{% endif %}",
      "", "");
  EXPECT_NE(test::error_of([&] {
              raising.render({{"system", "x"}}, true);
            }).find("chat template raised: first comes the user"),
            std::string::npos);
}

}  // namespace
}  // namespace lr
