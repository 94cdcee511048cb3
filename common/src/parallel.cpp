#include "mls/common/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mls/common/error.hpp"

namespace mls {
namespace {

int default_threads() {
  if (const char* env = std::getenv("MLS_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

/// True on pool workers and on a caller while it runs a parallel region: nested calls run inline.
thread_local bool t_in_parallel = false;

/// How long a thread spins on an atomic before it sleeps: a pool worker waiting for the next region,
/// and a caller waiting for its region's last chunk. Kernels run regions back to back (a GEMM packs
/// B in one region and multiplies in the next; a training step runs hundreds), and waking a
/// sleeping thread costs tens of microseconds on a VM (a futex wake, and an idle vCPU to wake), as
/// much as a small product's whole run. The spin yields the CPU at each turn (sched_yield, as
/// OpenBLAS's idle threads do): where the scheduler has put a worker on its caller's vCPU (some
/// VM kernels pack threads onto few vCPUs), a pause-spin would take half the caller's time, and a
/// yield gives it back. The sleep after the budget keeps an idle pool off the CPU.
/// `MLS_SPIN_US` overrides the budget (0: sleep at once).
std::chrono::nanoseconds spin_budget() {
  static const std::chrono::nanoseconds budget = [] {
    long us = 2000;
    if (const char* env = std::getenv("MLS_SPIN_US"); env && *env) us = std::max(0L, std::atol(env));
    return std::chrono::nanoseconds(us * 1000);
  }();
  return budget;
}

/// Spins until `a` differs from `old` or the spin budget runs out, then sleeps on it
/// (std::atomic::wait: a futex). Returns the new value.
template <class T>
T wait_change(const std::atomic<T>& a, T old) {
  const auto deadline = std::chrono::steady_clock::now() + spin_budget();
  for (int i = 0;; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    if ((i & 7) == 7 && std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::yield();
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

/// A region runs chunks 0..chunks-1 of a job. The caller posts it (job, then the ticket, then a
/// new generation that wakes the workers) and claims chunks too; every thread claims the next
/// chunk with one fetch_add on the ticket (chunk count in the high half, next chunk in the low
/// half), so a claim never needs a lock, and a claim past the count is simply void. A claimed
/// chunk keeps its region alive (the caller waits for `pending_` to reach 0 before it posts the
/// next one), so the job pointer it reads stays valid.
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }
  int threads() const { return threads_.load(); }
  void set_threads(int n) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    threads_.store(n);
  }

  void run(int chunks, const std::function<void(int)>& job) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);  // one parallel region at a time
    ensure_workers(chunks - 1);
    job_.store(&job, std::memory_order_relaxed);
    caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
    error_ = nullptr;
    pending_.store(chunks, std::memory_order_relaxed);
    ticket_.store(static_cast<std::uint64_t>(chunks) << 32, std::memory_order_release);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    work();  // the caller claims chunks like any worker
    for (int left = pending_.load(std::memory_order_acquire); left != 0;)
      left = wait_change(pending_, left);
    job_.store(nullptr, std::memory_order_relaxed);
    if (error_) std::rethrow_exception(error_);
  }

  ~Pool() {
    stop_.store(true);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    for (auto& w : workers_) w.join();
  }

 private:
  Pool() : threads_(default_threads()) {}

  void ensure_workers(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      const std::uint32_t seen = gen_.load(std::memory_order_acquire);
      workers_.emplace_back([this, seen] { worker_loop(seen); });
    }
  }

  /// Claims and runs chunks of the current region until none is left.
  void work() {
    for (;;) {
      const std::uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
      const auto chunk = static_cast<std::uint32_t>(t), chunks = static_cast<std::uint32_t>(t >> 32);
      if (chunk >= chunks) return;
      const auto* job = job_.load(std::memory_order_relaxed);
      try {
        (*job)(static_cast<int>(chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
    }
  }

  void worker_loop(std::uint32_t seen) {
    t_in_parallel = true;
    for (;;) {
      seen = wait_change(gen_, seen);
      if (stop_.load()) return;
      leave_cpu(caller_cpu_.load(std::memory_order_relaxed));
      work();
    }
  }

  /// A worker that finds itself on its caller's CPU moves to another allowed one, then allows all
  /// again (the move stays until the scheduler moves it back). Some VM kernels pack a waking
  /// thread onto a busy vCPU rather than wake an idle one; a worker there runs only when its
  /// caller yields, and the region runs as if on one thread. `MLS_UNPACK=0` turns this off.
  static void leave_cpu(int caller_cpu) {
    static const bool on = [] {
      const char* env = std::getenv("MLS_UNPACK");
      return env == nullptr || std::string(env) != "0";
    }();
    if (!on || caller_cpu < 0 || sched_getcpu() != caller_cpu) return;
    cpu_set_t all, others;
    if (sched_getaffinity(0, sizeof(all), &all) != 0) return;
    others = all;
    CPU_CLR(caller_cpu, &others);
    if (CPU_COUNT(&others) == 0) return;
    if (sched_setaffinity(0, sizeof(others), &others) == 0) sched_setaffinity(0, sizeof(all), &all);
  }

  std::atomic<int> threads_;
  std::atomic<int> caller_cpu_{-1};
  std::mutex run_mutex_, error_mutex_;
  std::vector<std::thread> workers_;
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<std::uint32_t> gen_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

}  // namespace

int num_threads() { return Pool::instance().threads(); }

void set_num_threads(int n) {
  MLS_CHECK(n >= 1, "set_num_threads: got ", n, ", expected a count >= 1");
  Pool::instance().set_threads(n);
}

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t n = end - begin;
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<std::int64_t>(max_chunks, num_threads()));
  if (chunks <= 1 || t_in_parallel) {
    body(begin, end);
    return;
  }
  const std::int64_t step = (n + chunks - 1) / chunks;
  struct InParallel {
    InParallel() { t_in_parallel = true; }
    ~InParallel() { t_in_parallel = false; }
  } in_parallel;
  Pool::instance().run(chunks, [&](int c) {
    const std::int64_t b = begin + c * step;
    const std::int64_t e = std::min(end, b + step);
    if (b < e) body(b, e);
  });
}

}  // namespace mls
