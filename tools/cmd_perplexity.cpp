// lowrank perplexity: perplexity of a model over a text file.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common.h"
#include "core/error.h"
#include "runtime/perplexity.h"

namespace lr::cli {

namespace {

struct PplOptions {
  ModelOptions model;
  std::string file;
  int chunks = -1;
  bool score_all = false;
  bool no_progress = false;
  bool decode = false;
};

void progress_bar(int done, int total, double ppl, double elapsed) {
  const int width = 30;
  int filled = total > 0 ? done * width / total : width;
  std::string bar(size_t(filled), '#');
  bar.resize(size_t(width), '.');
  double eta = done > 0 ? elapsed / done * (total - done) : 0;
  std::fprintf(stderr, "\r[%s] %d/%d windows  ppl %.4f  %.0fs elapsed, ~%.0fs left ", bar.c_str(),
               done, total, ppl, elapsed, eta);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int run(const PplOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) fail("{}: cannot open text file", o.file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty()) fail("{}: the file is empty", o.file);

  Model m = load_model(o.model.model_path(), o.model.weight_type());
  PerplexityOptions p;
  p.ctx = o.model.ctx;
  p.max_chunks = o.chunks;
  p.score_all = o.score_all;
  p.decode = o.decode;
  p.add_bos = m.tokenizer->add_bos() && m.tokenizer->bos_id() >= 0;
  p.bos = m.tokenizer->bos_id();
  std::vector<int32_t> tokens = m.tokenizer->encode(text, p.add_bos);
  std::fprintf(stderr, "%s: %zu tokens, windows of %d, scoring %s\n", o.file.c_str(),
               tokens.size(), p.ctx, p.score_all ? "every token after the first" : "the second half");

  BackendOptions bo = o.model.backend_options();
  auto backend = make_session(m, o.model.path(), bo);
  auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r = perplexity(*backend, tokens, p, [&](int done, int total, double ppl) {
    if (o.no_progress) return;
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress_bar(done, total, ppl, el);
  });
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ppl = %.4f +/- %.4f  (%d windows of %d, %lld tokens scored, %s path, %.1f s)\n",
              r.ppl, r.ppl_err, r.chunks, p.ctx, (long long)r.scored, backend->name(), el);
  print_key_cache(*backend, stdout);
  return 0;
}

}  // namespace

Runner add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PplOptions>();
  CLI::App* sub = app.add_subcommand("perplexity", "perplexity over a text file (llama.cpp protocol by default)");
  o->model.add_to(*sub, 512);
  sub->add_option("-f,--file", o->file, "text file")->required();
  sub->add_option("--chunks", o->chunks, "stop after N windows (default: all)");
  sub->add_flag("--score-all", o->score_all, "score every token after the first of each window, not just the second half");
  sub->add_flag("--no-progress", o->no_progress, "no progress bar");
  sub->add_flag("--decode", o->decode, "run the unscored first half of each window as a prompt, then feed the scored tokens one at a time through the decode path (what --cache-type-k is measured with)");
  return [o] { return run(*o); };
}

}  // namespace lr::cli
