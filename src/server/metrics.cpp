#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace lr::server {

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

void Metrics::add_step(int tokens) {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.steps;
  s_.step_tokens += uint64_t(tokens);
  s_.step_sizes.observe(double(tokens));
}

void Metrics::add_prompt(int tokens, int cached) {
  std::lock_guard<std::mutex> l(mu_);
  s_.prompt_tokens += uint64_t(tokens);
  s_.cached_prompt_tokens += uint64_t(cached);
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

std::string prometheus_text(const Metrics::Snapshot& s) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    metric(name, "gauge", help);
    out += fmt::format("{} {}\n", name, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    metric(name, "counter", help);
    out += fmt::format("{} {}\n", name, v);
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    metric(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                       h.sum, name, h.count);
  };
  gauge("lowrank_requests_running", "Requests in a slot.", s.running);
  gauge("lowrank_requests_waiting", "Requests queued for a slot.", s.waiting);
  gauge("lowrank_slots", "Slots (sequences a step can advance together).", s.slots);
  gauge("lowrank_slots_busy", "Slots holding a request.", s.running);
  gauge("lowrank_kv_cache_usage_ratio", "Cached tokens of busy slots over the slots' capacity.",
        s.kv_usage);
  counter("lowrank_prompt_tokens_total", "Prompt tokens of admitted requests.", s.prompt_tokens);
  counter("lowrank_prompt_tokens_cached_total", "Prompt tokens a slot's cache already held.",
          s.cached_prompt_tokens);
  counter("lowrank_generation_tokens_total", "Tokens generated.", s.generated_tokens);
  counter("lowrank_steps_total", "Batch steps run.", s.steps);
  counter("lowrank_step_tokens_total", "Tokens run in batch steps.", s.step_tokens);
  counter("lowrank_requests_rejected_total", "Requests refused (queue full or stopping).",
          s.rejected);
  metric("lowrank_requests_finished_total", "counter", "Requests finished, by reason.");
  for (const char* r : {"stop", "length", "cancelled"}) {
    auto it = s.finished.find(r);
    out += fmt::format("lowrank_requests_finished_total{{finish_reason=\"{}\"}} {}\n", r,
                       it == s.finished.end() ? 0 : it->second);
  }
  histogram("lowrank_time_to_first_token_seconds", "From arrival to the first generated token.",
            s.ttft);
  histogram("lowrank_inter_token_latency_seconds",
            "Between consecutive generated tokens of a request.", s.itl);
  histogram("lowrank_e2e_request_latency_seconds", "From arrival to the end of a request.", s.e2e);
  histogram("lowrank_iteration_tokens", "Tokens per batch step (decode rows and prompt chunks).",
            s.step_sizes);
  return out;
}

}  // namespace lr::server
