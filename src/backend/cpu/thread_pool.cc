// The CPU backend's thread pool: persistent workers that spin briefly on a generation counter,
// then sleep on a condition variable. The decode loop calls parallel_for hundreds of times per
// token, so the common case (workers still spinning) costs one atomic store and one counter wait.
#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gem::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A waiting thread pauses this many times (~50 µs: longer than the gap between two matmuls
// of a decode step), then yields its core this many times (other threads of a shared or
// oversubscribed machine get to run), then sleeps on the condition variable.
constexpr int kSpinPauses = 2048;
constexpr int kSpinYields = 256;

}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;

  // The job of the current generation, written by the caller before it resets next_chunk
  // (release); a thread reads them only after claiming a chunk (acquire on the same counter).
  const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
  int64_t n = 0;
  int64_t grain = 0;                  // 0: static chunks; else parallel_for_dynamic's pieces
  std::atomic<int64_t> next_item{0};  // dynamic: the first index no thread has claimed yet

  // Chunks are claimed, not assigned: whichever thread is running takes the next chunk, so a
  // worker descheduled by another process (a shared machine) does not stall the call. The chunk
  // index is what fn receives as thread_index: unique among concurrent executions, so callers
  // may index per-thread scratch with it.
  std::atomic<int> next_chunk{0};
  std::atomic<int> done_chunks{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<int> n_sleeping{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};  // a parallel_for is running
  std::mutex mu;
  std::condition_variable cv;

  // Claims and runs chunks of the current job until none is left. A static job has n_threads
  // contiguous chunks; a dynamic job has n_threads slots, and the thread holding a slot claims
  // pieces until the range is exhausted (a slot claimed after that runs nothing), so the caller
  // itself closes the slots of workers that never woke up. fn, n and grain are read only after
  // a successful claim, which orders them after the caller's writes.
  void run_chunks() {
    for (;;) {
      const int c = next_chunk.fetch_add(1, std::memory_order_acq_rel);
      if (c >= n_threads) return;
      if (grain == 0) {
        // Contiguous chunk c of T: [n*c/T, n*(c+1)/T).
        const int64_t begin = n * c / n_threads;
        const int64_t end = n * (c + 1) / n_threads;
        if (begin < end) (*fn)(begin, end, c);
      } else {
        for (;;) {
          const int64_t begin = next_item.fetch_add(grain, std::memory_order_relaxed);
          if (begin >= n) break;
          (*fn)(begin, std::min(n, begin + grain), c);
        }
      }
      done_chunks.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void run(int64_t n_items, int64_t piece, const std::function<void(int64_t, int64_t, int)>& f);

  void worker_main() {
    uint64_t seen = 0;
    for (;;) {
      // Spin, yield, then sleep, until a new generation (or stop) arrives.
      int spins = 0;
      while (generation.load(std::memory_order_acquire) == seen &&
             !stop.load(std::memory_order_relaxed)) {
        ++spins;
        if (spins < kSpinPauses) {
          cpu_relax();
          continue;
        }
        if (spins < kSpinPauses + kSpinYields) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mu);
        // seq_cst on n_sleeping and generation: either we see the new generation here, or the
        // caller sees n_sleeping > 0 and notifies under the mutex (no lost wake-up).
        n_sleeping.fetch_add(1, std::memory_order_seq_cst);
        cv.wait(lock, [&] {
          return generation.load(std::memory_order_seq_cst) != seen ||
                 stop.load(std::memory_order_seq_cst);
        });
        n_sleeping.fetch_sub(1, std::memory_order_relaxed);
        spins = 0;
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation.load(std::memory_order_acquire);
      run_chunks();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  impl_->n_threads = n_threads;
  impl_->workers.reserve(static_cast<size_t>(n_threads - 1));
  for (int t = 1; t < n_threads; ++t) {
    impl_->workers.emplace_back([this] { impl_->worker_main(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true, std::memory_order_seq_cst);
  }
  impl_->cv.notify_all();
  for (std::thread& w : impl_->workers) w.join();
  delete impl_;
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (impl_->n_threads == 1) {
    fn(0, n, 0);
    return;
  }
  impl_->run(n, 0, fn);
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t grain,
                                      const std::function<void(int64_t, int64_t, int)>& fn) {
  GEM_CHECK(grain >= 1, "ThreadPool::parallel_for_dynamic: grain must be >= 1");
  if (n <= 0) return;
  if (impl_->n_threads == 1) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain), 0);
    return;
  }
  impl_->run(n, grain, fn);
}

void ThreadPool::Impl::run(int64_t n_items, int64_t piece,
                           const std::function<void(int64_t, int64_t, int)>& f) {
  Impl& s = *this;
  GEM_CHECK(!s.busy, "ThreadPool::parallel_for: nested or concurrent call (not supported)");
  s.busy = true;
  s.fn = &f;
  s.n = n_items;
  s.grain = piece;
  s.next_item.store(0, std::memory_order_relaxed);
  s.done_chunks.store(0, std::memory_order_relaxed);
  s.next_chunk.store(0, std::memory_order_release);
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  if (s.n_sleeping.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(s.mu); }
    s.cv.notify_all();
  }
  s.run_chunks();
  // Every chunk is claimed by now; wait for the ones other threads are still running.
  int spins = 0;
  while (s.done_chunks.load(std::memory_order_acquire) != s.n_threads) {
    if (++spins < kSpinPauses) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  s.busy = false;
}

}  // namespace gem::cpu
