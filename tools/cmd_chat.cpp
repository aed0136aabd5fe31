// lowrank chat: a conversation in the terminal, as llama-cli's conversation
// mode. The model's template renders the whole conversation each turn; the
// one-slot engine keeps the previous turns in its cache and evaluates only
// what is new. /clear forgets the conversation, /exit (or end of input)
// quits; Ctrl-C stops the answer being written, and at the prompt quits.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "answer.h"
#include "common.h"
#include "core/error.h"
#include "runtime/chat.h"
#include "runtime/engine.h"

namespace lr::cli {

namespace {

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) {
  g_interrupt.store(true);
}

struct ChatOptions {
  ModelOptions model;
  DraftOptions draft;
  std::string system;
  std::string chat_template;  // --chat-template FILE
  int n_predict = 1024;  // tokens per answer at most
  bool stats = false;
  SamplerParams sampling;
  ConstraintOptions constraint;  // every answer a sentence of it
};

// Ctrl-C sets g_interrupt; a read it interrupts fails (no SA_RESTART).
void catch_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

// The next line of input, or false at its end (or on Ctrl-C).
bool read_turn(std::string& line, bool tty) {
  if (tty) {
    std::fputs("> ", stdout);
    std::fflush(stdout);
  }
  g_interrupt = false;
  if (!std::getline(std::cin, line)) return false;
  return !g_interrupt.load();
}

int chat(const ChatOptions& o) {
  Model m = load_model(o.model.model_path(), o.model.weight_type());
  const Tokenizer& tok = *m.tokenizer;
  const ChatTemplate t = ChatTemplate::of(tok, o.chat_template);  // ChatML when the model has none
  if (t.fallback())
    std::fprintf(stderr, "lowrank chat: the model has no chat template; using ChatML\n");
  const ExecPath path = o.model.path();
  const BackendOptions bo = o.model.backend_options();
  EngineOptions eo;
  o.draft.configure(eo, m, o.model, 1, 512);
  Engine engine(make_slots(m, path, bo, 1, 512, eo.draft_max > 0), tok, eo);
  GenParams g;
  g.sampling = o.sampling;
  g.max_tokens = o.n_predict;
  g.grammar = o.constraint.compile();

  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr,
               "lowrank chat: %s on %s, context %d tokens. /clear forgets the conversation, "
               "/exit quits; Ctrl-C stops an answer.\n",
               o.model.model_path().c_str(), describe(path, bo).c_str(), bo.ctx);
  std::vector<ChatMessage> msgs;
  auto start = [&] {
    msgs.clear();
    if (!o.system.empty()) msgs.push_back({"system", o.system});
  };
  start();
  catch_sigint();
  for (std::string line; read_turn(line, tty);) {
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      start();
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    const PromptTokens p = chat_prompt(tok, t, msgs);
    g.stop_tokens = p.stop;
    Answer a;
    try {
      a = stream_answer(engine, p.ids, g, stdout, &g_interrupt);
    } catch (const Error& e) {  // the conversation no longer fits: say so, keep it as it was
      msgs.pop_back();
      std::fprintf(stderr, "lowrank chat: %s; /clear starts a new conversation\n", e.what());
      continue;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (o.stats) print_answer_stats(stderr, describe(path, bo), a);
    msgs.push_back({"assistant", a.text});
  }
  if (tty) std::fputs("\n", stdout);
  return 0;
}

}  // namespace

Runner add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* sub =
      app.add_subcommand("chat", "an interactive conversation in the terminal (/clear, /exit)");
  o->model.add_to(*sub, 4096);
  o->draft.add_to(*sub);
  sub->add_option("--system", o->system, "system message of the conversation");
  sub->add_option("--chat-template", o->chat_template,
                  "a Jinja chat template file to use instead of the model's own");
  sub->add_option("-n,--n-predict", o->n_predict, "tokens per answer at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--stats", o->stats, "after each answer, its token counts and speeds (stderr)");
  add_sampling_options(*sub, o->sampling);
  o->constraint.add_to(*sub);
  return [o, sub] {
    seed_unless_given(*sub, o->sampling);
    return chat(*o);
  };
}

}  // namespace lr::cli
