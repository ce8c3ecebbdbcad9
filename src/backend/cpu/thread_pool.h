// A fixed pool of worker threads for the CPU backend's parallel loops. parallel_for splits
// [0, n) into contiguous chunks, one per thread, and returns when all are done; the calling
// thread takes part. Nothing is allocated per call.
#pragma once

#include <cstdint>
#include <functional>

namespace gem::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // 0 = hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // fn(begin, end, thread_index) over disjoint ranges covering [0, n): size() contiguous
  // chunks, chunk c = [n*c/size(), n*(c+1)/size()), passed with thread_index = c (empty chunks
  // are skipped). Chunks are claimed by whichever pool thread is free, so thread_index is the
  // chunk, not an OS thread; it is unique among concurrent executions, so per-thread scratch
  // indexed by it is safe. Not reentrant: fn must not call parallel_for, and one thread calls
  // it at a time.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // fn(begin, end, slot) over [0, n) in pieces of `grain` (the last may be shorter) that running
  // threads claim one at a time, so a thread slowed by another process does less of the work
  // instead of stalling the call. slot in [0, size()) names the calling thread for the whole
  // call and is unique among concurrent executions (per-thread scratch may be indexed by it);
  // one slot may receive several, non-adjacent pieces, in increasing order. grain >= 1.
  void parallel_for_dynamic(int64_t n, int64_t grain,
                            const std::function<void(int64_t, int64_t, int)>& fn);

  struct Impl;

 private:
  Impl* impl_;
};

}  // namespace gem::cpu
