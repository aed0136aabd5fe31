// lowrank run: generate text from a prompt. A model with a chat template
// answers it (the prompt is the user turn, as llama.cpp's CLI does in
// conversation mode); --raw continues the prompt as plain text.
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "common.h"
#include "core/error.h"
#include "runtime/chat.h"
#include "runtime/generate.h"

namespace lr::cli {

namespace {

struct RunOptions {
  ModelOptions model;
  std::string prompt;
  std::string prompt_file;
  int n_predict = 128;
  bool chat = false;  // --chat: the chat template even when the model has none (ChatML)
  bool raw = false;
  std::string system;
  SamplerParams sampling;
  bool seed_given = false;
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

  Model m = load_model(o.model.model_path(), o.model.weight_type());
  const Tokenizer& tok = *m.tokenizer;
  bool chat = !o.raw && (o.chat || !tok.chat_template().empty());
  ChatTemplate t;
  if (chat) {
    try {
      t = parse_chat_template(tok.chat_template());
    } catch (const Error& e) {
      if (o.chat) throw;
      std::fprintf(stderr, "lowrank: %s; continuing the prompt as plain text (--raw does so without this note, --chat applies ChatML)\n", e.what());
      chat = false;
    }
  }
  std::vector<ChatMessage> msgs;
  if (chat && !o.system.empty()) msgs.push_back({"system", o.system});
  msgs.push_back({"user", prompt});
  const PromptTokens p = chat ? chat_prompt(tok, t, msgs) : text_prompt(tok, prompt);
  const std::vector<int32_t>& ids = p.ids;
  const std::set<int32_t>& stop = p.stop;
  if (int(ids.size()) >= o.model.ctx)
    fail("the prompt has {} tokens, which does not fit a context of {} (raise -c)", ids.size(),
         o.model.ctx);

  auto backend = make_backend(m, o.model.path(), o.model.backend_options());
  SamplerParams sp = o.sampling;
  if (!o.seed_given) sp.seed = std::random_device{}();
  Sampler sampler(sp);
  StreamDecoder dec(tok);
  if (!chat) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  GenerateResult r = generate(*backend, ids, o.n_predict, sampler, stop, [&](int32_t id) {
    std::string s = dec.push(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::string tail = dec.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr,
               "\n[%s path, %d threads] prompt: %zu tokens in %.3f s (%.1f tok/s) | "
               "generated: %zu tokens, decode %.1f tok/s%s\n",
               backend->name(), o.model.backend_options().n_threads, ids.size(), r.prefill_s,
               double(ids.size()) / std::max(r.prefill_s, 1e-9), r.tokens.size(),
               r.n_decode > 0 ? double(r.n_decode) / std::max(r.decode_s, 1e-9) : 0.0,
               r.stopped ? " (stopped at end-of-turn)" : "");
  return 0;
}

}  // namespace

Runner add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "generate text from a prompt");
  o->model.add_to(*sub, 2048);
  sub->add_option("-p,--prompt", o->prompt, "prompt text");
  sub->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
  sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  sub->add_flag("--raw", o->raw, "plain completion: continue the prompt as text (no chat template)");
  sub->add_flag("--chat", o->chat, "apply a chat template even when the model has none (ChatML); the default when it has one");
  sub->add_option("--system", o->system, "system message of the chat");
  sub->add_option("--temp", o->sampling.temperature, "temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "top-k (0: off)")->capture_default_str();
  sub->add_option("--top-p", o->sampling.top_p, "top-p (1: off)")->capture_default_str();
  sub->add_option("--min-p", o->sampling.min_p, "min-p (0: off)")->capture_default_str();
  sub->add_option("--repeat-penalty", o->sampling.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  sub->add_option("--repeat-last-n", o->sampling.repeat_last_n, "tokens the penalty looks back over")->capture_default_str();
  sub->add_option("-s,--seed", o->sampling.seed, "RNG seed (default: random)");
  return [o, sub] {
    o->seed_given = sub->count("--seed") > 0;
    return run(*o);
  };
}

}  // namespace lr::cli
