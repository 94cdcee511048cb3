#pragma once
/// Memory planning (slides 003): liveness analysis over a schedule, then assignment of every
/// intermediate value to a reusable buffer, in place where legal; and an executor that runs a
/// program inside the planned buffers.
///
///   MemoryPlan plan = plan_memory(prog);      // plan.peak_bytes vs plan.naive_bytes
///   PlannedExecutor ex(prog, plan);
///   auto outs = ex.run(feeds);                // ex.measured_peak_bytes() == plan.peak_bytes
#include <cstdint>
#include <string>
#include <vector>

#include "mls/autodiff/control.hpp"
#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

/// True for ops whose result is a view of input 0 (reshape, permute, slice, expand, squeeze,
/// unsqueeze): they get no buffer of their own and keep their input's buffer alive.
bool is_view_op(Op op);
/// True when node `n` yields a view of its input 0, as the planners and executors decide: a view
/// op, except a reshape that lab 1's reshape could not make a view of its input (`view_strides`),
/// the values its chain of views starts from taken as compact (as the planned buffers are): a
/// reshape of a compact value, or of a permuted or sliced one whose strides the new shape re-splits
/// (attention's heads: reshape(slice(qkv)) to [B, T, H, D]; layer l of a stacked parameter), is a
/// view; a reshape that flattens a transposed value, or any reshape of an expand, copies. Where a
/// value fed at run time is not compact, lab 1's reshape copies instead: still correct.
bool yields_view(const Node& n);
/// Bytes of node `n`'s value (unknown dims, -1, count as 0).
std::size_t value_bytes(const Node& n);

/// The live range of one value: produced at step `def`, last read at step `last_use` (steps
/// index the schedule; outputs live to the end).
struct Interval {
  std::int64_t def = 0;
  std::int64_t last_use = 0;
};
/// Liveness over `schedule` (a topological order of the program's needed nodes): one interval
/// per scheduled node. A view's readers extend the life of the value it views (transitively);
/// program outputs live until the last step.
std::vector<Interval> liveness(const Program& p, const std::vector<Node*>& schedule);

/// Where every value lives.
struct MemoryPlan {
  std::vector<Node*> schedule;          // execution order
  std::vector<int> buffer;              // per step: buffer index, -1 for leaves and views
  std::vector<std::size_t> buffer_bytes;  // size of each buffer
  std::vector<bool> in_place;           // per step: reuses the buffer of an input that dies here
  std::size_t peak_bytes = 0;           // sum of buffer sizes
  std::size_t naive_bytes = 0;          // one buffer per non-leaf, non-view value
  std::size_t live_bytes_max = 0;       // max over steps of bytes still needed after the step (a lower bound)
  /// Control flow (lab 2's cond and while_loop): the largest sub-graph plan among the scheduled
  /// control nodes. A body is planned once and its buffers are reused by every iteration (sub-graphs
  /// run one at a time, so the largest, not the sum). Not in peak_bytes; the states a loop saves for
  /// its gradient (T + 1 states, T known only at run time) are not either: see `control_memory`.
  std::size_t subgraph_bytes = 0;
  /// Concat in place (`ConcurrentPlanOptions::concat_in_place`): per step, the step of the concat
  /// whose buffer this value is computed in (its slice along the concat's axis: the concat then
  /// copies nothing), -1 otherwise; empty when the planner made no such choice. Such a value has
  /// buffer -1 (it owns no memory: an executor that ignores this computes it on its own, still
  /// correct); its concat's buffer is held from before the first of its slices is written.
  std::vector<std::int64_t> slice_of;
  /// "plan: 5 buffers, 1.2 MB (naive 3.4 MB, 35%), 2 in place".
  std::string summary() const;
};
/// Plans the program's memory: walks the schedule; frees the buffer of every value whose last
/// use has passed; gives each new value (not a leaf, not a view) the buffer of an elementwise
/// input that dies at this step when sizes match (in place), else the smallest free buffer that
/// is big enough, else a new buffer. All shapes must be known (throws `mls::Error` otherwise).
MemoryPlan plan_memory(const Program& p);

/// A plan that stays valid when the program's nodes run concurrently (`ParallelExecutor` with
/// `ParallelOptions::planned`): two values share a buffer only when their lives cannot overlap
/// in ANY order a parallel executor may run the nodes in, which the DAG's reachability decides,
/// not the schedule's order. Value v may take the buffer whose latest value u is not a program
/// output when u's producer and every node reading u (directly or through views) are ancestors
/// of v's producer (they have all finished before it starts); in place (v reads u and is
/// elementwise, as in `plan_memory`) when every other reader of u is an ancestor of v. A
/// sequential plan is not valid under concurrency: in the slides' example (A; B = A + 1;
/// C = A + 2; D = B * C) it computes C in place in A's buffer, while B, which may run at the
/// same time, still reads A. Best fit among the free buffers, else a new one; `live_bytes_max`
/// is the schedule order's (a lower bound of this plan too). Throws `mls::Error` for unknown shapes.
///
/// With `concat_in_place`, each concat that `concat_slices` allows gets its buffer before its
/// inputs run and its inputs are computed in their slices of it (`MemoryPlan::slice_of`): the
/// buffer is one whose latest value and its readers are ancestors of EVERY input of the concat
/// (done before the first slice may be written, in any order), and the concat's copy is gone (the
/// heads of an attention write their slices of the concat the output projection reads).
struct ConcurrentPlanOptions {
  bool concat_in_place = false;
};
MemoryPlan plan_memory_concurrent(const Program& p, ConcurrentPlanOptions options = {});
/// Per step of `schedule` (the program's), the step of the concat this value can be computed in
/// place in (its slice), -1 otherwise. A concat qualifies when every input is a distinct non-leaf
/// value owning its memory (not a view), of the concat's dtype and known shape, read by the
/// concat alone (one input edge in the whole program) and not an output: then nothing else ever
/// sees that value, and writing it straight into the concat's buffer changes no bit.
std::vector<std::int64_t> concat_slices(const Program& p, const std::vector<Node*>& schedule);
/// Why `plan` is not valid when `p`'s nodes run concurrently, "" when it is: the first pair of
/// values sharing a buffer whose lives may overlap in some parallel order ("%7 add 'C' is written
/// in place into the buffer of %2 mul 'A', which %5 add 'B' may still read: %5 is not an ancestor
/// of %7"), or an output's buffer taken by a later value. Checks each buffer's values in schedule
/// order against ancestor sets computed by depth-first search. A concat computed in place
/// (`MemoryPlan::slice_of`) is written by its slices: each must be an input read by it alone, and
/// the buffer's previous value and its readers ancestors of every slice.
std::string concurrent_plan_violation(const Program& p, const MemoryPlan& plan);

/// Memory of one control node (lab 2's control.hpp): its sub-graph planned once, plus the states a
/// loop keeps for its reverse replay when a gradient of it exists.
struct LoopMemory {
  std::size_t body_bytes = 0;   // peak of the body's plan (cond: the larger branch), reused per iteration
  std::size_t state_bytes = 0;  // one state: the loop-carried tensors (cond: its outputs)
  bool saves_states = false;    // a gradient of the loop was built: the forward keeps every state
  std::int64_t trip_count = 0;  // T, the iterations the saved states are counted for
  std::size_t saved_bytes = 0;  // (T + 1) x state_bytes when saves_states, else 0: O(T)
  /// Bytes beyond the outer plan's own buffers: body_bytes + saved_bytes.
  std::size_t total() const { return body_bytes + saved_bytes; }
};
/// LoopMemory of a cond or while_loop node of `p`, for `trip_count` iterations (-1: the loop's last
/// run, `autodiff::last_trip_count`). Throws `mls::Error` naming the node for another op, a loop
/// that never ran when trip_count is -1, or a sub-graph with unknown shapes.
LoopMemory control_memory(const Program& p, const Node& n, std::int64_t trip_count = -1);
/// A copy of a control node's sub-graph as a program: its placeholders become the inputs (in
/// order: operands/state, then the captures it uses), its outputs the outputs.
Program subgraph_program(const autodiff::SubGraph& sg);

/// Runs a program inside the buffers of a plan: allocates each buffer once (on first use),
/// computes each node in its buffer (ops with a `forward_into`: lab 3's gemm and fused loops,
/// matmul) or computes it and copies it there (the others), hands values of views through. The
/// buffers holding the outputs at the end are handed out with them (no copy) and allocated again
/// by the next run, or taken back by it when the caller has let go of the output since (no other
/// reference to the buffer: a saved activation the backward has consumed); an output that is an
/// input, a constant or a view of one is copied.
class PlannedExecutor {
 public:
  PlannedExecutor(const Program& p, MemoryPlan plan);
  /// Outputs for one feed per program input (theirs to keep: later runs cannot overwrite them).
  std::vector<Tensor> run(const std::vector<Tensor>& feeds);
  /// Bytes of the planned buffers allocated so far, each counted once (the measured peak).
  std::size_t measured_peak_bytes() const { return allocated_; }
  const MemoryPlan& plan() const { return plan_; }
  /// Per-step profile (off by default): with it on, every run adds each schedule step's time to
  /// `step_seconds()` (computing the value) and `copy_seconds()` (storing it into its buffer).
  void set_profiling(bool on);
  const std::vector<double>& step_seconds() const { return step_seconds_; }
  const std::vector<double>& copy_seconds() const { return copy_seconds_; }

 private:
  const Program* p_;
  MemoryPlan plan_;
  std::vector<Tensor> buffers_;
  std::vector<bool> ever_allocated_;
  std::size_t allocated_ = 0;
  bool profiling_ = false;
  std::vector<double> step_seconds_, copy_seconds_;
  std::vector<int> input_step_, output_step_;  // per program input / output: its step (-1: not scheduled)
  std::vector<std::vector<int>> args_;         // per step: the steps of its inputs
  std::vector<ForwardIntoFn> into_;            // per step: its op's forward into a buffer, or null
  std::vector<Tensor> views_;                  // per step: its buffer with its shape (remade when reallocated)
  std::vector<Tensor> lent_;                   // per buffer: handed out with an output, taken back once its caller lets go
};

}  // namespace mls::graph_opt
