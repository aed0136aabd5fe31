#include "core/thread_pool.h"

#include <immintrin.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>
#include <utility>

#include "core/error.h"

namespace lr {

namespace {

using Clock = std::chrono::steady_clock;

// How long an idle worker spins on the dispatch counter before it goes to
// sleep on the condition variable (set_spin(true)). Forward passes issue
// dispatches microseconds apart, so this covers them; a pool idle for longer
// sleeps.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
// Pause iterations before a spinning thread starts yielding its core on every
// iteration (matters when there are more runnable threads than free cores:
// the thread being waited for may need this core).
constexpr int kPauseIters = 128;
// How long a thread waiting in a barrier, or for the workers at the end of a
// dispatch, keeps its core (pause, then yield) before it sleeps on a futex.
// Waits inside a forward pass last microseconds, so they never sleep; a wait
// longer than this means the thread waited for is not running (more runnable
// threads than cores), and yielding in a loop would then take the core's time
// from it (the scheduler barely honours a yield).
// (0.5B decode on 2 cores beside 2 busy processes: 54-60 tok/s with 20-200
// us, 30-54 spinning without end, 11 with 1 ms.)
constexpr auto kWaitSpin = std::chrono::microseconds(50);
// A sleeping waiter wakes at least this often to check for an abort.
constexpr long kSleepSliceNs = 1'000'000;

inline void cpu_relax() { _mm_pause(); }

// The futex word of a 32-bit atomic (libstdc++ and libc++ store it bare).
template <class T>
uint32_t* futex_word(std::atomic<T>& a) {
  static_assert(sizeof(std::atomic<T>) == 4 && std::atomic<T>::is_always_lock_free);
  return reinterpret_cast<uint32_t*>(&a);
}

// Sleeps while the word still holds `expected`, for at most one slice.
template <class T>
void futex_wait(std::atomic<T>& a, T expected) {
  timespec slice{0, kSleepSliceNs};
  syscall(SYS_futex, futex_word(a), FUTEX_WAIT_PRIVATE, uint32_t(expected), &slice, nullptr, 0);
}

template <class T>
void futex_wake_all(std::atomic<T>& a) {
  syscall(SYS_futex, futex_word(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Waits until done(word) holds: pauses, then yields until kWaitSpin has
// passed, then sleeps on the word's futex. A waiter raises `sleepers` before
// it reads the word for the last time (both seq_cst), and whoever changes the
// word in a way that may end a wait stores it (seq_cst) before reading
// `sleepers`, so either the waiter sees the new value or the writer sees the
// sleeper and wakes it; a wake that comes before the sleep finds the word
// changed and the sleep returns at once.
template <class T, class Done>
void wait_until(std::atomic<T>& word, std::atomic<int>& sleepers, Done&& done) {
  Clock::time_point t0;
  for (int i = 0;; ++i) {
    const T v = word.load(std::memory_order_acquire);
    if (done(v)) return;
    if (i < kPauseIters) {
      cpu_relax();
      continue;
    }
    if (i == kPauseIters) t0 = Clock::now();
    if (Clock::now() - t0 < kWaitSpin) {
      std::this_thread::yield();
      continue;
    }
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (word.load(std::memory_order_seq_cst) == v) futex_wait(word, v);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_(n_threads) {
  if (n_threads < 1) fail("thread pool: the number of threads must be at least 1, got {}", n_threads);
  next_phase_.resize(size_t(n_threads));
  reserve_phases(64);
  workers_.reserve(size_t(n_threads - 1));
  try {
    for (int tid = 1; tid < n_threads; ++tid) workers_.emplace_back([this, tid] { worker_main(tid); });
  } catch (...) {
    stop_.store(true, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_seq_cst);
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  if (workers_.empty()) return;
  stop_.store(true, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_seq_cst);  // releases stop_
  { std::lock_guard<std::mutex> lk(mu_); }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::reserve_phases(int n) {
  if (n <= phase_cap_) return;
  LR_ASSERT(!running_.load(std::memory_order_relaxed) && "ThreadPool::reserve_phases inside a dispatch");
  phase_cap_ = std::max(n, 2 * phase_cap_);
  phases_.reset(new Phase[size_t(phase_cap_)]);
}

ThreadPool::Phase& ThreadPool::enter_phase(int tid) {
  const int p = next_phase_[size_t(tid)].p++;
  LR_ASSERT(p < phase_cap_ && "ThreadPool::share: more calls in a dispatch than reserve_phases allowed");
  return phases_[size_t(p)];
}

bool ThreadPool::claim(Phase& ph, int c) {
  if (c >= 64) return true;  // only its owner runs it
  if (abort_.load(std::memory_order_acquire)) throw Aborted{};
  const uint64_t bit = uint64_t(1) << c;
  if (ph.taken.load(std::memory_order_relaxed) & bit) return false;
  return !(ph.taken.fetch_or(bit, std::memory_order_acq_rel) & bit);
}

void ThreadPool::finish(Phase& ph, int n_chunks, bool counted) {
  // The last chunk done ends the phase: counted as a barrier episode, and
  // whoever sleeps on it woken (wait_until's protocol).
  if (ph.done.fetch_add(1, std::memory_order_seq_cst) + 1 != n_chunks) return;
  if (counted) barriers_.fetch_add(1, std::memory_order_relaxed);
  if (phase_sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(ph.done);
}

void ThreadPool::wait_phase(Phase& ph, int n_chunks) {
  wait_until(ph.done, phase_sleepers_,
             [&](int done) { return done == n_chunks || abort_.load(std::memory_order_acquire); });
  if (ph.done.load(std::memory_order_acquire) != n_chunks) throw Aborted{};
}

// After a dispatch (every worker done): the phases it used, cleared.
void ThreadPool::reset_phases() {
  int used = 0;
  for (NextPhase& np : next_phase_) used = std::max(used, std::exchange(np.p, 0));
  for (int p = 0; p < used; ++p) {
    phases_[size_t(p)].taken.store(0, std::memory_order_relaxed);
    phases_[size_t(p)].done.store(0, std::memory_order_relaxed);
  }
}

void ThreadPool::reset_counters() {
  dispatches_.store(0, std::memory_order_relaxed);
  barriers_.store(0, std::memory_order_relaxed);
}

void ThreadPool::record_exception(std::exception_ptr e) noexcept {
  {
    std::lock_guard<std::mutex> lk(ex_mu_);
    if (!first_ex_) first_ex_ = std::move(e);
  }
  abort_.store(true, std::memory_order_release);
}

void ThreadPool::run_on_this_thread(int tid) noexcept {
  try {
    (*fn_)(tid, n_);
  } catch (const Aborted&) {
    // Left a barrier because another thread threw; that exception is recorded.
  } catch (...) {
    record_exception(std::current_exception());
  }
}

void ThreadPool::worker_main(int tid) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = gen_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto t0 = Clock::now();
      const bool spin = spin_.load(std::memory_order_relaxed);
      for (int i = 1; (g = gen_.load(std::memory_order_acquire)) == seen; ++i) {
        if (spin && i < kPauseIters) {
          cpu_relax();
          continue;
        }
        if (spin) std::this_thread::yield();
        if (!spin || Clock::now() - t0 > kWorkerSpin) {
          // Sleep. sleepers_ is raised before gen_ is re-read (both seq_cst),
          // and run() bumps gen_ before reading sleepers_ (both seq_cst), so
          // either we see the new gen_ here or run() sees us and notifies
          // under mu_ (which we hold until wait() releases it).
          std::unique_lock<std::mutex> lk(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          cv_.wait(lk, [&] { return gen_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    run_on_this_thread(tid);
    // The last worker to finish wakes run()'s caller if it sleeps (wait_until).
    if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeps_.load(std::memory_order_seq_cst) > 0)
      futex_wake_all(remaining_);
  }
}

void ThreadPool::run(const std::function<void(int tid, int nth)>& fn) {
  const bool was_running = running_.exchange(true, std::memory_order_acquire);
  LR_ASSERT(!was_running && "ThreadPool::run called concurrently or from inside a dispatch");
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false, std::memory_order_release); }
  } done{running_};

  dispatches_.fetch_add(1, std::memory_order_relaxed);
  if (n_ == 1) {
    struct Reset {
      ThreadPool& p;
      ~Reset() { p.reset_phases(); }
    } reset{*this};
    fn(0, 1);
    return;
  }

  // No worker is running fn now, so the dispatch state can be reset freely.
  fn_ = &fn;
  first_ex_ = nullptr;
  abort_.store(false, std::memory_order_relaxed);
  bar_count_.store(0, std::memory_order_relaxed);
  remaining_.store(n_ - 1, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_seq_cst);  // publishes the state above
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_.notify_all();
  }

  run_on_this_thread(0);
  wait_until(remaining_, caller_sleeps_, [](int left) { return left == 0; });
  fn_ = nullptr;
  reset_phases();

  if (first_ex_) {
    std::exception_ptr e = std::move(first_ex_);
    first_ex_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::barrier() {
  LR_ASSERT(running_.load(std::memory_order_relaxed) && "ThreadPool::barrier called outside run()");
  if (n_ == 1) {
    barriers_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (abort_.load(std::memory_order_acquire)) throw Aborted{};
  // The episode number can only advance after this thread has arrived, so
  // this reads the current episode.
  const uint32_t gen = bar_gen_.load(std::memory_order_acquire);
  // acq_rel: the last arrival acquires every earlier arrival's writes (the
  // RMWs form one release sequence) and publishes them with bar_gen_.
  if (bar_count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    bar_count_.store(0, std::memory_order_relaxed);
    barriers_.fetch_add(1, std::memory_order_relaxed);
    bar_gen_.store(gen + 1, std::memory_order_seq_cst);
    if (bar_sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(bar_gen_);
    return;
  }
  wait_until(bar_gen_, bar_sleepers_,
             [&](uint32_t g) { return g != gen || abort_.load(std::memory_order_acquire); });
  if (bar_gen_.load(std::memory_order_acquire) == gen) throw Aborted{};
}

}  // namespace lr
