// The engine under every command that generates: requests wait in a
// bounded queue, run in slots (one sequence each, with its own KV cache in a
// BatchBackend made by runtime/session.h make_slots), and advance together,
// one batch step at a time, on the engine's own thread. `serve` runs many
// slots; `run` and `chat` one (a conversation's next turn reuses the
// cached prefix, so only its new tokens are evaluated); `bench-batch` B.
//
// A step holds one token of every slot that decodes and then prompt chunks
// of the slots that prefill, the earliest admitted first, up to the step's
// token budget (chunked prefill, as llama.cpp's slot loop and vLLM's
// scheduler do); a slot's prompt chunk asks for logits only when it ends
// the prompt. A request is admitted when a slot is free (each slot holds a
// full context) and, under a KV pool (EngineOptions::kv_pool), when what
// it can reach fits; it takes the free slot whose cached tokens share the
// longest prefix with its prompt and evaluates only the rest. Where the
// batch copies caches (BatchBackend::copies_prefixes), prefixes are shared
// across slots: a longer prefix in the prompt cache (stored once, mapped by
// reference) or in any other slot is taken, and a request whose prompt
// shares a long prefix with one a slot is still evaluating waits for it (a
// system prompt common to many requests is evaluated once, not once per
// slot).
// Requests see their tokens through their Request: text in whole UTF-8
// characters, held back while it might begin a stop string (each slot's
// answer is a runtime/sequence.h Sequence).
//
// The batch is invariant (backend/batch.h), and each request samples with
// its own seeded sampler, so a request's tokens do not depend on the others.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/batch.h"
#include "runtime/drafter.h"
#include "runtime/metrics.h"
#include "runtime/sequence.h"
#include "tokenizer/tokenizer.h"

namespace lr {

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens a slot's cache already held
  double prompt_s = 0;    // from taking a slot to the first generated token
  double decode_s = 0;    // from the first generated token to the last
  // Speculative decoding: tokens drafted for the answer, those it took, and
  // the steps that computed its tokens (completion_tokens / steps: tokens per step).
  int drafted = 0;
  int draft_taken = 0;
  int steps = 0;
};

// One request's channel between its HTTP handler and the engine thread.
class Request {
 public:
  // What is new since the last take.
  struct News {
    std::string text;
    std::vector<TokenOut> tokens;  // when log-probabilities were asked for
    bool done = false;
    Finish finish = Finish::None;
    Usage usage;
    std::string error;  // a step that failed (Cancelled): what it threw
  };
  // Waits until there is news or `timeout` passes, and takes it.
  News take(std::chrono::milliseconds timeout);
  // Asks the engine to stop this request (it frees the slot within one step).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Engine;
  void post(const std::string& text, const TokenOut* token, Finish finish, const Usage& usage,
            const std::string& error = "");

  std::mutex mu_;
  std::condition_variable cv_;
  News pending_;
  bool news_ = false;
  std::atomic<bool> cancelled_{false};
  // The engine's side.
  std::vector<int32_t> prompt_;
  GenParams params_;
  // n > 1: the first of the request's answers; this one waits until the
  // leader's prompt is cached, then takes a copy of it where the batch
  // copies (Engine::submit).
  std::weak_ptr<Request> leader_;
  std::chrono::steady_clock::time_point arrived_, admitted_, first_token_, last_token_;
};

struct EngineOptions {
  int queue = 64;         // requests waiting for a slot at most
  int step_tokens = 512;  // tokens per step at most (prompt chunks fill what decoding leaves)
  // Prompt tokens per step at most while other slots decode: a decoding
  // slot's next token waits for the step, so its inter-token time is bounded
  // by this chunk's cost (prompts alone take step_tokens).
  int decode_chunk = 128;
  // Speculative decoding (runtime/drafter.h: prompt-lookup drafts, or a
  // draft model's): tokens drafted per slot and step at most (0: off). A
  // slot feeds its sampled token and the draft in one chunk whose every
  // token is computed as a one-token decode step computes it. Certain
  // guesses (prompt lookup, a greedy draft): the answer samples each row as
  // plain decoding would and keeps the guesses it drew itself, so the output
  // is plain decoding's, token for token, for every sampler. Tokens a draft
  // model drew from its distribution: speculative sampling's rule
  // (Sampler::verify), so the output is distributed as plain decoding's.
  // Drafts shrink to what a step leaves (decode_room) and to what pays
  // (DraftRate). Runs where the batch verifies and rewinds
  // exactly (BatchBackend::verifies).
  int draft_max = 0;
  // A drafted token's cost in decode steps (DraftRate::length); negative:
  // timed as the engine runs (then how many tokens a slot drafts, and so a
  // sampled answer's draws, depend on the timings: its tokens are
  // distributed as plain decoding's, not the same for a seed).
  double draft_cost = -1;
  NgramDraft ngram;                                 // the drafts' source: prompt lookup, or
  std::shared_ptr<Drafter> drafter;                 // this one (a draft model, model_drafter)
  std::chrono::milliseconds shutdown_grace{10000};  // running requests may finish within this
  // Stored prompt prefixes (a prompt cache in RAM that slots map by
  // reference, BatchBackend::store_prefix): bytes at most, the least
  // recently used dropped first (--cache-ram; 0: none stored, a prefix
  // another slot holds is copied).
  uint64_t prompt_cache = 0;
  // The KV pool: bytes the slots' caches may hold in RAM together (0: no
  // bound but the slots'). A request reserves the positions it can reach
  // (prompt + max_tokens, within the context) when admitted, so a running
  // one never stalls for memory; a slot holds RAM up to the most positions
  // it has written. A request that does not fit waits in the queue, the
  // least recently used free slots giving their pages (and cached
  // prefixes) back first; one that could never fit is refused at submit.
  uint64_t kv_pool = 0;
};

// The tokens a step gives its `decoding` slots, one each and their drafts:
// what prompts leave of `budget` (the step's tokens). Prompts come first,
// for their time to the first token: while `prompt_left` prompt tokens
// wait, a step's tokens beyond one per decoding slot are at most
// `decode_chunk`, the prompts' chunk first; drafts get what it leaves
// (none while a prompt has a whole chunk to go). Without waiting prompts,
// the whole budget.
int decode_room(int budget, int decoding, int prompt_left, int decode_chunk);

class Engine {
 public:
  // Starts the engine thread over `batch` (its slots and context).
  Engine(std::unique_ptr<BatchBackend> batch, const Tokenizer& tok, const EngineOptions& o);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws Busy when the queue is full or the engine
  // stops, lr::Error for a prompt that does not fit a slot's context.
  struct Busy : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  std::shared_ptr<Request> submit(std::vector<int32_t> prompt, const GenParams& p);
  // n answers to one prompt (OpenAI's n): answer i samples with seed + i.
  // The prompt is evaluated once: the others copy the first one's cache
  // into their slots when the batch can (the CPU batch's dense cache), else
  // each evaluates what its slot does not hold.
  std::vector<std::shared_ptr<Request>> submit(std::vector<int32_t> prompt, const GenParams& p,
                                               int n);

  // Stops accepting, lets running and queued requests finish within the
  // grace period, cancels the rest and joins the engine thread.
  void shutdown();
  // Ends the grace period now: running and queued requests are cancelled at
  // the next step (a second SIGINT/SIGTERM). No effect before shutdown().
  void hurry();
  // After shutdown() began: new requests are refused, /health answers 503.
  bool stopping() const {
    std::lock_guard<std::mutex> l(mu_);
    return stopping_;
  }

  int slots() const { return batch_->slots(); }
  int ctx() const { return batch_->ctx(); }
  Metrics::Snapshot metrics() const { return metrics_.snapshot(); }

 private:
  struct Slot {
    std::shared_ptr<Request> req;  // null when free
    std::vector<int32_t> cached;   // the tokens in the slot's cache, in order
    size_t fed = 0;                // prompt tokens in the cache
    int reused = 0;                // of them, those the slot held from before
    int32_t next = -1;             // the sampled token the next step feeds (decoding)
    std::vector<int32_t> feed;     // speculating: next and the draft
    std::vector<TokenDist> q;      // the drafted tokens' distributions (none: certain guesses)
    std::mt19937_64 draft_rng;     // the draft's draws for its request (seeded by it)
    DraftRate rate;                // how often its drafted tokens were taken lately
    std::optional<Sequence> seq;   // the answer of its request
    uint64_t last_used = 0;        // step of its last request's end (LRU among free slots)
    int drafted = 0, taken = 0, steps = 0;  // its request's Usage::drafted, draft_taken, steps
    size_t written = 0, reserved = 0;       // the KV pool: positions written at most, and reserved
    bool prefilling() const { return req && fed < req->prompt_.size(); }
  };

  void loop();
  void admit();
  // Whether r's leader (n > 1) is still queued or prefilling: r waits for
  // its prompt to be cached. Under mu_.
  bool leader_pending(const Request& r) const;
  // Prompt prefixes shared across slots (where the batch copies them): the
  // slot other than `except` whose cache holds the longest prefix of
  // `prompt` (at most all but its last token), and its length. Under mu_.
  struct Source {
    int slot = -1;
    size_t n = 0;
  };
  Source cached_prefix(const std::vector<int32_t>& prompt, int except) const;
  // Whether r waits for a slot still evaluating a prompt that shares at
  // least kShareWait tokens of r's prompt, more than the `held` that caches
  // hold now, so it copies them once evaluated. Under mu_.
  static constexpr size_t kShareWait = 32;
  bool waits_for_prefix(const Request& r, size_t held) const;
  // Slot `slot`, holding `keep` tokens of `prompt`, takes a longer prefix
  // where one is held: from the stored prefixes, or from slot src (stored
  // first where the prompt cache is on and src holds kStoreTokens more than
  // any stored prefix, so that both read one copy; else copied). A stored
  // prefix within kStoreTokens of src's is taken instead (the few tokens
  // more are evaluated). Returns the tokens it holds.
  static constexpr size_t kStoreTokens = 64;
  size_t take_prefix(const std::vector<int32_t>& prompt, int slot, size_t keep, Source src);
  struct StoredPrefix {
    std::vector<int32_t> tokens;
    std::shared_ptr<const BatchBackend::Stored> data;
    uint64_t last_used = 0;  // step
  };
  std::vector<StoredPrefix> stored_;  // within opt_.prompt_cache bytes
  uint64_t stored_bytes_ = 0;
  void run_step();
  // Per slot, the tokens the decoding slots draft this step, within `room`
  // tokens for them all (decode_room).
  std::vector<Drafter::Draft> drafts(const std::vector<int>& decoding, int room);
  // After slot s's logits: sample (or, given a drafted token, verify it), stop or go on.
  void advance(int s, const float* logits, const Sequence::Proposal* draft = nullptr);
  // After the rows of slot s's verification chunk: sample row by row while
  // the answer takes the drafted tokens, then cut the cache back to them.
  void verify(int s, const float* logits, int rows);
  void finish(int s, Finish f, const std::string& error = "");
  void cancel_all_locked();
  Usage usage_of(const Request& r, const Slot& sl) const;
  // Slots busy, queue length and cache use into the metrics (the caches'
  // bytes in RAM when count_kv, else at most every half second).
  void update_gauges(bool count_kv = false);
  // The KV pool (EngineOptions::kv_pool): the positions request r reserves;
  // whether it fits in slot `slot` beside what the others hold, once the
  // least recently used free slots but `source` (where its prefix comes
  // from) give theirs back (done here). Under mu_.
  size_t reservation(const Request& r) const;
  bool make_room(const Request& r, int slot, int source);
  size_t pool_positions() const;  // held by every slot (written, or reserved while running)
  double position_bytes_ = 0;     // a position's bytes in every layer (the pool's unit)
  std::chrono::steady_clock::time_point kv_counted_{};
  Metrics::Snapshot::Kv kv_;  // the gauges' last figures

  std::unique_ptr<BatchBackend> batch_;
  const Tokenizer& tok_;
  EngineOptions opt_;
  std::vector<Slot> slots_;
  std::vector<float> logits_;
  uint64_t steps_ = 0;
  std::shared_ptr<Drafter> drafter_;          // speculating: the drafts' source
  // What a drafted token costs, in decode steps (DraftRate::length): a
  // drafted position's time (Drafter::token_seconds) and a verified row's time
  // beyond a plain step's, over a plain step's (decayed averages of
  // decoding steps; -1: not timed yet).
  struct DraftCosts {
    double step_s = -1, row_s = -1;
    uint64_t plain_at = 0;  // the last plain step timed
    // A plain step is due: none was timed yet, or none in the last 64 steps.
    bool due(uint64_t step) const { return step_s < 0 || step >= plain_at + 64; }
    void stepped(double seconds, int drafted_rows, uint64_t step);
    double per_token(double draft_token_s) const;  // 0.05 until timed (a row's, guessed)
    static double ema(double avg, double x);
  } costs_;
  std::unique_ptr<grammar::TokenMask> mask_;  // the vocabulary's, built for the first grammar

  mutable std::mutex mu_;  // queue_, stopping_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_;
  Metrics metrics_;
  std::thread thread_;
};

}  // namespace lr
