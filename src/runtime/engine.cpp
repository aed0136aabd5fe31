#include "runtime/engine.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace lr {

using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int decode_room(int budget, int decoding, int prompt_left, int decode_chunk) {
  const int extra = std::max(0, budget - decoding);
  if (prompt_left <= 0) return decoding + extra;
  return decoding + std::min(extra, std::max(0, decode_chunk - prompt_left));
}

Request::News Request::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return news_; });
  News n = std::move(pending_);
  pending_ = News{};
  pending_.done = n.done;  // done stays done
  pending_.finish = n.finish;
  pending_.usage = n.usage;
  pending_.error = n.error;
  news_ = false;
  return n;
}

void Request::post(const std::string& text, const TokenOut* token, Finish finish,
                   const Usage& usage, const std::string& error) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_.text += text;
    if (token) pending_.tokens.push_back(*token);
    if (finish != Finish::None) {
      pending_.done = true;
      pending_.finish = finish;
    }
    pending_.usage = usage;
    if (!error.empty()) pending_.error = error;
    news_ = true;
  }
  cv_.notify_all();
}

Engine::Engine(std::unique_ptr<BatchBackend> batch, const Tokenizer& tok, const EngineOptions& o)
    : batch_(std::move(batch)), tok_(tok), opt_(o) {
  if (o.queue < 0) fail("--queue must be >= 0 (got {})", o.queue);
  if (o.draft_max < 0) fail("--draft-max must be >= 0 (got {})", o.draft_max);
  if (o.draft_max > 0 && !(batch_->verifies() && batch_->rewinds_exactly()))
    fail(
        "--draft-max: speculative decoding runs on the CPU's fast path with an f32, f16, q8_0 or "
        "q4_0 key cache (it verifies drafts in decode steps and cuts rejected ones back exactly)");
  if (o.draft_max > 0) drafter_ = o.drafter ? o.drafter : ngram_drafter(o.ngram);
  slots_.resize(size_t(batch_->slots()));
  // A row per slot, and a speculating slot's drafted ones.
  logits_.resize(size_t(batch_->slots()) * size_t(1 + o.draft_max) *
                 size_t(batch_->weights().cfg.vocab));
  position_bytes_ = double(batch_->cache_bytes(0)) / double(batch_->ctx());
  if (o.kv_pool > 0 && !(position_bytes_ > 0))
    fail("--kv-pool: these slots do not say what their caches hold");
  metrics_.set_gauges(0, 0, batch_->slots(), 0);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  shutdown();
}

std::shared_ptr<Request> Engine::submit(std::vector<int32_t> prompt, const GenParams& p) {
  return submit(std::move(prompt), p, 1).front();
}

std::vector<std::shared_ptr<Request>> Engine::submit(std::vector<int32_t> prompt,
                                                     const GenParams& p, int n) {
  if (n < 1) fail("n must be at least 1 (got {})", n);
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) >= ctx())
    fail(
        "the prompt has {} tokens; a slot's context holds {} (with room for one generated token; "
        "raise -c)",
        prompt.size(), ctx());
  for (int32_t id : prompt)
    if (id < 0 || id >= tok_.n_vocab())
      fail("token id {} is out of range for a vocabulary of {}", id, tok_.n_vocab());
  if (p.max_tokens < 1) fail("max_tokens must be at least 1 (got {})", p.max_tokens);
  if (opt_.kv_pool > 0) {
    const size_t reach = std::min<size_t>(size_t(ctx()), prompt.size() + size_t(p.max_tokens));
    if (double(reach) * position_bytes_ > double(opt_.kv_pool))
      fail(
          "the request reaches {} positions ({} prompt tokens and max_tokens {}): {:.1f} MiB of KV "
          "cache, more than the pool's {:.1f} MiB (--kv-pool)",
          reach, prompt.size(), p.max_tokens, double(reach) * position_bytes_ / (1 << 20),
          double(opt_.kv_pool) / (1 << 20));
  }
  Sampler check(p.sampling);  // throws on bad sampling parameters, here rather than in the loop
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < n; ++i) {
    auto r = std::make_shared<Request>();
    r->prompt_ = prompt;
    r->params_ = p;
    r->params_.sampling.seed = p.sampling.seed + uint64_t(i);
    if (i > 0) r->leader_ = rs.front();
    r->arrived_ = Clock::now();
    rs.push_back(std::move(r));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || int(queue_.size()) + n > opt_.queue) {
      metrics_.add_rejected();
      throw Busy(stopping_ ? "the server is shutting down" : "the request queue is full");
    }
    queue_.insert(queue_.end(), rs.begin(), rs.end());
  }
  cv_.notify_all();
  return rs;
}

bool Engine::leader_pending(const Request& r) const {
  const std::shared_ptr<Request> lead = r.leader_.lock();
  if (!lead) return false;
  for (const Slot& sl : slots_)
    if (sl.req == lead) return sl.prefilling();
  return std::find(queue_.begin(), queue_.end(), lead) != queue_.end();
}

namespace {
// The length of the common prefix of a and b, at most `most`.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t most) {
  const size_t n = std::min({a.size(), b.size(), most});
  return size_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
}
}  // namespace

Engine::Source Engine::cached_prefix(const std::vector<int32_t>& prompt, int except) const {
  Source best;
  if (!batch_->copies_prefixes()) return best;
  const size_t most = prompt.size() - 1;  // the last prompt token runs, for its logits
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (int(s) == except) continue;
    const size_t n = common_prefix(prompt, slots_[s].cached, most);
    if (n > best.n && batch_->rewindable(int(s), int(n)) == int(n)) best = {int(s), n};
  }
  return best;
}

bool Engine::waits_for_prefix(const Request& r, size_t held) const {
  if (!batch_->copies_prefixes()) return false;
  const size_t most = r.prompt_.size() - 1;
  for (const Slot& sl : slots_) {
    if (!sl.prefilling()) continue;
    const size_t n = common_prefix(r.prompt_, sl.req->prompt_, most);
    if (n >= kShareWait && n > held) return true;
  }
  return false;
}

size_t Engine::take_prefix(const std::vector<int32_t>& prompt, int slot, size_t keep, Source src) {
  const size_t most = prompt.size() - 1;
  StoredPrefix* best = nullptr;  // the stored prefix sharing the most
  size_t n = 0;
  for (StoredPrefix& p : stored_)
    if (const size_t c = size_t(p.data->usable(int(common_prefix(prompt, p.tokens, most)))); c > n)
      best = &p, n = c;
  std::shared_ptr<const BatchBackend::Stored> kept;  // one stored now beyond the budget
  // A slot's prefix is stored when it holds kStoreTokens more than the
  // stored ones (a few more tokens are evaluated, rather than stored again).
  if (opt_.prompt_cache > 0 && src.n >= std::max(keep, n) + kStoreTokens) {
    if (auto d = batch_->store_prefix(src.slot, int(src.n))) {
      // Room for it: the least recently used go (slots keep the pages they map).
      while (!stored_.empty() && stored_bytes_ + d->bytes > opt_.prompt_cache) {
        auto lru = std::min_element(
            stored_.begin(), stored_.end(),
            [](const auto& a, const auto& b) { return a.last_used < b.last_used; });
        stored_bytes_ -= lru->data->bytes;
        stored_.erase(lru);
      }
      n = src.n;
      best = nullptr;
      if (d->bytes <= opt_.prompt_cache) {
        stored_.push_back({{prompt.begin(), prompt.begin() + long(n)}, d, steps_});
        stored_bytes_ += d->bytes;
        best = &stored_.back();
      }
      kept = std::move(d);
    }
  }
  const BatchBackend::Stored* from = best ? best->data.get() : kept.get();
  if (from && n > keep && n + kStoreTokens > src.n && batch_->load_prefix(*from, slot, int(n))) {
    if (best) best->last_used = steps_;
    return n;
  }
  if (src.n > keep && batch_->copy_prefix(src.slot, slot, int(src.n), int(keep))) return src.n;
  return keep;
}

size_t Engine::reservation(const Request& r) const {
  return std::min<size_t>(size_t(ctx()), r.prompt_.size() + size_t(r.params_.max_tokens));
}

size_t Engine::pool_positions() const {
  size_t n = 0;
  for (const Slot& sl : slots_) n += std::max(sl.written, sl.req ? sl.reserved : 0);
  return n;
}

bool Engine::make_room(const Request& r, int slot, int source) {
  if (opt_.kv_pool == 0) return true;
  auto fits = [&] {
    const Slot& sl = slots_[size_t(slot)];
    const size_t held = pool_positions() - sl.written + std::max(sl.written, reservation(r));
    return double(held) * position_bytes_ <= double(opt_.kv_pool);
  };
  while (!fits()) {
    // The least recently used free slot that holds pages, but `slot` and the
    // slot its prefix comes from.
    int lru = -1;
    for (size_t s = 0; s < slots_.size(); ++s) {
      const Slot& sl = slots_[s];
      if (int(s) != slot && int(s) != source && !sl.req && sl.written > 0 &&
          (lru < 0 || sl.last_used < slots_[size_t(lru)].last_used))
        lru = int(s);
    }
    if (lru < 0) return false;
    batch_->release(lru);
    slots_[size_t(lru)].cached.clear();
    slots_[size_t(lru)].written = 0;
  }
  return true;
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + opt_.shutdown_grace;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::hurry() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) deadline_ = Clock::now();
  }
  cv_.notify_all();
}

void Engine::loop() {
  for (;;) {
    bool busy =
        std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.req != nullptr; });
    {
      std::unique_lock<std::mutex> l(mu_);
      if (!busy) cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && Clock::now() >= deadline_) cancel_all_locked();
      if (stopping_ && queue_.empty() && !busy) return;
    }
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].req && slots_[s].req->cancelled()) finish(int(s), Finish::Cancelled);
    admit();
    try {
      run_step();
    } catch (const std::exception& e) {  // a broken step ends the requests in it, not the engine
      std::fprintf(stderr, "lowrank: step failed: %s\n", e.what());
      for (size_t s = 0; s < slots_.size(); ++s)
        if (slots_[s].req) finish(int(s), Finish::Cancelled, e.what());
    }
  }
}

void Engine::cancel_all_locked() {
  for (auto& r : queue_) r->cancel();
  for (Slot& s : slots_)
    if (s.req) s.req->cancel();
}

void Engine::admit() {
  for (;;) {
    std::shared_ptr<Request> r;
    {
      std::lock_guard<std::mutex> l(mu_);
      while (!queue_.empty() && queue_.front()->cancelled()) {  // gone before it ran
        auto gone = queue_.front();
        queue_.pop_front();
        metrics_.add_finished("cancelled", seconds(Clock::now() - gone->arrived_));
        gone->post("", nullptr, Finish::Cancelled, {int(gone->prompt_.size()), 0, 0});
      }
      if (queue_.empty()) break;
      // An answer of n > 1 waits until its leader's prompt is cached.
      const Request& front = *queue_.front();
      if (leader_pending(front)) break;
      // The free slot whose cache shares the longest prefix; else the least recently used.
      int best = -1;
      size_t best_common = 0;
      const size_t most = front.prompt_.size() - 1;  // the last token runs, for its logits
      for (size_t s = 0; s < slots_.size(); ++s) {
        const Slot& sl = slots_[s];
        if (sl.req) continue;
        const size_t common = common_prefix(front.prompt_, sl.cached, most);
        if (best < 0 || common > best_common ||
            (common == best_common && sl.last_used < slots_[size_t(best)].last_used)) {
          best = int(s);
          best_common = common;
        }
      }
      if (best < 0) break;
      // A longer prefix in another slot's cache is copied; one a slot is
      // still evaluating is waited for (evaluating it twice would only
      // share the steps between the two).
      const Source src = cached_prefix(front.prompt_, best);
      if (waits_for_prefix(front, std::max(best_common, src.n))) break;
      if (!make_room(front, best, src.slot)) break;  // the KV pool is full: wait
      r = queue_.front();
      queue_.pop_front();
      Slot& sl = slots_[size_t(best)];
      // (a sliding-window ring may hold too little to keep the prefix: then nothing is kept)
      size_t keep = size_t(batch_->rewindable(best, int(best_common)));
      batch_->rewind(best, int(keep));
      sl.cached.resize(keep);
      if (const size_t took = take_prefix(r->prompt_, best, keep, src); took > keep) {
        keep = took;
        sl.cached.assign(r->prompt_.begin(), r->prompt_.begin() + long(keep));
      }
      sl.written = std::max(sl.written, keep);
      sl.req = r;
      sl.reserved = reservation(*r);
      sl.fed = keep;
      sl.reused = int(keep);
      sl.next = -1;
      sl.drafted = sl.taken = sl.steps = 0;
      sl.draft_rng.seed(r->params_.sampling.seed ^ 0x9e3779b97f4a7c15ull);
      sl.rate = DraftRate{};
      if (r->params_.grammar && !mask_) mask_ = token_mask(tok_);
      sl.seq.emplace(tok_, r->prompt_, r->params_, mask_.get());
      r->admitted_ = Clock::now();
      metrics_.add_prompt(int(r->prompt_.size()), int(keep));
    }
  }
}

std::vector<Drafter::Draft> Engine::drafts(const std::vector<int>& decoding, int room) {
  std::vector<Drafter::Draft> out(slots_.size());
  const int n = int(decoding.size());
  // Drafts share what the step leaves them after one token per decoding slot.
  const int k = n > 0 ? std::min(opt_.draft_max, (room - n) / n) : 0;
  if (k <= 0) return out;
  if (opt_.draft_cost < 0 && costs_.due(steps_)) return out;  // a plain step, to time one
  std::vector<Drafter::Ask> asks;
  for (int s : decoding) {
    Slot& sl = slots_[size_t(s)];
    // Room: the draft's positions follow next's, within the context; as
    // many as its recent drafts were worth.
    const int ks = std::min(
        {k, ctx() - int(sl.cached.size()) - 1,
         sl.rate.length(k, opt_.draft_cost >= 0 ? opt_.draft_cost
                                                : costs_.per_token(drafter_->token_seconds()))});
    if (ks <= 0) continue;
    asks.push_back({s, sl.cached, ks, sl.req->params_.sampling, &sl.draft_rng});
    asks.back().hist.push_back(sl.next);
  }
  std::vector<Drafter::Draft> got;
  if (asks.empty()) return out;
  drafter_->draft(asks, got);
  const int vocab = batch_->weights().cfg.vocab;
  for (size_t i = 0; i < asks.size(); ++i) {
    Drafter::Draft& d = out[size_t(asks[i].slot)];
    d = std::move(got[i]);
    LR_ASSERT(d.q.empty() || d.q.size() == d.tokens.size());
    // At most k, and (a draft model's rows may be wider than the target's) in the vocabulary.
    const size_t keep =
        size_t(std::find_if(d.tokens.begin(),
                            d.tokens.begin() + std::min<long>(long(d.tokens.size()), asks[i].k),
                            [&](int32_t t) { return t < 0 || t >= vocab; }) -
               d.tokens.begin());
    d.tokens.resize(keep);
    if (!d.q.empty()) d.q.resize(keep);
  }
  return out;
}

void Engine::run_step() {
  std::vector<BatchBackend::Chunk> chunks;
  std::vector<std::pair<int, int>> owner;  // slot and logit rows of each chunk that asks for them
  int budget = batch_->max_step_tokens();
  std::vector<int> decoding;
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].req && !slots_[s].prefilling()) decoding.push_back(int(s));
  std::vector<Drafter::Draft> draft;
  if (drafter_) {
    int prompt_left = 0;
    for (const Slot& sl : slots_)
      if (sl.prefilling()) prompt_left += int(sl.req->prompt_.size() - sl.fed);
    draft =
        drafts(decoding, decode_room(budget, int(decoding.size()), prompt_left, opt_.decode_chunk));
  }
  for (int s : decoding) {  // decoding slots: a token, and its draft where speculating
    if (budget <= 0) break;  // (admission keeps decoding slots within a step; drafts too)
    Slot& sl = slots_[size_t(s)];
    if (draft.empty() || draft[size_t(s)].tokens.empty()) {
      chunks.push_back({s, &sl.next, 1, true, /*generated=*/true});
    } else {
      const Drafter::Draft& d = draft[size_t(s)];
      sl.feed.assign(1, sl.next);
      sl.feed.insert(sl.feed.end(), d.tokens.begin(), d.tokens.end());
      sl.q = std::move(draft[size_t(s)].q);
      chunks.push_back({s, sl.feed.data(), int(sl.feed.size()), true, /*generated=*/true,
                        /*every_logits=*/true});
    }
    owner.push_back({s, chunks.back().n});
    budget -= chunks.back().n;
  }
  if (!chunks.empty()) budget = std::min(budget, opt_.decode_chunk);
  // Then prompt chunks, the earliest admitted first (by slot, a prompt in a
  // late slot could wait while earlier slots take new ones).
  std::vector<int> prefilling;
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].prefilling()) prefilling.push_back(int(s));
  std::stable_sort(prefilling.begin(), prefilling.end(), [&](int a, int b) {
    return slots_[size_t(a)].req->admitted_ < slots_[size_t(b)].req->admitted_;
  });
  for (int s : prefilling) {
    if (budget <= 0) break;
    Slot& sl = slots_[size_t(s)];
    const int n = int(std::min<size_t>(size_t(budget), sl.req->prompt_.size() - sl.fed));
    const bool last = sl.fed + size_t(n) == sl.req->prompt_.size();
    chunks.push_back({s, sl.req->prompt_.data() + sl.fed, n, last});
    if (last) owner.push_back({s, 1});
    budget -= n;
  }
  update_gauges();
  if (chunks.empty()) return;
  const auto t0 = Clock::now();
  batch_->step(chunks, logits_.data());
  ++steps_;
  const double step_s = seconds(Clock::now() - t0);
  metrics_.add_step(batch_->last_step().tokens, step_s);
  if (drafter_ && std::all_of(chunks.begin(), chunks.end(), [](const auto& c) {
        return c.generated;  // decoding alone: a step of the cost model
      })) {
    int rows = 0;
    for (const auto& o : owner) rows += o.second - 1;
    costs_.stepped(step_s, rows, steps_);
  }
  for (const auto& c : chunks) {
    Slot& sl = slots_[size_t(c.slot)];
    sl.written = std::max(sl.written, size_t(batch_->n_past(c.slot)));
    if (c.every_logits) continue;  // verify() keeps what the answer takes
    sl.cached.insert(sl.cached.end(), c.tokens, c.tokens + c.n);
    if (sl.prefilling()) sl.fed += size_t(c.n);
  }
  const size_t vocab = size_t(batch_->weights().cfg.vocab);
  const float* row = logits_.data();
  metrics_.add_slot_steps(int(owner.size()));
  for (auto [s, rows] : owner) {
    ++slots_[size_t(s)].steps;
    if (rows == 1)
      advance(s, row);
    else
      verify(s, row, rows);
    row += size_t(rows) * vocab;
  }
  update_gauges();
}

void Engine::verify(int s, const float* logits, int rows) {
  Slot& sl = slots_[size_t(s)];
  const std::vector<int32_t>& fed = sl.feed;  // (advance() changes next, not feed)
  const size_t vocab = size_t(batch_->weights().cfg.vocab);
  int taken = 0;  // drafted tokens the answer sampled itself
  sl.drafted += rows - 1;
  for (int i = 0; i < rows; ++i) {
    sl.cached.push_back(fed[size_t(i)]);
    // A token drawn from the draft's distribution goes by speculative
    // sampling's rule; a certain guess by sampling as plain decoding does.
    Sequence::Proposal p{};
    const bool sampled = i + 1 < rows && !sl.q.empty();
    if (sampled) p = {fed[size_t(i) + 1], &sl.q[size_t(i)]};
    advance(s, logits + size_t(i) * vocab, sampled ? &p : nullptr);
    if (!sl.req || i + 1 == rows || sl.next != fed[size_t(i) + 1]) break;
    ++taken;
    ++sl.taken;
  }
  if (batch_->n_past(s) > int(sl.cached.size())) batch_->rewind(s, int(sl.cached.size()));
  metrics_.add_draft(rows - 1, taken);
  sl.rate.add(rows - 1, taken);
}

void Engine::DraftCosts::stepped(double seconds, int drafted_rows, uint64_t step) {
  if (drafted_rows == 0) {
    step_s = ema(step_s, seconds);
    plain_at = step;
  } else if (step_s > 0) {
    row_s = ema(row_s, std::max(0.0, seconds - step_s) / drafted_rows);
  }
}

double Engine::DraftCosts::per_token(double draft_token_s) const {
  if (!(step_s > 0)) return 0.05;  // (before a plain step was timed)
  return (draft_token_s + (row_s >= 0 ? row_s : 0.05 * step_s)) / step_s;
}

double Engine::DraftCosts::ema(double avg, double x) {
  return avg < 0 ? x : 0.8 * avg + 0.2 * x;
}

void Engine::update_gauges(bool count_kv) {
  int running = 0;
  int64_t cached = 0;
  for (const Slot& sl : slots_)
    if (sl.req) ++running, cached += int64_t(sl.cached.size());
  const auto now = Clock::now();
  if (count_kv || now >= kv_counted_ + std::chrono::milliseconds(500)) {  // (mincore: cost)
    kv_counted_ = now;
    kv_.bytes = kv_.resident_bytes = 0;
    for (int s = 0; s < slots(); ++s)
      kv_.bytes += batch_->cache_bytes(s), kv_.resident_bytes += batch_->cache_resident(s);
  }
  kv_.prompt_cache_bytes = stored_bytes_;
  kv_.prompt_cache_prefixes = int(stored_.size());
  kv_.pool_bytes = opt_.kv_pool;
  kv_.pool_used_bytes = uint64_t(double(pool_positions()) * position_bytes_);
  metrics_.set_kv(kv_);
  std::lock_guard<std::mutex> l(mu_);
  metrics_.set_gauges(running, int(queue_.size()), slots(),
                      double(cached) / (double(slots()) * double(ctx())));
}

void Engine::advance(int s, const float* logits, const Sequence::Proposal* draft) {
  Slot& sl = slots_[size_t(s)];
  Request& r = *sl.req;
  // The next step would feed the token: it needs a position in the cache.
  const bool room = int(sl.cached.size()) < ctx();
  Sequence::Step o = sl.seq->next(logits, batch_->weights().cfg.vocab, room, draft);
  if (o.mask_s > 0) metrics_.add_mask(1, o.mask_s);
  const auto now = Clock::now();
  const bool first = sl.seq->generated().size() == 1;
  metrics_.add_token(seconds(now - (first ? r.arrived_ : r.last_token_)), first);
  if (first) r.first_token_ = now;
  r.last_token_ = now;
  if (!o.text.empty() || o.token)
    r.post(o.text, o.token ? &*o.token : nullptr, Finish::None, usage_of(r, sl));
  if (o.finish != Finish::None) return finish(s, o.finish);
  sl.next = o.id;
}

Usage Engine::usage_of(const Request& r, const Slot& sl) const {
  Usage u{int(r.prompt_.size()), sl.seq ? int(sl.seq->generated().size()) : 0, sl.reused};
  u.drafted = sl.drafted;
  u.draft_taken = sl.taken;
  u.steps = sl.steps;
  if (sl.seq && !sl.seq->generated().empty()) {
    u.prompt_s = seconds(r.first_token_ - r.admitted_);
    u.decode_s = seconds(r.last_token_ - r.first_token_);
  }
  return u;
}

void Engine::finish(int s, Finish f, const std::string& error) {
  Slot& sl = slots_[size_t(s)];
  const Request& r = *sl.req;
  // Counted before the request hears of it, so a client's next /metrics includes it.
  metrics_.add_finished(finish_name(f), seconds(Clock::now() - r.arrived_));
  const std::shared_ptr<Request> req = std::move(sl.req);
  sl.last_used = steps_;
  update_gauges(/*count_kv=*/true);
  req->post("", nullptr, f, usage_of(*req, sl), error);
}

}  // namespace lr
