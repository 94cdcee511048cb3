#pragma once
/// Operator-parallel execution (slides 003, "parallel scheduling", after MXNet's dependency
/// engine): nodes whose inputs are all computed do not depend on each other, so they may run at
/// the same time. In the slides' example
///
///   A = ones * 2;  C = A + 2;  B = A + 1;  D = B * C
///
/// B and C both wait only for A: when A finishes, both become ready and two workers run them
/// together; D waits for both. The executor keeps a ready queue of nodes whose inputs are done (a
/// count of unfinished inputs per node, decremented as each input finishes) and W workers take
/// nodes from it (common's `mls::run_dag`). Each node is computed by the same code as in the
/// sequential executor, so the outputs are bit-identical to `run` at any W; each node's own
/// kernels get an intra-op share of the threads (`mls::intra_op_threads()`), which changes how
/// many threads share a kernel's chunks but never the kernel's arithmetic.
///
///   ParallelExecutor ex(prog, 2);               // 2 workers
///   auto outs = ex.run(feeds);                  // == run(prog, feeds), bit for bit
///   std::cout << trace_summary(prog, ex.trace());
///   write_file_atomic("trace.svg", trace_svg(prog, ex.trace()));
///
/// Which ready node a free worker takes: the one with the longest estimated path to the end of
/// the program (its own time and the costliest chain of its consumers, `estimated_seconds`), so
/// the long branches start first and the short ones fill the gaps (list scheduling by "bottom
/// level", as HEFT ranks tasks); `ParallelOptions::longest_path_first` = false takes them in the
/// ready queue's order (first in, first out). Among ready nodes of equal rank (branches of one
/// shape, as attention heads), a worker takes the one with the most inputs it computed itself in
/// this run, then the one it ran in the last run (`ParallelOptions::affinity`): a node whose
/// weights and inputs sit in the other core's cache runs slower, and a stable assignment keeps
/// them where they were.
///
/// Memory: by default values are allocated as nodes compute them and freed when their last
/// reader finishes; `peak_bytes()` reports the most bytes of intermediate values alive at once in
/// the last run. With `ParallelOptions::planned`, every value lives in a buffer of
/// `plan_memory_concurrent` (a plan valid in every parallel order: a sequential plan is not),
/// allocated once, and each node is computed in its buffer as in `PlannedExecutor` (ops with a
/// `forward_into`: matmul, gemm, concat, fused loops, float add/sub/mul/div; the others are
/// computed and copied there); the buffers holding the outputs are handed out with them and
/// allocated again by the next run. `peak_bytes()` is then the plan's bytes.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_set>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/graph_opt/ir.hpp"
#include "mls/graph_opt/memory.hpp"

namespace mls::graph_opt {

/// The ready queue of the parallel executor: in-degree counting over a task graph (student code).
/// `run_dag` calls its methods under one lock, so it needs no locking of its own.
class ReadyQueue final : public DagScheduler {
 public:
  /// deps[i] lists the tasks task i reads (each listed entry is one input edge; an index may
  /// repeat, as in x * x). Every task with no deps is ready at once, in index order. Throws
  /// `mls::Error` for an index outside [0, deps.size()) or a task that reads itself.
  /// Hint: keep, per task, its consumers (one entry per edge) and how many input edges are
  /// still unfinished.
  explicit ReadyQueue(const std::vector<std::vector<int>>& deps);
  /// Number of tasks.
  int size() const override { return static_cast<int>(waiting_.size()); }
  /// The oldest ready task (first in, first out), removed from the queue; -1 when none is ready.
  int take() override;
  /// `task` has finished: each of its consumers has one unfinished input edge fewer per edge
  /// from `task`; a consumer with none left joins the queue (in the order of `task`'s edges),
  /// and its ready wave becomes the number of tasks finished so far, this one included.
  void finish(int task) override;
  /// Number of tasks ready and not yet taken.
  int ready() const override { return static_cast<int>(queue_.size()); }
  /// Per task, when it became ready: 0 for tasks ready at the start, k when the k-th finish
  /// released it (-1: not yet ready). Tasks with the same wave were ready at the same time.
  const std::vector<int>& ready_wave() const { return wave_; }
  /// Number of tasks finished so far.
  int finished() const { return finished_; }

 private:
  std::vector<std::vector<int>> consumers_;  // per task: the tasks reading it, one entry per edge
  std::vector<int> waiting_;                 // per task: input edges not yet finished
  std::deque<int> queue_;                    // ready tasks, oldest first
  std::vector<int> wave_;
  int finished_ = 0;
};

/// One node as the parallel executor ran it.
struct TraceEvent {
  const Node* node = nullptr;
  int task = 0;           // index into the executor's tasks (schedule order)
  int worker = 0;         // which worker ran it (0..workers-1)
  int intra_threads = 1;  // its intra-op budget
  int wave = 0;           // ReadyQueue::ready_wave: nodes with one wave were ready together
  int level = 0;          // schedule_levels' level
  double start_us = 0, end_us = 0;  // from the start of the run
  double ready_us = 0;    // when its last input finished (0: it reads only leaves)
};
/// A stretch of time an idle worker ran chunks of another worker's node (`run_dag`'s help: a
/// node running alone gets the idle workers' threads for its own parallel_for).
struct HelpEvent {
  int worker = 0;                   // the idle worker that ran the chunks
  int task = 0;                     // the node they belong to (index into the tasks)
  double start_us = 0, end_us = 0;  // from the start of the run
};
/// What one run of the parallel executor did.
struct ScheduleTrace {
  int workers = 1;
  int threads = 1;                  // num_threads() during the run
  std::vector<TraceEvent> events;   // one per task, in task order
  std::vector<HelpEvent> helped;    // the chunks idle workers ran for others, in the order they ended
  double wall_us = 0;               // the whole run
  std::size_t peak_bytes = 0;       // most bytes of intermediate values alive at once
};

/// The tasks of the parallel executor: the program's scheduled non-leaf nodes, in schedule order.
std::vector<Node*> parallel_tasks(const Program& p);
/// For each task (parallel_tasks order), the tasks it reads: its non-leaf inputs, one entry per
/// input edge (the `deps` of a ReadyQueue).
std::vector<std::vector<int>> task_deps(const std::vector<Node*>& tasks);

/// The ASAP levels of the schedule: level 0 holds the non-leaf nodes that read only leaves, level
/// k the nodes whose latest non-leaf input is on level k-1. Nodes on one level never depend on
/// each other: they may all run at once (the slides' B and C share a level).
std::vector<std::vector<Node*>> schedule_levels(const Program& p);

/// Estimated time of a node from its cost (a roofline: the slower of its flops at `flops_per_s`
/// and its bytes at `bytes_per_s`; one core's rough figures), in seconds.
double estimated_seconds(const NodeCost& c, double flops_per_s = 50e9, double bytes_per_s = 20e9);

/// The critical path of a program: the chain of dependent nodes with the largest estimated time.
struct CriticalPath {
  std::vector<const Node*> nodes;  // the costliest chain, first to last
  double seconds = 0;              // its estimated time
  double total_seconds = 0;        // the estimated time of every node
  std::size_t depth = 0;           // the longest chain in nodes (the number of levels)
  /// total work / critical path: how many workers the program can keep busy on average.
  double parallelism() const { return seconds > 0 ? total_seconds / seconds : 1.0; }
};
/// The critical path of `p`'s scheduled nodes, each node's time from `estimated_seconds`.
CriticalPath critical_path(const Program& p);

/// Where a run's time went, from its trace (what `trace_summary` reports): per worker, the time
/// it ran nodes, the time a node that was ready waited for it although it was free (dispatch:
/// the executor's per-node overhead, the ready queue's lock, a sleeping worker's wake-up), and
/// the rest (idle: nothing ready for it); and over the wall time, how long no node, exactly one,
/// and two or more ran (a serial tail shows as one node at a time).
struct TraceBreakdown {
  std::vector<double> busy_us, dispatch_us, idle_us;  // per worker; each row adds up to wall_us
  std::vector<double> helped_us;  // per worker: of its idle time, the part it ran others' chunks (`ScheduleTrace::helped`)
  double none_us = 0, one_us = 0, several_us = 0;     // add up to wall_us
  double dispatch_total_us() const;
};
/// The breakdown of a trace: a node's dispatch wait is its start minus the later of when it
/// became ready (`TraceEvent::ready_us`) and when its worker finished its previous node.
TraceBreakdown trace_breakdown(const ScheduleTrace& t);

/// A text summary of a run: workers and threads; the levels (how many, the widest); the critical
/// path in nodes and estimated time, the total work and the parallelism; the measured wall time,
/// the busy time per worker and the overlap (busy time / wall time); `trace_breakdown`'s dispatch
/// and idle times and how long one node ran alone; the peak bytes.
std::string trace_summary(const Program& p, const ScheduleTrace& t);
/// Every node of a run in the order they started, one line each: "worker 1  12.0 .. 30.5 us
/// (18.5 us, waited 0.4 us after ready)  budget 1  %5 add 'B'", and each stretch of help: "worker 0
/// 31.0 .. 40.2 us  (9.2 us)  helped  %9 matmul" (what `mls-opt parallel --events` prints: where a
/// lane idles, and how long each node took at its budget).
std::string trace_events_text(const Program& p, const ScheduleTrace& t);
/// The levels as text, one line per level: "level 1: %5 add 'B', %6 add 'C'".
std::string levels_text(const Program& p);
/// The schedule as an SVG picture (common's svg writer): one lane per worker, time to the right,
/// each node a box from its start to its end labelled with its node reference and op (a tooltip
/// gives its name, shape, time, budget and wave); the chunks an idle worker ran for another's node
/// a dashed box in the idle worker's lane, labelled "+" and that node's reference.
std::string trace_svg(const Program& p, const ScheduleTrace& t);

/// Per task (parallel_tasks order), its estimated time plus the costliest chain of its consumers
/// (`estimated_seconds`): the time from its start to the end of the program were nothing to run
/// in parallel with it. What the executor ranks ready tasks by.
std::vector<double> bottom_levels(const std::vector<Node*>& tasks, const std::vector<std::vector<int>>& deps);

/// Which of the `ready` tasks worker `worker` takes (an index into `ready`; -1 when it is empty):
/// the highest `rank`; among equal ranks, the most input edges (`deps`) that `worker` computed in
/// this run (`producer`: per task, the worker that ran it, -1 not yet), then one that `worker` ran
/// in the last run (`last_worker`), then the lowest task index. Empty `deps` (or `worker` < 0):
/// rank, then index only. What the executor's longest-path-first scheduler with affinity does.
/// Throws `mls::Error` for a ready task without a rank.
int pick_ready(const std::vector<int>& ready, const std::vector<double>& rank, int worker,
               const std::vector<std::vector<int>>& deps, const std::vector<int>& producer, const std::vector<int>& last_worker);

/// The makespan of list scheduling on a simulated machine: tasks (deps as in `ReadyQueue`, each
/// pointing to earlier tasks) of known durations `seconds` run on `workers` workers, a free worker
/// taking the ready task of the highest `priority` (ties: the lower index), no overheads. Throws
/// `mls::Error` for sizes that differ, a dependency that is not an earlier task, a negative
/// duration, or `workers` < 1.
double simulate_schedule(const std::vector<std::vector<int>>& deps, const std::vector<double>& seconds,
                         const std::vector<double>& priority, int workers);
/// What `search_schedule` found.
struct ScheduleSearch {
  std::vector<double> priority;  // per task: the best priorities found (the bottom levels if none beat them)
  double base_makespan = 0;      // simulated, with the bottom levels of `seconds` as priorities
  double best_makespan = 0;      // simulated, with `priority`
  int trials = 0;
};
/// Greedy list scheduling by bottom level is not optimal: on the Inception block it starts the
/// two longest branches and leaves the third's short first conv, which feeds a long one, waiting.
/// This searches priorities on the simulator (`simulate_schedule` with the measured `seconds`):
/// the bottom levels, then `trials` random variants (each bottom level scaled by a random factor,
/// or a random order), seeded; the best makespan wins (ties: the earlier trial). Throws
/// `mls::Error` as `simulate_schedule`, and for `trials` < 0.
ScheduleSearch search_schedule(const std::vector<std::vector<int>>& deps, const std::vector<double>& seconds, int workers,
                               int trials, std::uint64_t seed = 1);

/// How the parallel executor runs (see the top of this file).
struct ParallelOptions {
  bool longest_path_first = true;  // false: the ready queue's order (first in, first out)
  /// With longest_path_first: among ready nodes of equal rank, a worker takes the one whose
  /// inputs it computed in this run, then one it ran in the last run (cache affinity).
  bool affinity = true;
  bool planned = false;            // true: values live in the buffers of plan_memory_concurrent
  /// The inputs of a concat that only the concat reads (`concat_slices`) are computed in their
  /// slices of its value, so the concat copies nothing and its reader starts as soon as the last
  /// input ends (attention's heads and the output projection: the copies run in the parallel
  /// phase, not on the critical path); the same bits. With `planned` the value is the concat's
  /// buffer, held from before its inputs run (`ConcurrentPlanOptions::concat_in_place`);
  /// otherwise the first of its inputs to run allocates it.
  bool concat_in_place = true;
  /// With longest_path_first, > 0: after the first 3 runs, rank the ready nodes by priorities that
  /// `search_schedule` finds with this many trials on each node's fastest time in those runs (a
  /// profile-guided schedule; `schedule_search()` reports what it found); 0: bottom levels of the
  /// estimated times. The order never changes a result.
  int search_trials = 0;
};

/// Runs a program's ready nodes concurrently on W workers; outputs bit-identical to `run`.
class ParallelExecutor {
 public:
  /// Throws `mls::Error` for `workers` < 1, a program whose outputs need a placeholder that is
  /// not one of its inputs, or an assign node (a side effect: its order matters); with
  /// `options.planned`, for unknown shapes (`plan_memory_concurrent`).
  explicit ParallelExecutor(const Program& p, int workers = num_threads(), ParallelOptions options = {});
  /// Outputs for one feed per program input (the dtype and shape of each placeholder; throws
  /// `mls::Error` naming the input otherwise, or when the count differs). Records the trace.
  std::vector<Tensor> run(const std::vector<Tensor>& feeds);
  /// The last run's schedule.
  const ScheduleTrace& trace() const { return trace_; }
  /// The last run's most bytes of intermediate values alive at once.
  std::size_t peak_bytes() const { return trace_.peak_bytes; }
  /// Workers running nodes at once.
  int workers() const { return workers_; }
  /// The nodes it runs (`parallel_tasks`): trace events and ready waves are indexed like this.
  const std::vector<Node*>& tasks() const { return tasks_; }
  const ParallelOptions& options() const { return options_; }
  /// The buffers' plan (`options().planned`; empty otherwise).
  const MemoryPlan& plan() const { return plan_; }
  /// What the schedule search found (`options().search_trials` > 0, after the first 3 runs; trials 0 before).
  const ScheduleSearch& schedule_search() const { return search_; }

 private:
  /// Where a value comes from: a task's result, a program input (a feed), or a constant/variable.
  struct Source {
    int task = -1;
    int input = -1;
    const Node* leaf = nullptr;
  };
  const Program* p_;
  int workers_;
  ParallelOptions options_;
  std::vector<Node*> tasks_;
  std::vector<std::vector<int>> deps_;
  std::vector<double> rank_;                // bottom_levels of the tasks
  std::vector<int> level_;                  // schedule_levels' level of each task
  std::vector<std::vector<Source>> args_;   // per task: where each of its inputs comes from
  std::vector<int> root_;                   // per task: the task owning its memory (itself; a view's source; -1: a leaf)
  std::vector<int> readers_, root_reads_;   // per task: input edges reading it; reads of the memory it owns
  std::vector<bool> keep_;                  // per task: memory an output needs until the end
  std::vector<Source> outputs_;             // per program output
  MemoryPlan plan_;                         // planned: where each value lives
  std::vector<int> task_buffer_;            // planned: per task, its buffer (-1: a view)
  std::vector<ForwardIntoFn> into_;         // planned: per task, its op's forward into a buffer (or null)
  std::vector<Tensor> buffers_;             // planned: allocated in the constructor
  std::vector<bool> out_buffer_;            // planned: buffers handed out with the outputs (allocated again)
  /// Concat in place: the concat's task whose value a task is computed in, and where.
  struct Slice {
    int concat = -1;
    std::int64_t axis = 0, begin = 0;
  };
  std::vector<Slice> slice_;                // per task (concat -1: its own value)
  std::unordered_set<int> sliced_concat_;   // concat tasks whose inputs write their slices
  std::vector<int> last_worker_;            // per task: its worker in the last run (affinity)
  ScheduleSearch search_;                   // search_trials: the priorities found after the profiled runs
  std::vector<double> profile_;             // search_trials: per task, its fastest time so far (seconds)
  int profiled_runs_ = 0;
  ScheduleTrace trace_;
};

}  // namespace mls::graph_opt
