#pragma once
/// A small persistent thread pool and `parallel_for` over an index range.
///
/// The number of threads is `MLS_NUM_THREADS` if set, else the number of cores; tests and
/// benchmarks can change it with `set_num_threads`. Work smaller than `grain` runs inline, and
/// nested calls from inside a worker run serially, so kernels may call `parallel_for` freely.
#include <cstdint>
#include <functional>

namespace mls {

/// Threads `parallel_for` uses (>= 1).
int num_threads();
/// Sets the thread count (>= 1); throws `mls::Error` otherwise.
void set_num_threads(int n);

/// Calls `body(begin_i, end_i)` on disjoint chunks covering [begin, end), at most one chunk per
/// thread, each at least `grain` long (except when the range is shorter). Blocks until done.
/// An exception thrown by any chunk is rethrown here (the first one).
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

/// RAII: sets the thread count for a scope and restores it afterwards.
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadCountGuard() { set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

/// The simulated rank the calling thread runs as (lab 5's `run_simulated` sets it on each rank's
/// thread), -1 on every other thread. Test observations made on a rank's thread are kept per rank
/// and recorded in rank order (mls/observe.hpp), so a graded stream does not depend on how the
/// threads were scheduled.
inline int& this_thread_rank() {
  thread_local int rank = -1;
  return rank;
}

/// RAII: the calling thread runs as simulated rank `r` for a scope.
class ThreadRankScope {
 public:
  explicit ThreadRankScope(int r) : saved_(this_thread_rank()) { this_thread_rank() = r; }
  ~ThreadRankScope() { this_thread_rank() = saved_; }
  ThreadRankScope(const ThreadRankScope&) = delete;
  ThreadRankScope& operator=(const ThreadRankScope&) = delete;

 private:
  int saved_;
};

}  // namespace mls
