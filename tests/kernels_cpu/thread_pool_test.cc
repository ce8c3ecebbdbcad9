// ThreadPool: every index of [0, n) is visited exactly once, by a valid thread, over odd sizes,
// many thread counts and many back-to-back calls; the pool survives idle gaps (workers asleep).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "base/timer.h"

namespace gem::cpu {
namespace {

void check_cover(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h.store(0);
  std::atomic<int> bad_thread{0}, bad_range{0};
  pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
    if (t < 0 || t >= pool.size()) bad_thread.fetch_add(1);
    if (!(0 <= b && b < e && e <= n)) bad_range.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_EQ(bad_thread.load(), 0) << "n=" << n;
  EXPECT_EQ(bad_range.load(), 0) << "n=" << n;
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += hits[static_cast<size_t>(i)].load() != 1;
  EXPECT_EQ(wrong, 0) << "n=" << n << " threads=" << pool.size();
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 5, 8, 13}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 12, 13, 127, 1001, 65537}) check_cover(pool, n);
  }
}

TEST(ThreadPool, ZeroMeansHardwareThreads) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
  check_cover(pool, 99);
}

TEST(ThreadPool, ManyCallsAndChunksAreContiguous) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int call = 0; call < 3000; ++call) {
    const int64_t n = 1 + call % 17;
    std::atomic<int64_t> sum{0};
    std::vector<int64_t> begin(3, -1), end(3, -1);
    pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
      begin[static_cast<size_t>(t)] = b;
      end[static_cast<size_t>(t)] = e;
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i + 1);
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "call " << call;
    // Thread t's chunk precedes thread t+1's (the documented contiguous split).
    int64_t next = 0;
    for (int t = 0; t < 3; ++t) {
      if (begin[static_cast<size_t>(t)] < 0) continue;
      ASSERT_EQ(begin[static_cast<size_t>(t)], next) << "call " << call;
      next = end[static_cast<size_t>(t)];
    }
    ASSERT_EQ(next, n);
    total += n;
  }
  EXPECT_GT(total, 0);
}

// parallel_for_dynamic: every index exactly once; a slot is never used by two threads at once
// (a non-atomic per-slot flag would catch overlap); pieces of one slot come in increasing
// order; grain larger than n, grain 1, and many back-to-back calls mixed with static calls.
void check_dynamic(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h.store(0);
  std::vector<std::atomic<int>> in_slot(static_cast<size_t>(pool.size()));
  for (auto& f : in_slot) f.store(0);
  std::vector<int64_t> last_begin(static_cast<size_t>(pool.size()), -1);
  std::atomic<int> bad{0};
  pool.parallel_for_dynamic(n, grain, [&](int64_t b, int64_t e, int slot) {
    if (slot < 0 || slot >= pool.size() || !(0 <= b && b < e && e <= n) || e - b > grain) {
      bad.fetch_add(1);
      return;
    }
    if (in_slot[static_cast<size_t>(slot)].fetch_add(1) != 0) bad.fetch_add(1);
    if (b <= last_begin[static_cast<size_t>(slot)]) bad.fetch_add(1);
    last_begin[static_cast<size_t>(slot)] = b;
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    in_slot[static_cast<size_t>(slot)].fetch_sub(1);
  });
  EXPECT_EQ(bad.load(), 0) << "n=" << n << " grain=" << grain;
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += hits[static_cast<size_t>(i)].load() != 1;
  EXPECT_EQ(wrong, 0) << "n=" << n << " grain=" << grain << " threads=" << pool.size();
}

TEST(ThreadPool, DynamicCoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1001, 65537}) {
      for (int64_t grain : {1, 3, 16, 100000}) check_dynamic(pool, n, grain);
    }
  }
}

TEST(ThreadPool, DynamicAndStaticCallsInterleave) {
  ThreadPool pool(3);
  for (int call = 0; call < 2000; ++call) {
    const int64_t n = 1 + call % 23;
    std::atomic<int64_t> sum{0};
    auto add = [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i + 1);
    };
    if (call % 2) {
      pool.parallel_for_dynamic(n, 1 + call % 5, add);
    } else {
      pool.parallel_for(n, add);
    }
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "call " << call;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // workers asleep
  check_dynamic(pool, 5000, 7);
}

TEST(ThreadPool, DynamicRejectsZeroGrain) {
  ThreadPool pool(2);
  EXPECT_DEATH(pool.parallel_for_dynamic(10, 0, [](int64_t, int64_t, int) {}), "grain");
}

TEST(ThreadPool, WakesAfterIdle) {
  ThreadPool pool(4);
  for (int round = 0; round < 3; ++round) {
    // Long enough for every worker to stop spinning and sleep on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    check_cover(pool, 1000);
  }
}

// Not a pass/fail figure (the machine is shared): the per-call cost over the ideal, printed for
// the log. Each chunk busy-waits 5 µs, so an ideal 2-thread call takes 5 µs.
TEST(ThreadPool, CallOverheadPrinted) {
  ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  const int calls = 2000;
  const double work_s = 5e-6;
  Timer timer;
  for (int i = 0; i < calls; ++i) {
    pool.parallel_for(2, [&](int64_t b, int64_t, int) {
      const double until = now_seconds() + work_s;
      while (now_seconds() < until) {
      }
      sink.fetch_add(b, std::memory_order_relaxed);
    });
  }
  const double us = (timer.seconds() / calls - work_s) * 1e6;
  std::printf("ThreadPool(2) parallel_for overhead over a 5 us chunk: %.2f us per call\n", us);
  EXPECT_EQ(sink.load(), static_cast<int64_t>(calls));
}

}  // namespace
}  // namespace gem::cpu
