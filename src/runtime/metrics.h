// What the engine counts (its slots, queue, tokens and latencies); served as
// GET /metrics by lowrank serve (server/metrics.h). Updated by the engine
// thread, read by others: one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lr {

// A cumulative histogram over fixed upper bounds (seconds), as Prometheus keeps one.
struct Histogram {
  std::vector<double> bounds;    // ascending; +Inf is implicit
  std::vector<uint64_t> counts;  // [bounds.size() + 1]: observations <= bounds[i] (not cumulated)
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {});
  void observe(double v);
};

class Metrics {
 public:
  struct Snapshot {
    int running = 0, waiting = 0, slots = 0;
    double kv_usage = 0;  // cached tokens of busy slots / (slots * ctx)
    struct Kv {
      // The slots' KV caches: bytes set aside for their contexts, and of
      // them those in RAM (the positions written: core/zero_pages.h).
      uint64_t bytes = 0, resident_bytes = 0;
      // Stored prompt prefixes (EngineOptions::prompt_cache): bytes in RAM, and how many.
      uint64_t prompt_cache_bytes = 0;
      int prompt_cache_prefixes = 0;
      // The KV pool (EngineOptions::kv_pool; 0: none): its bytes, and those
      // the slots hold (written, or reserved by running requests).
      uint64_t pool_bytes = 0, pool_used_bytes = 0;
    } kv;
    uint64_t prompt_tokens = 0, generated_tokens = 0, cached_prompt_tokens = 0;
    uint64_t steps = 0, step_tokens = 0;
    double step_seconds = 0;                   // in the batch's forward steps
    uint64_t masks = 0;                        // grammar masks computed (one per constrained token)
    double mask_seconds = 0;                   // computing them
    uint64_t drafted = 0, draft_taken = 0;     // speculative decoding: drafted tokens, taken ones
    uint64_t slot_steps =
        0;  // a slot's steps that gave its answer tokens (generated / this: tokens a step)
    std::map<std::string, uint64_t> finished;  // by finish reason
    uint64_t rejected = 0;                     // refused: queue full or stopping
    Histogram ttft, itl, e2e;
    Histogram step_sizes;  // tokens per batch step
  };
  Metrics();

  void set_gauges(int running, int waiting, int slots, double kv_usage);
  void set_kv(const Snapshot::Kv& kv);
  void add_step(int tokens, double seconds = 0);
  void add_mask(uint64_t masks, double seconds);
  void add_draft(int drafted, int taken);
  void add_slot_steps(int n);
  void add_prompt(int tokens, int cached);
  void add_token(double since_last_s, bool first);  // the first: time to first token
  void add_finished(const std::string& reason, double e2e_s);
  void add_rejected();
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot s_;
};

}  // namespace lr
