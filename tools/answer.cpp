#include "answer.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace lr::cli {

Answer stream_answer(Engine& engine, std::vector<int32_t> prompt, const GenParams& p, FILE* out,
                     const std::atomic<bool>* interrupt) {
  using namespace std::chrono_literals;
  std::shared_ptr<Request> r = engine.submit(std::move(prompt), p);
  Answer a;
  for (;;) {
    Request::News n = r->take(50ms);
    if (!n.text.empty()) {
      if (out) {
        std::fwrite(n.text.data(), 1, n.text.size(), out);
        std::fflush(out);
      }
      a.text += n.text;
    }
    a.usage = n.usage;
    if (n.done) {
      if (!n.error.empty()) fail("{}", n.error);  // a failed step, not an interrupted answer
      a.finish = n.finish;
      return a;
    }
    if (interrupt && interrupt->load()) r->cancel();
  }
}

void print_answer_stats(FILE* f, const std::string& where, const Answer& a) {
  const Usage& u = a.usage;
  const int evaluated = u.prompt_tokens - u.cached_tokens;
  const int decodes = std::max(0, u.completion_tokens - 1);  // the first comes with the prompt
  std::fprintf(f,
               "\n[%s] prompt: %d tokens (%d cached) in %.3f s (%.1f tok/s) | generated: %d "
               "tokens, decode %.1f tok/s%s\n",
               where.c_str(), u.prompt_tokens, u.cached_tokens, u.prompt_s,
               double(evaluated) / std::max(u.prompt_s, 1e-9), u.completion_tokens,
               decodes > 0 ? double(decodes) / std::max(u.decode_s, 1e-9) : 0.0,
               a.finish == Finish::Stop        ? " (stopped)"
               : a.finish == Finish::Cancelled ? " (interrupted)"
                                               : "");
  if (u.drafted > 0)
    std::fprintf(f, "[draft] %d tokens drafted, %d taken (%.1f%%); %.2f tokens per step\n",
                 u.drafted, u.draft_taken, 100.0 * u.draft_taken / u.drafted,
                 double(u.completion_tokens) / std::max(u.steps, 1));
}

void ConstraintOptions::add_to(CLI::App& sub) {
  auto* g = sub.add_option("--grammar", grammar, "the answer is a sentence of this GBNF grammar");
  auto* f = sub.add_option("--grammar-file", grammar_file, "--grammar from a file");
  auto* j = sub.add_option(
      "-j,--json-schema", json_schema,
      "the answer is JSON valid under this schema (docs/server.md lists the keywords)");
  g->excludes(f)->excludes(j);
  f->excludes(j);
}

std::shared_ptr<const grammar::Grammar> ConstraintOptions::compile() const {
  std::string gbnf = grammar, flag = "--grammar";
  if (!grammar_file.empty()) {
    std::ifstream in(grammar_file, std::ios::binary);
    if (!in) fail("--grammar-file {}: cannot open the file", grammar_file);
    std::stringstream ss;
    ss << in.rdbuf();
    gbnf = ss.str();
    flag = "--grammar-file";
  }
  try {
    if (!json_schema.empty()) {
      flag = "--json-schema";
      gbnf = grammar::schema_to_gbnf(std::string_view(json_schema));
    }
    return gbnf.empty() ? nullptr : grammar::Grammar::parse_shared(gbnf);
  } catch (const Error& e) {
    fail("{}: {}", flag, e.what());
  }
}

void add_sampling_options(CLI::App& sub, SamplerParams& p) {
  sub.add_option("--temp", p.temperature, "temperature (0: greedy)")->capture_default_str();
  sub.add_option("--top-k", p.top_k, "top-k (0: off)")->capture_default_str();
  sub.add_option("--top-p", p.top_p, "top-p (1: off)")->capture_default_str();
  sub.add_option("--min-p", p.min_p, "min-p (0: off)")->capture_default_str();
  sub.add_option("--repeat-penalty", p.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str();
  sub.add_option("--repeat-last-n", p.repeat_last_n,
                 "tokens the penalty looks back over, the prompt's included")
      ->capture_default_str();
  sub.add_option("-s,--seed", p.seed, "RNG seed (default: random)");
}

void seed_unless_given(const CLI::App& sub, SamplerParams& p) {
  if (sub.count("--seed") == 0) p.seed = std::random_device{}();
}

}  // namespace lr::cli
