#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>

#include "core/error.h"
#include "server/embeddings_api.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/output_format.h"
#include "server/tool_calls.h"

namespace lr::server {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const char* kJson = "application/json; charset=utf-8";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_body(e)), kJson);
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), uint32_t(rng()));
}

struct Pieces final : TokenText {
  const Tokenizer& tok;
  explicit Pieces(const Tokenizer& t) : tok(t) {}
  std::string text(int32_t id) const override { return tok.token_piece(id); }
};

// POST /apply-template (llama-server's): the prompt the model's template
// makes of {"messages", "tools"?, "add_generation_prompt"? (default true)};
// the body's key order is kept, as the template's tojson shows it.
std::string applied_template(const ChatTemplate& t, const std::string& body) {
  parse_json_body(body);  // a malformed body: the 400 every route gives
  const auto j = nlohmann::ordered_json::parse(body);
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw ApiError(400, "'messages' must be a non-empty array", "messages");
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const auto& m = j["messages"][i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw ApiError(400, fmt::format("'messages[{}]' must be an object with a string 'role'", i),
                     fmt::format("messages[{}]", i));
  }
  const nlohmann::ordered_json tools = j.value("tools", nlohmann::ordered_json());
  if (!tools.is_null() && !tools.is_array())
    throw ApiError(400, "'tools' must be an array", "tools");
  const auto agp = j.value("add_generation_prompt", nlohmann::ordered_json(true));
  if (!agp.is_boolean())
    throw ApiError(400, "'add_generation_prompt' must be true or false", "add_generation_prompt");
  return t.apply(j["messages"], tools, agp.get<bool>());
}

// The routes and the methods each answers; any other method gets 405.
const std::vector<std::pair<std::string, std::string>> kRoutes = {{"/v1/chat/completions", "POST"},
                                                                  {"/v1/completions", "POST"},
                                                                  {"/v1/models", "GET"},
                                                                  {"/health", "GET"},
                                                                  {"/tokenize", "POST"},
                                                                  {"/detokenize", "POST"},
                                                                  {"/apply-template", "POST"},
                                                                  {"/v1/embeddings", "POST"},
                                                                  {"/metrics", "GET"}};

}  // namespace

struct HttpServer::Impl {
  HttpOptions opt;
  httplib::Server svr;
  std::thread listener;
  std::mutex mu;
  std::shared_ptr<Served> served;  // null while loading

  std::shared_ptr<Served> get() {
    std::lock_guard<std::mutex> l(mu);
    if (!served) throw ApiError(503, "Loading model", "", "model_loading");
    return served;
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_keys.empty()) return true;
    std::string key = req.get_header_value("X-Api-Key");
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    return std::find(opt.api_keys.begin(), opt.api_keys.end(), key) != opt.api_keys.end();
  }

  void routes();
  void completion(Api api, const httplib::Request& req, httplib::Response& res);
  void embeddings(const httplib::Request& req, httplib::Response& res);
};

void HttpServer::Impl::routes() {
  // Every handler's ApiError becomes its status and error body.
  auto guarded = [](auto fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (
          const Error& e) {  // bad input found below the API layer (a token id, a sampling value)
        send_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
      }
    };
  };
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || authorized(req))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(
        res,
        ApiError(401, "Invalid API key: pass it as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'",
                 "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.Post("/v1/chat/completions",
           guarded([this](const auto& q, auto& r) { completion(Api::Chat, q, r); }));
  svr.Post("/v1/completions",
           guarded([this](const auto& q, auto& r) { completion(Api::Completions, q, r); }));
  svr.Post("/v1/embeddings", guarded([this](const auto& q, auto& r) { embeddings(q, r); }));
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> l(mu);
    if (!served) return send_error(res, ApiError(503, "Loading model", "", "model_loading"));
    // Draining on SIGINT/SIGTERM: a load balancer's readiness check stops routing here.
    if (served->engine->stopping())
      return send_error(res, ApiError(503, "Shutting down", "", "shutting_down"));
    res.set_content(R"({"status":"ok"})", kJson);
  });
  svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
            auto s = get();
            const Config& c = s->model.weights->cfg;
            json m = {{"id", s->name},
                      {"object", "model"},
                      {"created", int64_t(std::time(nullptr))},
                      {"owned_by", "lowrank"},
                      {"meta",
                       {{"n_ctx", s->engine->ctx()},
                        {"n_slots", s->engine->slots()},
                        {"n_vocab", c.vocab},
                        {"n_layers", c.n_layers},
                        {"n_embd", c.dim}}}};
            res.set_content(dump_json({{"object", "list"}, {"data", json::array({m})}}), kJson);
          }));
  svr.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
             auto s = get();
             const json j = parse_json_body(req.body);
             if (!j.contains("content") || !j["content"].is_string())
               throw ApiError(400, "'content' must be a string", "content");
             bool special = false;
             if (j.contains("add_special")) {
               if (!j["add_special"].is_boolean())
                 throw ApiError(400, "'add_special' must be true or false", "add_special");
               special = j["add_special"].get<bool>();
             }
             const Tokenizer& tok = *s->model.tokenizer;
             const auto ids =
                 tok.encode(j["content"].get<std::string>(), special && tok.add_bos(), special);
             res.set_content(dump_json({{"tokens", ids}}), kJson);
           }));
  svr.Post(
      "/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
        auto s = get();
        const json j = parse_json_body(req.body);
        if (!j.contains("tokens") || !j["tokens"].is_array())
          throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
        const Tokenizer& tok = *s->model.tokenizer;
        std::vector<int32_t> ids;
        for (const json& t : j["tokens"]) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
            throw ApiError(400, fmt::format("'tokens' must hold token ids below {}", tok.n_vocab()),
                           "tokens");
          ids.push_back(int32_t(t.get<int64_t>()));
        }
        res.set_content(dump_json({{"content", tok.decode(ids)}}), kJson);
      }));
  svr.Post(
      "/apply-template", guarded([this](const httplib::Request& req, httplib::Response& res) {
        res.set_content(dump_json({{"prompt", applied_template(get()->chat, req.body)}}), kJson);
      }));
  svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
            res.set_content(prometheus_text(get()->engine->metrics()), "text/plain; version=0.0.4");
          }));
  // A known path with another method: 405 with the allowed one.
  for (const auto& [path, method] : kRoutes) {
    auto not_allowed = [path = path, method = method](const httplib::Request& req,
                                                      httplib::Response& res) {
      res.set_header("Allow", method);
      send_error(res, ApiError(405, fmt::format("{} does not answer {}; use {}", path, req.method,
                                                method)));
    };
    if (method != "GET") svr.Get(path, not_allowed);
    if (method != "POST") svr.Post(path, not_allowed);
    svr.Put(path, not_allowed);
    svr.Delete(path, not_allowed);
    svr.Patch(path, not_allowed);
  }
  // Statuses httplib sets itself (404, 413, 400 for a malformed request) get an error body too.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 404   ? fmt::format("no route for {} {}", req.method, req.path)
                      : res.status == 413 ? "the request body is larger than --max-body allows"
                                          : fmt::format("HTTP {}", res.status);
    send_error(res, ApiError(res.status, msg));
  });
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (req.path == "/v1/chat/completions" || req.path == "/v1/completions")
      if (res.status == 200) return;  // logged when the answer ends, with its tokens
    std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });
}

// The requests of one response (its n answers) and what they have said.
struct Answers {
  std::vector<std::shared_ptr<Request>> reqs;
  Completion c;
  std::vector<char> done, first;  // per answer: ended; its first chunk not sent yet

  void start(Api api, std::string id, std::string model) {
    c.api = api;
    c.id = std::move(id);
    c.model = std::move(model);
    c.created = int64_t(std::time(nullptr));
    c.choices.resize(reqs.size());
    done.assign(reqs.size(), false);
    first.assign(reqs.size(), true);
    last_.assign(reqs.size(), Usage{});
  }
  bool all_done() const {
    return std::all_of(done.begin(), done.end(), [](char d) { return d; });
  }
  // The request has tools: each answer's text is parsed for calls in `format`.
  void with_tools(tools::ToolFormat format) {
    format_ = format;
    for (size_t i = 0; i < reqs.size(); ++i) parsers_.emplace_back(format, ids_);  // after start()
  }
  // Non-streamed: each answer's text split into its content and calls.
  void parse_calls() {
    if (!format_) return;
    for (Choice& ch : c.choices) {
      tools::ParsedOutput o = tools::parse_tool_calls(*format_, ch.text, ids_);
      ch.text = std::move(o.content);
      ch.calls = std::move(o.calls);
      ch.tools = true;
    }
  }
  // Streamed: what answer i's new text adds (through its call parser, when there are tools).
  Choice delta(int i, const std::string& text, bool done) {
    Choice d;
    if (!format_) {
      d.text = text;
      return d;
    }
    tools::ToolStreamParser& p = parsers_[size_t(i)];
    d.events = p.feed(text);
    if (done) {
      std::vector<tools::ToolEvent> rest = p.finish();
      d.events.insert(d.events.end(), rest.begin(), rest.end());
    }
    std::vector<tools::ToolEvent> calls;
    for (tools::ToolEvent& e : d.events) {
      if (e.kind == tools::ToolEvent::Kind::Content)
        d.text += e.text;
      else
        calls.push_back(std::move(e));
    }
    d.events = std::move(calls);
    d.tools = true;
    if (done) d.calls = p.result().calls;
    return d;
  }
  // Takes what is new of each answer still running (waiting up to 50 ms on
  // the first of them) into f(index, news), and sums the usage.
  template <class F>
  void poll(F&& f) {
    bool waited = false;
    Usage sum;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!done[i]) {
        Request::News n = reqs[i]->take(waited ? 0ms : 50ms);
        waited = true;
        done[i] = n.done;
        if (n.done || !n.text.empty() || !n.tokens.empty())
          last_[i] = n.usage;  // (a timeout: none)
        f(int(i), n);
      }
      if (i == 0) {
        sum = last_[0];
      } else {
        sum.completion_tokens += last_[i].completion_tokens;
        sum.drafted += last_[i].drafted;
        sum.draft_taken += last_[i].draft_taken;
        sum.steps += last_[i].steps;
      }
    }
    c.usage = sum;
  }

 private:
  std::vector<Usage> last_;  // each answer's latest usage
  std::optional<tools::ToolFormat> format_;
  tools::IdSource ids_{std::random_device{}()};
  std::vector<tools::ToolStreamParser> parsers_;
};

void HttpServer::Impl::embeddings(const httplib::Request& req, httplib::Response& res) {
  auto s = get();
  const EmbeddingRequest er = parse_embedding_request(req.body);
  const Tokenizer& tok = *s->model.tokenizer;
  std::vector<std::vector<int32_t>> inputs = er.ids;
  for (const std::string& t : er.texts) inputs.push_back(text_prompt(tok, t).ids);
  int tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tokens += int(inputs[i].size());
    if (int(inputs[i].size()) > s->embed_ctx)
      throw ApiError(400,
                     fmt::format("input {} has {} tokens; embeddings take at most {}", i,
                                 inputs[i].size(), s->embed_ctx),
                     "input", "context_length_exceeded");
  }
  std::vector<std::vector<float>> out;
  {
    std::lock_guard<std::mutex> l(s->embed_mu);
    if (!s->embedder)
      s->embedder = std::make_unique<Embedder>(s->model.weights, s->embed_ctx, s->embed_threads);
    for (const auto& ids : inputs) out.push_back(s->embedder->embed(ids, s->pooling));
  }
  res.set_content(dump_json(embedding_body(out, er.base64, s->name, tokens)), kJson);
}

namespace {

// The body of a response sent whole, once every answer has ended.
httplib::ContentProviderWithoutLength whole_answers(std::shared_ptr<Served> s,
                                                    std::shared_ptr<Answers> a, bool logprobs) {
  return [s, a, logprobs](size_t, httplib::DataSink& sink) {
    while (!a->all_done()) {
      a->poll([&](int i, Request::News& n) {
        Choice& ch = a->c.choices[size_t(i)];
        ch.text += n.text;
        ch.tokens.insert(ch.tokens.end(), n.tokens.begin(), n.tokens.end());
        if (n.done) ch.finish = n.finish;
      });
      if (!sink.is_writable()) return false;  // the client went away
    }
    a->parse_calls();
    const std::string body =
        dump_json(completion_body(a->c, logprobs, Pieces(*s->model.tokenizer)));
    if (!sink.write(body.data(), body.size())) return false;
    sink.done();
    return true;
  };
}

// Server-sent events: each answer's deltas as they come, its finish, the
// usage when asked for, [DONE].
httplib::ContentProviderWithoutLength streamed_answers(std::shared_ptr<Served> s,
                                                       std::shared_ptr<Answers> a, bool logprobs,
                                                       bool include_usage) {
  return [s, a, logprobs, include_usage](size_t, httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      const std::string line = "data: " + dump_json(j) + "\n\n";
      return sink.write(line.data(), line.size());
    };
    const Pieces pieces(*s->model.tokenizer);
    bool ok = true, cancelled = false;
    a->poll([&](int i, Request::News& n) {
      Choice delta = a->delta(i, n.text, n.done);
      delta.tokens = n.tokens;
      char& first = a->first[size_t(i)];
      if (ok && (first || !delta.text.empty() || !delta.tokens.empty() || !delta.events.empty())) {
        ok = send(chunk_body(a->c, i, delta, first, logprobs, pieces));
        first = false;
      }
      if (!n.done) return;
      cancelled |= n.finish == Finish::Cancelled;
      Choice end;
      end.finish = n.finish;
      end.tools = delta.tools;
      end.calls = delta.calls;
      if (ok && !cancelled) ok = send(chunk_body(a->c, i, end, false, logprobs, pieces));
    });
    if (!ok || cancelled || !sink.is_writable()) return false;
    if (!a->all_done()) return true;
    if (include_usage && !send(usage_chunk(a->c))) return false;
    const std::string done = "data: [DONE]\n\n";
    if (!sink.write(done.data(), done.size())) return false;
    sink.done();
    return true;
  };
}

}  // namespace

void HttpServer::Impl::completion(Api api, const httplib::Request& req, httplib::Response& res) {
  auto s = get();
  CompletionRequest cr = parse_completion_request(api, req.body);
  const Tokenizer& tok = *s->model.tokenizer;
  PromptTokens p;
  if (api == Api::Chat)
    p = chat_prompt(tok, s->chat, cr.messages, cr.tools.active() ? cr.tools.tools : nullptr);
  else if (!cr.prompt_ids.empty())
    p = {cr.prompt_ids, {tok.eos_id()}};
  else
    p = text_prompt(tok, cr.prompt);
  const int ctx = s->engine->ctx(), n = int(p.ids.size());
  if (n >= ctx)
    throw ApiError(
        400,
        fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens",
                    ctx, n),
        api == Api::Chat ? "messages" : "prompt", "context_length_exceeded");
  if (cr.gen.max_tokens == 0) cr.gen.max_tokens = ctx - n;
  if (cr.gen.max_tokens > ctx - n)
    throw ApiError(
        400,
        fmt::format(
            "max_tokens is {}, but the prompt's {} tokens leave room for {} in a context of {}",
            cr.gen.max_tokens, n, ctx - n, ctx),
        "max_tokens", "context_length_exceeded");
  if (!cr.ignore_eos) cr.gen.stop_tokens = p.stop;
  cr.gen.stop_tokens.erase(-1);
  for (auto [id, bias] : cr.gen.sampling.logit_bias)
    if (id >= tok.n_vocab())
      throw ApiError(
          400, fmt::format("'logit_bias' names token {}; the vocabulary has {}", id, tok.n_vocab()),
          "logit_bias");
  const tools::ToolFormat format = tools::detect_tool_format(s->chat.source());
  if (cr.tools.choice == ToolChoice::Required || cr.tools.choice == ToolChoice::Named) {
    if (cr.gen.grammar)
      throw ApiError(400, "'tool_choice' asks for a tool call; 'response_format' for another form",
                     "tool_choice");
    cr.gen.grammar = compile_grammar(tool_call_gbnf(format, cr.tools), "tools");
  }
  auto a = std::make_shared<Answers>();
  try {
    a->reqs = s->engine->submit(p.ids, cr.gen, cr.n);
  } catch (const Engine::Busy& b) {
    res.set_header("Retry-After", "1");
    throw ApiError(503, fmt::format("the server is busy: {}", b.what()), "", "server_busy");
  }
  a->start(api, random_id(api == Api::Chat ? "chatcmpl-" : "cmpl-"), s->name);
  if (cr.tools.active()) a->with_tools(format);
  const auto start = Clock::now();
  const std::string what = req.method + " " + req.path;
  // Ends the requests when the response ends, however it ends; logs it.
  auto released = [a, start, what](bool ok) {
    for (auto& r : a->reqs) r->cancel();
    const Usage& u = a->c.usage;
    std::fprintf(stderr, "%s %d prompt=%d generated=%d cached=%d %.0f ms%s\n", what.c_str(), 200,
                 u.prompt_tokens, u.completion_tokens, u.cached_tokens,
                 std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
                 ok ? "" : " (client gone: cancelled)");
  };
  if (!cr.stream) {
    res.set_chunked_content_provider(kJson, whole_answers(s, a, cr.logprobs), released);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream",
                                   streamed_answers(s, a, cr.logprobs, cr.include_usage), released);
}

HttpServer::HttpServer(const HttpOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->opt = o;
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& m = *impl_;
  m.routes();
  // httplib's default adds SO_REUSEPORT, with which a second server on a port in use
  // would share it silently; SO_REUSEADDR alone lets a restart bind at once.
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  m.svr.set_payload_max_length(m.opt.max_body);
  m.svr.set_read_timeout(m.opt.timeout_s, 0);
  m.svr.set_write_timeout(m.opt.timeout_s, 0);
  const int threads = m.opt.threads_http;
  m.svr.new_task_queue = [threads] {
    return new httplib::ThreadPool(size_t(std::max(1, threads)));
  };
  if (m.opt.port == 0) {
    port_ = m.svr.bind_to_any_port(m.opt.host);
    if (port_ <= 0) fail("cannot listen on {}: no free port", m.opt.host);
  } else {
    if (!m.svr.bind_to_port(m.opt.host, m.opt.port))
      fail("cannot listen on {}:{} (in use, or not an address of this host)", m.opt.host,
           m.opt.port);
    port_ = m.opt.port;
  }
  m.listener = std::thread([&m] { m.svr.listen_after_bind(); });
}

void HttpServer::ready(std::shared_ptr<Served> s) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->served = std::move(s);
}

void HttpServer::stop() {
  if (!impl_) return;
  impl_->svr.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace lr::server
