// A persistent pool of worker threads for the CPU backend.
//
// A pool of size N owns N-1 worker threads; the thread that calls run() takes
// part as tid 0, so a pool of size 1 runs everything inline and starts no
// thread. One run() is one "dispatch": fn(tid, nth) runs once on every thread
// and run() returns when all of them have finished.
//
// Between dispatches workers spin briefly (so back-to-back dispatches of a
// forward pass stay cheap) and then sleep on a condition variable, so an idle
// pool does not burn CPU.
//
// Rules:
//  * run() must not be called concurrently from two threads, nor from inside fn
//    (checked: LR_ASSERT).
//  * barrier() and share() may only be called from inside fn, and every
//    thread of the dispatch must call them the same number of times.
//  * If fn throws on any thread, run() waits for all threads and rethrows the
//    first exception caught. Threads waiting in barrier() at that time (or
//    reaching one later in that dispatch) leave it by an internal exception,
//    so a throw never deadlocks the pool; the pool stays usable afterwards.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lr {

class ThreadPool {
 public:
  // n_threads >= 1 (throws lr::Error otherwise): the total number of threads,
  // the calling thread included.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }

  // Whether idle workers spin for a while before they sleep (the default) or
  // sleep at once, so that every dispatch wakes them through the condition
  // variable and joins them again (what an eager framework's op-by-op
  // launches cost). Takes effect from the workers' next idle wait.
  void set_spin(bool spin) { spin_.store(spin, std::memory_order_relaxed); }

  // Runs fn(tid, nth) on all size() threads (the caller is tid 0, nth ==
  // size()) and returns when all are done.
  void run(const std::function<void(int tid, int nth)>& fn);

  // Splits [0, n) into size() contiguous chunks (sizes differ by at most one;
  // empty chunks are skipped) and calls f(begin, end) for each chunk, in one
  // dispatch. n <= 0 does nothing (no dispatch).
  template <class F>
  void parallel_for(int64_t n, F&& f) {
    if (n <= 0) return;
    run([&](int tid, int nth) {
      const int64_t chunk = n / nth, rem = n % nth;
      const int64_t begin = tid * chunk + std::min<int64_t>(tid, rem);
      const int64_t end = begin + chunk + (tid < rem ? 1 : 0);
      if (begin < end) f(begin, end);
    });
  }

  // Sense-reversing barrier across the threads of the current dispatch.
  // Returns once every thread has called it; writes made before the barrier
  // by any thread are visible to all threads after it. A waiting thread spins
  // (pause, then yield) for tens of microseconds and then sleeps on a futex,
  // so a thread descheduled by an oversubscribed host is not starved by the
  // threads waiting for it.
  void barrier();

  // Work sharing inside a dispatch, in place of "f(tid, nth); barrier();":
  // chunk c of [0, n_chunks) belongs to thread c % size(); each thread runs
  // its own chunks, then any chunk no thread has taken yet (so a thread the
  // host has not scheduled holds nobody up: the others take its chunk), and,
  // with `wait`, returns once every chunk is done (their writes visible; one
  // barrier episode in the counters). f(c) runs once per chunk, on whichever
  // thread took it. Every thread of the dispatch calls share() the same
  // number of times, with the same arguments (as barrier()); a dispatch
  // holds at most reserve_phases() of them. Chunks from 64 on are not taken
  // by other threads.
  template <class F>
  void share(int tid, int n_chunks, bool wait, F&& f) {
    Phase& ph = enter_phase(tid);
    auto run = [&](int c) {
      f(c);
      finish(ph, n_chunks, wait);
    };
    for (int c = tid; c < n_chunks; c += n_)
      if (claim(ph, c)) run(c);
    for (int c = 0; c < std::min(n_chunks, 64); ++c)
      if (c % n_ != tid && claim(ph, c)) run(c);
    if (wait) wait_phase(ph, n_chunks);
  }
  // Room for `n` share() calls per dispatch; called outside a dispatch.
  void reserve_phases(int n);

  // Number of run() calls and of completed barrier episodes (one per barrier
  // crossing of the whole pool, not one per thread) since construction or
  // the last reset_counters().
  uint64_t dispatches() const { return dispatches_.load(std::memory_order_relaxed); }
  uint64_t barriers() const { return barriers_.load(std::memory_order_relaxed); }
  void reset_counters();

 private:
  struct Aborted {};  // thrown out of barrier() when another thread has thrown

  // A share() call's state: chunks taken (bit c) and done.
  struct alignas(64) Phase {
    std::atomic<uint64_t> taken{0};
    std::atomic<int> done{0};
  };
  Phase& enter_phase(int tid);
  bool claim(Phase& ph, int c);
  void finish(Phase& ph, int n_chunks, bool counted);
  void wait_phase(Phase& ph, int n_chunks);
  void reset_phases();

  void worker_main(int tid);
  void run_on_this_thread(int tid) noexcept;
  void record_exception(std::exception_ptr e) noexcept;

  const int n_;
  std::vector<std::thread> workers_;

  // Dispatch state. fn_ is written by the caller before gen_ is bumped
  // (release) and read by workers after they observe the new gen_ (acquire).
  const std::function<void(int, int)>* fn_ = nullptr;
  alignas(64) std::atomic<uint64_t> gen_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> spin_{true};
  alignas(64) std::atomic<int> remaining_{0};  // workers still running fn
  std::atomic<int> caller_sleeps_{0};          // run()'s caller asleep on remaining_
  alignas(64) std::atomic<int> sleepers_{0};   // workers blocked on cv_
  std::mutex mu_;
  std::condition_variable cv_;

  // Barrier state: arrivals in the current episode, and the episode number
  // (its parity is the "sense").
  alignas(64) std::atomic<int> bar_count_{0};
  alignas(64) std::atomic<uint32_t> bar_gen_{0};
  std::atomic<int> bar_sleepers_{0};  // threads asleep on bar_gen_

  // share() state: one Phase per call of the dispatch, and each thread's
  // next call (a padded slot per thread).
  std::unique_ptr<Phase[]> phases_;
  int phase_cap_ = 0;
  struct alignas(64) NextPhase {
    int p = 0;
  };
  std::vector<NextPhase> next_phase_;
  alignas(64) std::atomic<int> phase_sleepers_{0};

  alignas(64) std::atomic<bool> running_{false};
  std::atomic<bool> abort_{false};
  std::mutex ex_mu_;
  std::exception_ptr first_ex_;

  std::atomic<uint64_t> dispatches_{0};
  std::atomic<uint64_t> barriers_{0};
};

}  // namespace lr
