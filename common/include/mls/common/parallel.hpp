#pragma once
/// A small persistent thread pool and `parallel_for` over an index range.
///
/// The number of threads is `MLS_NUM_THREADS` if set, else the number of cores the process may
/// run on (its CPU affinity: one under mpirun's default binding of 2 ranks on 2 cores); tests and
/// benchmarks can change it with `set_num_threads`. Work smaller than `grain` runs inline, and
/// nested calls from inside a worker run serially, so kernels may call `parallel_for` freely.
///
/// Two levels of parallelism: `run_dag` runs independent tasks (a graph's ready nodes) on the
/// pool's threads at once, and gives each task an intra-op budget (`intra_op_threads()`) that its
/// own `parallel_for` calls honour, so tasks times budgets never exceed the threads.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

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

/// A barrier for a team of `members` threads that meet between the stages of one job (lab 6's
/// decode step, one member per chunk of a `parallel_for`): each `wait()` returns once every member
/// has called it. A stage lasts microseconds, so a waiting member pause-spins first, then yields
/// at each turn, and sleeps on a futex once the pool's spin budget (`MLS_SPIN_US`) has run out.
/// A member that fails calls `breaks()`; every
/// wait, then and after, returns false instead of waiting for it. Reusable: the next wait is the
/// next stage's. `members` < 1 is an `mls::Error`.
class TeamBarrier {
 public:
  explicit TeamBarrier(int members);
  /// True once all members have arrived; false when the barrier is broken.
  [[nodiscard]] bool wait();
  /// Releases every waiting member, and every later wait, with false.
  void breaks();

 private:
  const int members_;
  std::atomic<int> count_{0};
  std::atomic<unsigned> gen_{0};
  std::atomic<bool> broken_{false};
};

/// Threads the calling thread's `parallel_for` may use: `num_threads()`, or fewer inside a task
/// of `run_dag` (its intra-op budget) or under an `IntraOpBudget`. `num_threads()` itself never
/// changes inside a task, so a kernel that sizes its work by `num_threads()` (partial sums per
/// thread, a choice of kernel) computes the same partition, and the same bits, at any budget;
/// only how many threads share its chunks changes.
int intra_op_threads();

/// RAII: caps the calling thread's `parallel_for` at `threads` threads (>= 1; more than
/// `num_threads()` is clamped to it) for a scope, and restores the previous cap afterwards.
/// `run_dag` sets one around every task; tests use it to check that a kernel's result does not
/// depend on its budget. Throws `mls::Error` for `threads` < 1.
class IntraOpBudget {
 public:
  explicit IntraOpBudget(int threads);
  ~IntraOpBudget();
  IntraOpBudget(const IntraOpBudget&) = delete;
  IntraOpBudget& operator=(const IntraOpBudget&) = delete;

 private:
  int saved_;
};

/// Where a task of `run_dag` runs.
struct TaskContext {
  int task = 0;           // the task's index
  int worker = 0;         // 0..workers-1: which of run_dag's workers runs it
  int intra_threads = 1;  // its intra-op budget: threads its own parallel_for calls may use
};

/// The scheduling state of one `run_dag` run: which tasks may start now. `run_dag` calls these
/// under its own lock, one call at a time, so an implementation needs no locking of its own.
class DagScheduler {
 public:
  virtual ~DagScheduler() = default;
  /// Number of tasks (0..size()-1).
  virtual int size() const = 0;
  /// Takes a task whose predecessors have all finished (it leaves the ready set), or returns -1
  /// when none is ready now.
  virtual int take() = 0;
  /// The same for worker `worker` of the run (0..workers-1): what `run_dag` calls. A scheduler may
  /// prefer the ready tasks whose data that worker's caches hold; by default, `take()`.
  virtual int take_for(int worker) {
    (void)worker;
    return take();
  }
  /// Records that `task` finished: the tasks waiting only on it become ready.
  virtual void finish(int task) = 0;
  /// Number of tasks ready and not yet taken.
  virtual int ready() const = 0;
};

/// Runs every task of `sched` once, each after its predecessors, `workers` at a time (>= 1): the
/// workers are threads of common's pool (worker 0 is the caller), each taking the next ready task
/// as soon as it is free, and calling `fn` with the task, the worker and its intra-op budget.
///
/// The budget rule (the two levels never oversubscribe the cores): with T = the caller's
/// `intra_op_threads()` (num_threads() unless the caller runs under a budget itself), a task that
/// starts while k tasks could run at once (k = min(workers, running + ready), itself included)
/// gets b = T / k threads for its own `parallel_for` (at least 1, and no more than the threads the
/// running tasks leave free), kept until it ends. So a chain runs each node on all T threads, two
/// independent branches on T/2 each, and the running tasks' budgets add up to at most
/// max(T, workers). `num_threads()` is T's source and does not change inside a task. Nested calls
/// (a task calling `run_dag`) run their tasks one at a time on the calling thread. `workers` = 1
/// runs the tasks in ready order on the caller, each with the full budget T.
///
/// A task may not call `set_num_threads` when workers > 1 (it throws `mls::Error`: the run holds
/// the pool until its last task ends). The first exception a task throws is rethrown once the
/// tasks already running have finished (no new task starts after it). Throws `mls::Error` for
/// `workers` < 1 and when tasks remain that can never become ready (a cycle): nothing hangs.
void run_dag(DagScheduler& sched, int workers, const std::function<void(const TaskContext&)>& fn);

/// A stretch of time an idle worker of `run_dag` spent running chunks of a running task's
/// `parallel_for` (see `run_dag`'s help): which worker helped, whose task, from when to when.
struct DagHelp {
  int worker = 0;  // the idle worker that ran the chunks
  int task = 0;    // the task whose parallel_for region they belong to
  std::chrono::steady_clock::time_point start, end;
};
/// `run_dag` that reports each stretch of help to `on_help` (called on the helping thread, at
/// most once per stretch; not for the helpers of a worker's own pool): what a schedule trace needs
/// to draw the chunks an idle worker ran. An exception from `on_help` fails the run like a task's.
void run_dag(DagScheduler& sched, int workers, const std::function<void(const TaskContext&)>& fn,
             const std::function<void(const DagHelp&)>& on_help);

/// `run_dag` over a list of dependencies: deps[i] lists the tasks that must finish before task i
/// starts (indices in [0, deps.size()), duplicates allowed); tasks start in index order among
/// those ready. Throws `mls::Error` naming the task for an index out of range or a task that
/// depends on itself, and for a cycle.
void run_dag(const std::vector<std::vector<int>>& deps, int workers, const std::function<void(const TaskContext&)>& fn);

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
