// The HTTP side of `lowrank serve`: OpenAI-compatible routes over the
// engine (server/engine.h), with Debian's cpp-httplib 0.11.4.
//
// Every completion is sent through a chunked content provider, streamed or
// not, so that a handler notices a client that went away (the provider's
// sink stops being writable) and cancels its request; that release cannot
// tell a closed connection any other way during a non-streamed request.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/chat.h"
#include "runtime/embed.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace lr::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (port() tells which)
  int threads_http = 0;               // 0: slots + queue + 2 (each open request holds a thread)
  std::vector<std::string> api_keys;  // empty: no authentication
  size_t max_body = 8 << 20;          // bytes of a request body at most (413 beyond)
  int timeout_s = 600;                // socket read and write timeout
};

// What the routes serve once the model is loaded.
struct Served {
  Model model;
  std::string name;  // the model id of /v1/models and responses
  ChatTemplate chat;
  std::unique_ptr<Engine> engine;
  // /v1/embeddings: made at its first request (its own cache of embed_ctx positions).
  Pooling pooling = Pooling::Mean;
  int embed_ctx = 2048, embed_threads = 1;
  std::mutex embed_mu;
  std::unique_ptr<Embedder> embedder;
};

class HttpServer {
 public:
  explicit HttpServer(const HttpOptions& o);
  ~HttpServer();
  // Binds and starts answering (health: 503 until ready()); throws lr::Error
  // when the address cannot be bound.
  void start();
  // The model is loaded: completions run from now on.
  void ready(std::shared_ptr<Served> s);
  // Stops accepting connections and joins the listener.
  void stop();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace lr::server
