// lowrank run: generate text from a prompt. A model with a chat template
// answers it (the prompt is the user turn, as llama.cpp's CLI does in
// conversation mode); --raw continues the prompt as plain text.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "answer.h"
#include "common.h"
#include "core/error.h"
#include "runtime/chat.h"
#include "runtime/engine.h"

namespace lr::cli {

namespace {

constexpr int kStepTokens = 512;  // prompt tokens per step: the CPU session's prefill chunk

struct RunOptions {
  ModelOptions model;
  DraftOptions draft;
  std::string prompt;
  std::string prompt_file;
  int n_predict = 128;
  bool chat = false;  // --chat: the chat template even when the model has none (ChatML)
  bool raw = false;
  std::string system;
  std::string chat_template;  // --chat-template FILE
  SamplerParams sampling;
  ConstraintOptions constraint;
};

int run(const RunOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) fail("{}: cannot open prompt file", o.prompt_file);
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  if (prompt.empty()) fail("no prompt: give one with -p TEXT or -f FILE");
  if (o.raw && o.chat) fail("--raw and --chat exclude each other");
  if (o.raw && !o.system.empty()) fail("--system needs the chat template (drop --raw)");
  const std::shared_ptr<const grammar::Grammar> grammar = o.constraint.compile();

  Model m = load_model(o.model.model_path(), o.model.weight_type());
  const Tokenizer& tok = *m.tokenizer;
  if (o.raw && !o.chat_template.empty()) fail("--raw and --chat-template exclude each other");
  bool chat = !o.raw && (o.chat || !o.chat_template.empty() || !tok.chat_template().empty());
  ChatTemplate t;
  if (chat) {
    try {
      t = ChatTemplate::of(tok, o.chat_template);
    } catch (const Error& e) {
      if (o.chat || !o.chat_template.empty()) throw;
      std::fprintf(stderr,
                   "lowrank: %s; continuing the prompt as plain text (--raw does so without this "
                   "note, --chat-template FILE gives a template)\n",
                   e.what());
      chat = false;
    }
  }
  std::vector<ChatMessage> msgs;
  if (chat && !o.system.empty()) msgs.push_back({"system", o.system});
  msgs.push_back({"user", prompt});
  const PromptTokens p = chat ? chat_prompt(tok, t, msgs) : text_prompt(tok, prompt);
  const ExecPath path = o.model.path();
  const BackendOptions bo = o.model.backend_options();
  EngineOptions eo;
  o.draft.configure(eo, m, o.model, 1, kStepTokens);
  Engine engine(make_slots(m, path, bo, 1, kStepTokens, eo.draft_max > 0), tok, eo);
  GenParams g;
  g.sampling = o.sampling;
  g.max_tokens = o.n_predict;
  g.stop_tokens = p.stop;
  g.grammar = grammar;
  if (!chat) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  const Answer a = stream_answer(engine, p.ids, g, stdout);
  std::printf("\n");
  std::fflush(stdout);
  print_answer_stats(stderr, describe(path, bo), a);
  return 0;
}

}  // namespace

Runner add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "generate text from a prompt");
  o->model.add_to(*sub, 2048);
  o->draft.add_to(*sub);
  sub->add_option("-p,--prompt", o->prompt, "prompt text");
  sub->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
  sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--raw", o->raw, "plain completion: continue the prompt as text (no chat template)");
  sub->add_flag("--chat", o->chat, "apply a chat template even when the model has none (ChatML); the default when it has one");
  sub->add_option("--system", o->system, "system message of the chat");
  sub->add_option("--chat-template", o->chat_template,
                  "a Jinja chat template file to use instead of the model's own");
  add_sampling_options(*sub, o->sampling);
  o->constraint.add_to(*sub);
  return [o, sub] {
    seed_unless_given(*sub, o->sampling);
    return run(*o);
  };
}

}  // namespace lr::cli
