#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace {

using lr::ThreadPool;

TEST(ThreadPool, RejectsZeroThreads) {
  EXPECT_THROW(ThreadPool(0), lr::Error);
  EXPECT_THROW(ThreadPool(-3), lr::Error);
}

TEST(ThreadPool, RunCallsEveryTidOnce) {
  for (int nth = 1; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    EXPECT_EQ(pool.size(), nth);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(nth));
      std::atomic<int> bad_nth{0};
      pool.run([&](int tid, int n) {
        if (n != nth) bad_nth.fetch_add(1);
        hits[size_t(tid)].fetch_add(1);
      });
      EXPECT_EQ(bad_nth.load(), 0);
      for (int t = 0; t < nth; ++t) ASSERT_EQ(hits[size_t(t)].load(), 1) << "tid " << t;
    }
  }
}

TEST(ThreadPool, CallerIsTidZero) {
  ThreadPool pool(3);
  const auto me = std::this_thread::get_id();
  std::vector<std::thread::id> ids(3);
  pool.run([&](int tid, int) { ids[size_t(tid)] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], me);
  EXPECT_NE(ids[1], me);
  EXPECT_NE(ids[2], me);
  EXPECT_NE(ids[1], ids[2]);
}

TEST(ThreadPool, SizeOneRunsInline) {
  ThreadPool pool(1);
  const auto me = std::this_thread::get_id();
  std::thread::id seen;
  pool.run([&](int tid, int nth) {
    EXPECT_EQ(tid, 0);
    EXPECT_EQ(nth, 1);
    seen = std::this_thread::get_id();
  });
  EXPECT_EQ(seen, me);
}

TEST(ThreadPool, ParallelForCoversEachIndexExactlyOnce) {
  for (int nth = 1; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 13, 64, 100, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> calls{0};
      std::atomic<int> bad{0};
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        calls.fetch_add(1);
        if (!(0 <= b && b < e && e <= n)) bad.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
      });
      EXPECT_EQ(bad.load(), 0);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " nth=" << nth << " i=" << i;
      EXPECT_EQ(calls.load(), int(std::min<int64_t>(n, nth))) << "n=" << n << " nth=" << nth;
    }
  }
}

TEST(ThreadPool, ParallelForChunksAreContiguousAndBalanced) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> seen;
  pool.parallel_for(10, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lk(mu);
    seen.insert({b, e});
  });
  const std::set<std::pair<int64_t, int64_t>> want = {{0, 4}, {4, 7}, {7, 10}};
  EXPECT_EQ(seen, want);
}

TEST(ThreadPool, ParallelForHugeRange) {
  ThreadPool pool(3);
  const int64_t n = (int64_t(1) << 40) + 7;
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> seen;
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lk(mu);
    seen.insert({b, e});
  });
  ASSERT_EQ(seen.size(), 3u);
  int64_t next = 0;
  for (auto [b, e] : seen) {
    EXPECT_EQ(b, next);
    next = e;
  }
  EXPECT_EQ(next, n);
}

TEST(ThreadPool, BarrierOrdersPhases) {
  for (int nth = 1; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    const int kPhases = 200;
    // Plain (non-atomic) data: each phase every thread writes its slot, and
    // after the barrier reads every other slot. Correct only if the barrier
    // orders memory (TSan checks that, too).
    std::vector<int> slots(size_t(nth), -1);
    std::atomic<int> errors{0};
    pool.run([&](int tid, int n) {
      for (int p = 0; p < kPhases; ++p) {
        slots[size_t(tid)] = p;
        pool.barrier();
        for (int t = 0; t < n; ++t)
          if (slots[size_t(t)] != p) errors.fetch_add(1);
        pool.barrier();
      }
    });
    EXPECT_EQ(errors.load(), 0) << "nth=" << nth;
  }
}

TEST(ThreadPool, BarrierWaitsForSlowThread) {
  ThreadPool pool(4);
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  pool.run([&](int tid, int n) {
    if (tid == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    arrived.fetch_add(1);
    pool.barrier();
    if (arrived.load() != n) early.fetch_add(1);
  });
  EXPECT_EQ(early.load(), 0);
}

// CPU time this process has used, in milliseconds.
static double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// Threads that wait long (for a thread the host has not scheduled, say) sleep
// instead of holding their cores: 3 threads waiting 60 ms in a barrier, and
// the caller waiting 60 ms for the last worker, use a few milliseconds of CPU
// between them, not 60 ms each (as a spin or a yield loop does).
TEST(ThreadPool, LongWaitsSleepInsteadOfSpinning) {
  ThreadPool pool(4);
  const auto late = std::chrono::milliseconds(60);
  for (int where = 0; where < 2; ++where) {  // 0: in a barrier, 1: at the end
    std::atomic<int> arrived{0};
    const double cpu0 = process_cpu_ms();
    pool.run([&](int tid, int n) {
      if (tid == 3) std::this_thread::sleep_for(late);
      arrived.fetch_add(1);
      if (where == 0) {
        pool.barrier();
        EXPECT_EQ(arrived.load(), n);
      }
    });
    const double used = process_cpu_ms() - cpu0;
    EXPECT_LT(used, 15.0) << (where == 0 ? "barrier" : "end of dispatch") << " wait";
  }
}

// share(): every chunk runs once, whichever thread takes it, and a phase
// with wait ends only when all its chunks are done; chunks from 64 on run
// on their owners. Counters: one barrier episode per waited phase.
TEST(ThreadPool, ShareRunsEveryChunkOnceAndWaitsForAll) {
  for (int nth = 1; nth <= 4; ++nth)
    for (int chunks : {1, nth, 3 * nth + 1, 70}) {
      ThreadPool pool(nth);
      constexpr int kPhases = 5;
      pool.reserve_phases(kPhases);
      std::vector<std::atomic<int>> ran(size_t(kPhases * chunks));
      std::vector<std::atomic<int>> owner_ran(size_t(kPhases * chunks));
      std::atomic<int> errors{0};
      pool.run([&](int tid, int n) {
        for (int p = 0; p < kPhases; ++p) {
          pool.share(tid, chunks, p + 1 < kPhases, [&](int c) {
            ran[size_t(p * chunks + c)].fetch_add(1);
            if (c % n == tid) owner_ran[size_t(p * chunks + c)].fetch_add(1);
          });
          if (p + 1 == kPhases) break;
          for (int c = 0; c < chunks; ++c)  // the whole phase is done
            if (ran[size_t(p * chunks + c)].load() != 1) errors.fetch_add(1);
        }
      });
      EXPECT_EQ(errors.load(), 0) << nth << " threads, " << chunks << " chunks";
      for (int i = 0; i < kPhases * chunks; ++i) {
        EXPECT_EQ(ran[size_t(i)].load(), 1) << i;
        if (i % chunks >= 64) {
          EXPECT_EQ(owner_ran[size_t(i)].load(), 1) << i;
        }
      }
      EXPECT_EQ(pool.barriers(), uint64_t(kPhases - 1));
      pool.reset_counters();
    }
}

// A thread that comes late (not scheduled, here asleep) holds nobody up:
// the others run its chunks of three phases, then it passes through them.
TEST(ThreadPool, ShareGivesALateThreadsChunksToTheOthers) {
  ThreadPool pool(2);
  std::atomic<bool> late_arrived{false};
  std::atomic<int> by_other{0}, done_before{0};
  pool.run([&](int tid, int) {
    if (tid == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      late_arrived.store(true);
    }
    for (int p = 0; p < 3; ++p) {
      pool.share(tid, 2, true, [&](int c) {
        if (c != tid) by_other.fetch_add(1);
      });
      if (tid == 0 && !late_arrived.load()) done_before.fetch_add(1);
    }
  });
  EXPECT_EQ(by_other.load(), 3);      // thread 0 ran thread 1's chunk of each phase
  EXPECT_EQ(done_before.load(), 3);   // without waiting for it
}

// A chunk that throws: the others leave their waits, run() rethrows it, and
// the pool (its phases cleared) works afterwards.
TEST(ThreadPool, ShareExceptionPropagatesAndPoolStaysUsable) {
  for (int nth = 2; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    EXPECT_THROW(pool.run([&](int tid, int n) {
      pool.share(tid, n, true, [&](int) {});
      pool.share(tid, n, true, [&](int c) {
        if (c == n - 1) throw std::logic_error("in phase 2");
      });
      pool.share(tid, n, true, [&](int) {});
    }),
                 std::logic_error);
    std::atomic<int> sum{0};
    pool.run([&](int tid, int n) {
      for (int p = 0; p < 3; ++p) pool.share(tid, n, true, [&](int c) { sum.fetch_add(c + 1); });
    });
    EXPECT_EQ(sum.load(), 3 * nth * (nth + 1) / 2);
  }
}

TEST(ThreadPool, CountersAreExact) {
  for (int nth = 1; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    EXPECT_EQ(pool.dispatches(), 0u);
    EXPECT_EQ(pool.barriers(), 0u);
    for (int i = 0; i < 7; ++i) pool.run([](int, int) {});
    pool.parallel_for(100, [](int64_t, int64_t) {});
    pool.parallel_for(0, [](int64_t, int64_t) {});  // no dispatch
    pool.run([&](int, int) {
      for (int b = 0; b < 5; ++b) pool.barrier();
    });
    EXPECT_EQ(pool.dispatches(), 9u) << "nth=" << nth;
    EXPECT_EQ(pool.barriers(), 5u) << "nth=" << nth;
    pool.reset_counters();
    EXPECT_EQ(pool.dispatches(), 0u);
    EXPECT_EQ(pool.barriers(), 0u);
    pool.run([&](int, int) { pool.barrier(); });
    EXPECT_EQ(pool.dispatches(), 1u);
    EXPECT_EQ(pool.barriers(), 1u);
  }
}

TEST(ThreadPool, ExceptionPropagatesAndPoolStaysUsable) {
  for (int nth = 1; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    for (int thrower = 0; thrower < nth; ++thrower) {
      try {
        pool.run([&](int tid, int) {
          if (tid == thrower) throw std::runtime_error("boom " + std::to_string(tid));
        });
        ADD_FAILURE() << "no exception, nth=" << nth;
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "boom " + std::to_string(thrower));
      }
      // Still works.
      std::atomic<int> sum{0};
      pool.parallel_for(1000, [&](int64_t b, int64_t e) { sum.fetch_add(int(e - b)); });
      EXPECT_EQ(sum.load(), 1000);
    }
  }
}

TEST(ThreadPool, FirstExceptionIsRethrown) {
  ThreadPool pool(4);
  // Every thread throws; exactly one exception comes out, and it is one of
  // theirs. Thread 1 throws first (the others wait until it has).
  std::atomic<bool> first_thrown{false};
  try {
    pool.run([&](int tid, int) {
      if (tid == 1) {
        first_thrown.store(true);
        throw lr::Error("first");
      }
      while (!first_thrown.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      throw lr::Error("later");
    });
    ADD_FAILURE() << "no exception";
  } catch (const lr::Error& e) {
    EXPECT_EQ(std::string(e.what()), "first");
  }
}

TEST(ThreadPool, ExceptionWhileOthersWaitInBarrierDoesNotDeadlock) {
  for (int nth = 2; nth <= 4; ++nth) {
    ThreadPool pool(nth);
    EXPECT_THROW(pool.run([&](int tid, int) {
      pool.barrier();
      if (tid == nth - 1) throw std::logic_error("in phase 2");
      pool.barrier();  // the others wait here for a thread that never comes
      pool.barrier();
    }),
                 std::logic_error);
    // The barrier state is reset: a full barrier workout still works.
    std::vector<int> slots(size_t(nth), -1);
    std::atomic<int> errors{0};
    pool.run([&](int tid, int n) {
      for (int p = 0; p < 50; ++p) {
        slots[size_t(tid)] = p;
        pool.barrier();
        for (int t = 0; t < n; ++t)
          if (slots[size_t(t)] != p) errors.fetch_add(1);
        pool.barrier();
      }
    });
    EXPECT_EQ(errors.load(), 0);
  }
}

TEST(ThreadPool, ManyQuickDispatchesAndIdleSleep) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int i = 0; i < 2000; ++i)
    pool.parallel_for(16, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  EXPECT_EQ(total.load(), 2000 * 16);
  // Let the workers go to sleep, then wake them.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool.parallel_for(16, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  EXPECT_EQ(total.load(), 2001 * 16);
}

TEST(ThreadPool, PoolsCanBeCreatedAndDestroyedRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    if (i % 2) pool.run([](int, int) {});
  }
}

TEST(ThreadPool, ResultsMatchSerialSum) {
  ThreadPool pool(4);
  std::vector<double> v(100003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 97);
  std::vector<double> partial(4, 0.0);
  pool.run([&](int tid, int nth) {
    const int64_t n = int64_t(v.size());
    for (int64_t i = n * tid / nth; i < n * (tid + 1) / nth; ++i) partial[size_t(tid)] += v[size_t(i)];
  });
  double serial = 0;
  for (double x : v) serial += x;
  EXPECT_EQ(partial[0] + partial[1] + partial[2] + partial[3], serial);
}

}  // namespace
