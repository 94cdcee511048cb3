#include "mls/common/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
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
  // The cores this process may run on, not the machine's: mpirun binds each rank to its own
  // core(s), and a rank that starts as many threads as the machine has cores oversubscribes
  // its own (its threads, OpenBLAS's included, take turns on one core).
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1) return CPU_COUNT(&set);
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

/// True on pool workers and on a caller while it runs a parallel region: nested calls run inline.
thread_local bool t_in_parallel = false;
/// The calling thread's intra-op budget (0: none, num_threads() applies).
thread_local int t_budget = 0;
/// True while the thread runs a task of run_dag: a nested run_dag runs inline.
thread_local bool t_in_dag = false;
/// True while the thread runs a task of a run_dag spread over the pool (which holds the pool's
/// lock until every task is done, so set_num_threads would wait for ever: it throws instead).
thread_local bool t_in_pooled_task = false;

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
  /// The pool of run_dag's worker `slot`: the helpers its tasks' parallel_for calls use, so the
  /// tasks of different workers run their regions at the same time (the global pool runs one
  /// region at a time, and run_dag's workers are that region). Only run_dag, which holds the
  /// global pool, uses them, so each slot has one user at a time.
  static Pool& slot(int slot) {
    static std::mutex m;
    static std::vector<std::unique_ptr<Pool>> pools;
    std::lock_guard<std::mutex> lock(m);
    while (static_cast<int>(pools.size()) <= slot) pools.push_back(std::unique_ptr<Pool>(new Pool()));
    return *pools[static_cast<std::size_t>(slot)];
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

  /// Runs chunks of the region now running, if there is one, on the calling thread (which is not
  /// one of this pool's workers: an idle worker of run_dag lending its thread to another worker's
  /// task), with the same lock-free claims as the pool's own workers. Returns whether it ran any.
  bool help() {
    if (!busy()) return false;
    return work() > 0;
  }
  /// Whether a region is running (its chunks may all be claimed already).
  bool busy() const { return job_.load(std::memory_order_acquire) != nullptr; }

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

  /// Claims and runs chunks of the current region until none is left; returns how many it ran.
  int work() {
    for (int ran = 0;; ++ran) {
      const std::uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
      const auto chunk = static_cast<std::uint32_t>(t), chunks = static_cast<std::uint32_t>(t >> 32);
      if (chunk >= chunks) return ran;
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

/// The pool the calling thread's parallel_for posts to (nullptr: the global one).
thread_local Pool* t_pool = nullptr;

}  // namespace

int num_threads() { return Pool::instance().threads(); }

int intra_op_threads() {
  const int n = num_threads();
  return t_budget > 0 ? std::min(t_budget, n) : n;
}

IntraOpBudget::IntraOpBudget(int threads) : saved_(t_budget) {
  MLS_CHECK(threads >= 1, "IntraOpBudget: got ", threads, " threads, expected a count >= 1");
  t_budget = threads;
}
IntraOpBudget::~IntraOpBudget() { t_budget = saved_; }

TeamBarrier::TeamBarrier(int members) : members_(members) {
  MLS_CHECK(members >= 1, "TeamBarrier: got ", members, " members, expected a count >= 1");
}

bool TeamBarrier::wait() {
  const unsigned gen = gen_.load(std::memory_order_acquire);
  if (broken_.load(std::memory_order_acquire)) return false;
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == members_) {
    count_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_acq_rel);
    gen_.notify_all();
  } else {
    // A stage lasts microseconds, less than a yield's round trip through the scheduler: pause-spin
    // first, then yield at each turn as the pool's waits do, then sleep once the spin budget
    // (MLS_SPIN_US) has run out (a member descheduled on a busy machine).
    const auto deadline = std::chrono::steady_clock::now() + spin_budget();
    for (int i = 0; gen_.load(std::memory_order_acquire) == gen; ++i) {
      if (i < 4096) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) {
        gen_.wait(gen, std::memory_order_acquire);  // returns once gen_ has changed
        continue;
      }
      std::this_thread::yield();
    }
  }
  return !broken_.load(std::memory_order_acquire);
}

void TeamBarrier::breaks() {
  broken_.store(true, std::memory_order_release);
  gen_.fetch_add(1, std::memory_order_acq_rel);
  gen_.notify_all();
}

void set_num_threads(int n) {
  MLS_CHECK(n >= 1, "set_num_threads: got ", n, ", expected a count >= 1");
  MLS_CHECK(!t_in_pooled_task, "set_num_threads: called from a task of run_dag (", n,
            " threads asked); the thread count can only change between runs");
  Pool::instance().set_threads(n);
}

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t n = end - begin;
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<std::int64_t>(max_chunks, intra_op_threads()));
  if (chunks <= 1 || t_in_parallel) {
    body(begin, end);
    return;
  }
  const std::int64_t step = (n + chunks - 1) / chunks;
  struct InParallel {
    InParallel() { t_in_parallel = true; }
    ~InParallel() { t_in_parallel = false; }
  } in_parallel;
  (t_pool ? *t_pool : Pool::instance()).run(chunks, [&](int c) {
    const std::int64_t b = begin + c * step;
    const std::int64_t e = std::min(end, b + step);
    if (b < e) body(b, e);
  });
}

}  // namespace mls

// ---- run_dag ------------------------------------------------------------------------------------
namespace mls {
namespace {

/// The scheduler of run_dag(deps, ...): in-degree counting, ready tasks in index order.
class InDegreeScheduler final : public DagScheduler {
 public:
  explicit InDegreeScheduler(const std::vector<std::vector<int>>& deps)
      : consumers_(deps.size()), pending_(deps.size(), 0) {
    const int n = static_cast<int>(deps.size());
    for (int i = 0; i < n; ++i)
      for (int d : deps[static_cast<std::size_t>(i)]) {
        MLS_CHECK(d >= 0 && d < n, "run_dag: task ", i, " depends on task ", d, ", outside [0, ", n, ")");
        MLS_CHECK(d != i, "run_dag: task ", i, " depends on itself");
        consumers_[static_cast<std::size_t>(d)].push_back(i);
        ++pending_[static_cast<std::size_t>(i)];
      }
    for (int i = 0; i < n; ++i)
      if (pending_[static_cast<std::size_t>(i)] == 0) ready_.push(i);
  }
  int size() const override { return static_cast<int>(pending_.size()); }
  int take() override {
    if (ready_.empty()) return -1;
    const int t = ready_.top();
    ready_.pop();
    return t;
  }
  void finish(int task) override {
    for (int c : consumers_[static_cast<std::size_t>(task)])
      if (--pending_[static_cast<std::size_t>(c)] == 0) ready_.push(c);
  }
  int ready() const override { return static_cast<int>(ready_.size()); }

 private:
  std::vector<std::vector<int>> consumers_;
  std::vector<int> pending_;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready_;
};

/// Thread-local state of one task: its budget and its worker's pool; restored afterwards.
class TaskScope {
 public:
  TaskScope(int budget, Pool* pool)
      : in_parallel_(t_in_parallel), budget_(t_budget), in_dag_(t_in_dag), pooled_(t_in_pooled_task), pool_(t_pool) {
    t_in_pooled_task = true;
    t_in_parallel = false;
    t_budget = budget;
    t_in_dag = true;
    t_pool = pool;
  }
  ~TaskScope() {
    t_in_pooled_task = pooled_;
    t_in_parallel = in_parallel_;
    t_budget = budget_;
    t_in_dag = in_dag_;
    t_pool = pool_;
  }
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  bool in_parallel_;
  int budget_;
  bool in_dag_;
  bool pooled_;
  Pool* pool_;
};

/// One run: the scheduler behind a lock, the running count and the free threads of the budget.
class DagRun {
 public:
  DagRun(DagScheduler& sched, int workers, int threads, const std::function<void(const TaskContext&)>& fn,
         const std::function<void(const DagHelp&)>* on_help)
      : sched_(sched), fn_(fn), on_help_(on_help), n_(sched.size()), workers_(workers), threads_(threads), free_(threads),
        current_(static_cast<std::size_t>(workers)) {
    if (workers > 1)  // the workers' pools (their tasks' parallel_for helpers), for idle workers to help
      for (int w = 0; w < workers; ++w) pools_.push_back(&Pool::slot(w));
    for (auto& c : current_) c.store(-1, std::memory_order_relaxed);
  }

  /// Worker `w`: takes ready tasks until every task is done, or a task failed, or none can start.
  /// `pooled`: the worker is one of several (tasks get their budget and the worker's own pool);
  /// otherwise the caller runs every task itself, each under the caller's own budget.
  void work(int w, bool pooled) {
    Pool* const pool = pooled ? pools_[static_cast<std::size_t>(w)] : nullptr;
    for (;;) {
      int task = -1, budget = 1;
      {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
          if (stop_ || done_ == n_) return;
          task = sched_.take_for(w);
          if (task >= 0) break;
          if (running_ == 0) {  // nothing ready, nothing running that could make anything ready
            fail_locked(std::make_exception_ptr(Error(
                "run_dag: " + std::to_string(n_ - done_) + " of " + std::to_string(n_) +
                " tasks can never start (their dependencies form a cycle, or the scheduler lost them)")));
            return;
          }
          const std::uint32_t seen = version_.load(std::memory_order_acquire);
          lock.unlock();
          wait_or_help(w, seen);
          lock.lock();
        }
        if (task >= n_) {
          fail_locked(std::make_exception_ptr(
              Error("run_dag: the scheduler gave task " + std::to_string(task) + ", outside [0, " + std::to_string(n_) + ")")));
          return;
        }
        ++running_;
        const int k = std::max(1, std::min(workers_, running_ + sched_.ready()));
        budget = pooled ? std::max(1, std::min(threads_ / k, free_)) : intra_op_threads();
        free_ -= budget;
      }
      std::exception_ptr error;
      current_[static_cast<std::size_t>(w)].store(task, std::memory_order_relaxed);
      try {
        if (pooled) {
          TaskScope scope(budget, pool);
          fn_(TaskContext{task, w, budget});
        } else {
          fn_(TaskContext{task, w, budget});
        }
      } catch (...) {
        error = std::current_exception();
      }
      current_[static_cast<std::size_t>(w)].store(-1, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(m_);
        --running_;
        free_ += budget;
        if (error) {
          fail_locked(error);
        } else {
          try {
            sched_.finish(task);
            ++done_;
          } catch (...) {
            fail_locked(std::current_exception());
          }
        }
      }
      bump();
    }
  }

  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  /// An idle worker waits for the next change (a task finished, the run failed), and meanwhile
  /// runs chunks of the running tasks' parallel_for regions: a task that got several threads
  /// because nothing else could run (the budget rule) gets the idle workers' threads at once,
  /// not only its pool's helpers, which may be asleep or waiting for a CPU (a wake-up costs tens
  /// of microseconds on a VM). Which thread runs a chunk never changes its result. After the
  /// spin budget (MLS_SPIN_US) it sleeps on the version, as before. MLS_DAG_HELP=0: wait only.
  void wait_or_help(int w, std::uint32_t seen) {
    static const bool help_on = [] {
      const char* env = std::getenv("MLS_DAG_HELP");
      return env == nullptr || std::string(env) != "0";
    }();
    if (pools_.empty() || !help_on) {
      (void)wait_change(version_, seen);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + spin_budget();
    for (int i = 0;; ++i) {
      if (version_.load(std::memory_order_acquire) != seen) return;
      bool helped = false;
      for (std::size_t v = 0; v < pools_.size(); ++v) {
        if (static_cast<int>(v) == w || !pools_[v]->busy()) continue;
        if (!on_help_) {
          helped |= pools_[v]->help();
          continue;
        }
        // Observed: the stretch timed and reported as help to the task worker v runs (whose
        // region this is: a region ends before its task does).
        const int task = current_[v].load(std::memory_order_relaxed);
        const auto start = std::chrono::steady_clock::now();
        if (!pools_[v]->help()) continue;
        helped = true;
        if (task < 0) continue;
        try {
          (*on_help_)(DagHelp{w, task, start, std::chrono::steady_clock::now()});
        } catch (...) {
          std::lock_guard<std::mutex> lock(m_);
          fail_locked(std::current_exception());
        }
      }
      if (helped) continue;
      if ((i & 7) == 7 && std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::yield();
    }
    (void)wait_change(version_, seen);
  }

  void fail_locked(std::exception_ptr e) {
    if (!error_) error_ = std::move(e);
    stop_ = true;
    bump();
  }
  void bump() {
    version_.fetch_add(1, std::memory_order_acq_rel);
    version_.notify_all();
  }

  DagScheduler& sched_;
  const std::function<void(const TaskContext&)>& fn_;
  const std::function<void(const DagHelp&)>* on_help_;  // null: help unobserved
  const int n_, workers_, threads_;
  std::mutex m_;
  int running_ = 0, done_ = 0, free_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::atomic<std::uint32_t> version_{0};
  std::vector<Pool*> pools_;  // per worker: its pool (workers > 1)
  std::vector<std::atomic<int>> current_;  // per worker: the task it runs (-1: none)
};

}  // namespace

namespace {
void run_dag_impl(DagScheduler& sched, int workers, const std::function<void(const TaskContext&)>& fn,
                  const std::function<void(const DagHelp&)>* on_help) {
  MLS_CHECK(workers >= 1, "run_dag: workers is ", workers, ", expected a count >= 1");
  const int n = sched.size();
  if (n <= 0) return;
  const bool nested = t_in_parallel || t_in_dag;
  workers = nested ? 1 : std::min(workers, n);
  DagRun run(sched, workers, intra_op_threads(), fn, on_help);
  if (workers == 1) {
    struct InDag {
      bool saved = t_in_dag;
      InDag() { t_in_dag = true; }
      ~InDag() { t_in_dag = saved; }
    } in_dag;
    run.work(0, false);
  } else {
    struct InParallel {
      InParallel() { t_in_parallel = true; }
      ~InParallel() { t_in_parallel = false; }
    } in_parallel;
    Pool::instance().run(workers, [&](int w) { run.work(w, true); });
  }
  run.rethrow();
}
}  // namespace

void run_dag(DagScheduler& sched, int workers, const std::function<void(const TaskContext&)>& fn) {
  run_dag_impl(sched, workers, fn, nullptr);
}
void run_dag(DagScheduler& sched, int workers, const std::function<void(const TaskContext&)>& fn,
             const std::function<void(const DagHelp&)>& on_help) {
  run_dag_impl(sched, workers, fn, on_help ? &on_help : nullptr);
}

void run_dag(const std::vector<std::vector<int>>& deps, int workers, const std::function<void(const TaskContext&)>& fn) {
  MLS_CHECK(workers >= 1, "run_dag: workers is ", workers, ", expected a count >= 1");
  InDegreeScheduler sched(deps);
  run_dag(sched, workers, fn);
}

}  // namespace mls
