#include "server/metrics.h"

#include <fmt/format.h>

namespace lr::server {

std::string prometheus_text(const Metrics::Snapshot& s) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    metric(name, "gauge", help);
    out += fmt::format("{} {}\n", name, v);
  };
  auto counter = [&](const char* name, const char* help, auto v) {  // a count, or seconds
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
  gauge("lowrank_kv_cache_bytes", "Bytes the slots' KV caches set aside for their contexts.",
        s.kv.bytes);
  gauge("lowrank_kv_cache_resident_bytes",
        "Of them, bytes in RAM (the positions the slots have written; pages mapped from the "
        "prompt cache count in every slot that maps them).",
        s.kv.resident_bytes);
  gauge("lowrank_prompt_cache_bytes", "Bytes of stored prompt prefixes (--cache-ram).",
        s.kv.prompt_cache_bytes);
  gauge("lowrank_prompt_cache_prefixes", "Stored prompt prefixes.", s.kv.prompt_cache_prefixes);
  gauge("lowrank_kv_pool_bytes", "The KV pool's bytes (--kv-pool; 0: none).", s.kv.pool_bytes);
  gauge("lowrank_kv_pool_used_bytes",
        "Of the pool, bytes the slots hold (positions written, or reserved by running requests).",
        s.kv.pool_used_bytes);
  counter("lowrank_prompt_tokens_total", "Prompt tokens of admitted requests.", s.prompt_tokens);
  counter("lowrank_prompt_tokens_cached_total", "Prompt tokens a slot's cache already held.",
          s.cached_prompt_tokens);
  counter("lowrank_generation_tokens_total", "Tokens generated.", s.generated_tokens);
  counter("lowrank_steps_total", "Batch steps run.", s.steps);
  counter("lowrank_step_tokens_total", "Tokens run in batch steps.", s.step_tokens);
  counter("lowrank_step_seconds_total", "Time in the batch's forward steps.", s.step_seconds);
  counter("lowrank_grammar_masks_total", "Grammar masks computed (one per constrained token).",
          s.masks);
  counter("lowrank_grammar_mask_seconds_total", "Time computing grammar masks.", s.mask_seconds);
  counter("lowrank_draft_tokens_total", "Tokens drafted for speculative decoding (--draft-max).",
          s.drafted);
  counter("lowrank_draft_tokens_accepted_total",
          "Drafted tokens the answers took (speculative sampling's rule).", s.draft_taken);
  counter("lowrank_slot_steps_total",
          "Steps that gave a slot's answer tokens (generated tokens / this: tokens per step).",
          s.slot_steps);
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
