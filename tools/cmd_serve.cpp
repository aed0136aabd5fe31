// lowrank serve: an OpenAI-compatible HTTP server (docs/server.md). The
// model loads while /health answers 503; SIGINT or SIGTERM stop it: no new
// requests, running ones finish within --grace seconds (then are
// cancelled), exit 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "common.h"
#include "core/error.h"
#include "kv/dense_cache.h"
#include "runtime/chat.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#ifdef LOWRANK_HAVE_HTTP
#include "server/http_server.h"
#endif

namespace lr::cli {

namespace {

struct ServeOptions {
  ModelOptions model;
  DraftOptions draft;
  std::string chat_template;  // --chat-template FILE
  int slots = 4;
  int queue = 32;
  int step_tokens = 512;
  int decode_chunk = 128;
  int grace_s = 10;
  int cache_ram_mib = 8192;  // stored prompt prefixes (llama-server's default)
  int kv_pool_mib = 0;       // the slots' KV caches together (0: no bound but the slots')
  int max_body_kib = 8192;
  std::string alias;
  std::string pooling = "mean";  // /v1/embeddings
  std::string api_keys;  // KEY[,KEY]
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads_http = 0;
  int timeout_s = 600;
};

#ifdef LOWRANK_HAVE_HTTP
std::vector<std::string> split_keys(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string k; std::getline(ss, k, ',');)
    if (!k.empty()) out.push_back(k);
  if (!s.empty() && out.empty()) fail("--api-key: no key given");
  return out;
}
#endif

// A slot's KV cache: its bytes, and where the model has sliding-window
// layers, their rings (beside a compressed key cache's full layers).
void print_slot_cache(const Config& c, const BackendOptions& bo, int step_tokens, uint64_t bytes,
                      bool lazy) {
  if (bytes == 0) return;
  std::fprintf(stderr, "lowrank serve: KV cache %.1f MiB a slot%s", double(bytes) / (1 << 20),
               lazy ? " (taking RAM as its positions are written)" : "");
  const int elem = bo.keys.ring_elem_bytes();
  const kv::DenseLayout all = kv::DenseLayout::of(c, bo.ctx, step_tokens, false, elem);
  if (all.max_ring() > 0) {
    const bool compressed = !bo.keys.dense();
    const char* type = elem == 2 ? "f16" : "f32";
    std::fprintf(stderr,
                 ": the sliding-window layers keep %s rings of 2 x %d positions%s (%.1f MiB a "
                 "slot with the whole context in %s)",
                 type, all.max_ring(), compressed ? ", the full layers the typed cache" : "",
                 double(all.full_bytes()) / (1 << 20), type);
  }
  std::fprintf(stderr, "\n");
}

int serve(const ServeOptions& o) {
#ifndef LOWRANK_HAVE_HTTP
  (void)o;
  fail("this build has no HTTP server (cpp-httplib was not found when it was configured)");
#else
  const ExecPath path = o.model.path();
  // Signals are taken by sigwait below, so every thread starts with them blocked.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  server::HttpOptions h;
  h.host = o.host;
  h.port = o.port;
  h.threads_http = o.threads_http > 0 ? o.threads_http : o.slots + o.queue + 2;
  h.api_keys = split_keys(o.api_keys);
  h.max_body = size_t(o.max_body_kib) << 10;
  h.timeout_s = o.timeout_s;
  server::HttpServer http(h);
  http.start();
  std::fprintf(stderr, "lowrank serve: listening on http://%s:%d (loading the model)\n",
               o.host.c_str(), http.port());

  auto s = std::make_shared<server::Served>();
  s->model = load_model(o.model.model_path(), o.model.weight_type());
  s->name =
      o.alias.empty() ? std::filesystem::path(o.model.model_path()).filename().string() : o.alias;
  const Tokenizer& tok = *s->model.tokenizer;
  if (!o.chat_template.empty()) {
    s->chat = ChatTemplate::of(tok, o.chat_template);
  } else {
    try {
      s->chat = ChatTemplate::of(tok);
    } catch (const Error& e) {
      std::fprintf(stderr, "lowrank serve: %s; chat requests use ChatML\n", e.what());
    }
  }
  if (tok.chat_template().empty() && o.chat_template.empty())
    std::fprintf(stderr,
                 "lowrank serve: the model has no chat template; chat requests use ChatML\n");
  const BackendOptions bo = o.model.backend_options();
  EngineOptions eo;
  eo.queue = o.queue;
  eo.step_tokens = o.step_tokens;
  eo.decode_chunk = o.decode_chunk;
  eo.shutdown_grace = std::chrono::seconds(o.grace_s);
  eo.prompt_cache = uint64_t(o.cache_ram_mib) << 20;
  eo.kv_pool = uint64_t(o.kv_pool_mib) << 20;
  o.draft.configure(eo, s->model, o.model, o.slots, o.step_tokens);
  std::unique_ptr<BatchBackend> slots =
      make_slots(s->model, path, bo, o.slots, o.step_tokens, eo.draft_max > 0);
  const uint64_t slot_bytes = slots->cache_bytes(0);
  const bool lazy = slots->cache_resident(0) < slot_bytes;
  s->engine = std::make_unique<Engine>(std::move(slots), tok, eo);
  s->pooling = parse_pooling(o.pooling);
  s->embed_ctx = bo.ctx;
  s->embed_threads = std::max(1, bo.cpu.n_threads);
  http.ready(s);
  const std::string where = describe(path, bo);
  std::fprintf(
      stderr,
      "lowrank serve: ready: %s, %d slots of %d tokens, %s, steps of up to %d tokens\n",
      s->name.c_str(), o.slots, bo.ctx, where.c_str(), o.step_tokens);
  print_slot_cache(s->model.weights->cfg, bo, o.step_tokens, slot_bytes, lazy);

  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr,
               "lowrank serve: %s: finishing running requests (at most %d s; a second signal "
               "cancels them)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.grace_s);
  // The drain runs on its own thread while this one keeps waiting for the
  // signals: a thread that does not block them (a library's) would otherwise
  // take a second one and end the process by its default action.
  std::atomic<bool> done{false};
  std::thread drain([&] {
    s->engine->shutdown();
    http.stop();
    done = true;
  });
  const timespec tick{0, 50'000'000};
  bool hurried = false;
  while (!done) {
    if (sigtimedwait(&stop, nullptr, &tick) > 0 && !hurried) {
      std::fprintf(stderr, "lowrank serve: second signal: cancelling running requests\n");
      s->engine->hurry();
      hurried = true;
    }
  }
  drain.join();
  std::fprintf(stderr, "lowrank serve: stopped\n");
  return 0;
#endif
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server with continuous batching (docs/server.md)");
  o->model.add_to(*sub, 2048);
  o->draft.add_to(*sub);
  sub->get_option("--ctx")->description("context of each slot in tokens (its KV cache capacity)");
  sub->add_option("--parallel", o->slots,
                  "slots: sequences advanced together (also -np, as llama-server spells it)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--queue", o->queue, "requests waiting for a slot at most (beyond: 503)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  sub->add_option("-b,--batch", o->step_tokens,
                  "tokens per step at most (prompts are cut into chunks)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--decode-chunk", o->decode_chunk,
                  "prompt tokens per step at most while other slots decode (bounds their "
                  "inter-token time; a prompt alone takes --batch)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--host", o->host, "address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--threads-http", o->threads_http,
                  "HTTP threads (default: slots + queue + 2; each open request holds one)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--timeout", o->timeout_s, "socket read/write timeout in seconds")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  sub->add_option("--api-key", o->api_keys,
                  "KEY[,KEY]: require one, as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' "
                  "(/health stays open)");
  sub->add_option("--max-body", o->max_body_kib, "request body size limit in KiB (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--alias", o->alias, "model id in the API (default: the file name)");
  sub->add_option("--pooling", o->pooling,
                  "/v1/embeddings: the hidden states after the output norm pooled by their mean "
                  "or the last token's, at unit length")
      ->check(CLI::IsMember({"mean", "last"}));
  sub->add_option("--chat-template", o->chat_template,
                  "a Jinja chat template file to use instead of the model's own");
  sub->add_option("--cache-ram", o->cache_ram_mib,
                  "MiB of prompt prefixes stored in RAM that slots share by reference (a system "
                  "prompt held once; the least recently used go first; 0: none, prefixes are "
                  "copied between slots)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--kv-pool", o->kv_pool_mib,
                  "MiB of RAM the slots' KV caches may hold together: a request reserves what it "
                  "can reach (prompt + max_tokens) and waits while that does not fit, idle slots "
                  "giving their pages back first (0: no bound but -np x -c)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--grace", o->grace_s,
                  "seconds running requests may take to finish on SIGINT/SIGTERM")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  return [o] { return serve(*o); };
}

}  // namespace lr::cli
