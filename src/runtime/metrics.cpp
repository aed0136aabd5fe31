#include "runtime/metrics.h"

#include <algorithm>

namespace lr {

namespace {

std::vector<double> latency_bounds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace

Histogram::Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[i];
  sum += v;
  ++count;
}

Metrics::Metrics() {
  s_.ttft = Histogram(latency_bounds());
  s_.itl = Histogram(latency_bounds());
  s_.e2e = Histogram(latency_bounds());
  s_.step_sizes = Histogram({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192});
}

void Metrics::set_gauges(int running, int waiting, int slots, double kv_usage) {
  std::lock_guard<std::mutex> l(mu_);
  s_.running = running;
  s_.waiting = waiting;
  s_.slots = slots;
  s_.kv_usage = kv_usage;
}

void Metrics::set_kv(const Snapshot::Kv& kv) {
  std::lock_guard<std::mutex> l(mu_);
  s_.kv = kv;
}

void Metrics::add_step(int tokens, double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.steps;
  s_.step_seconds += seconds;
  s_.step_tokens += uint64_t(tokens);
  s_.step_sizes.observe(double(tokens));
}

void Metrics::add_prompt(int tokens, int cached) {
  std::lock_guard<std::mutex> l(mu_);
  s_.prompt_tokens += uint64_t(tokens);
  s_.cached_prompt_tokens += uint64_t(cached);
}

void Metrics::add_mask(uint64_t masks, double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  s_.masks += masks;
  s_.mask_seconds += seconds;
}

void Metrics::add_draft(int drafted, int taken) {
  std::lock_guard<std::mutex> l(mu_);
  s_.drafted += uint64_t(drafted);
  s_.draft_taken += uint64_t(taken);
}

void Metrics::add_slot_steps(int n) {
  std::lock_guard<std::mutex> l(mu_);
  s_.slot_steps += uint64_t(n);
}

void Metrics::add_token(double since_last_s, bool first) {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.generated_tokens;
  (first ? s_.ttft : s_.itl).observe(since_last_s);
}

void Metrics::add_finished(const std::string& reason, double e2e_s) {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.finished[reason];
  s_.e2e.observe(e2e_s);
}

void Metrics::add_rejected() {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.rejected;
}

Metrics::Snapshot Metrics::snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  return s_;
}

}  // namespace lr
