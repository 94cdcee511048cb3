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

#include "mls/graph_opt/ir.hpp"

namespace mls::graph_opt {

/// True for ops whose result is a view of input 0 (reshape, permute, slice, expand, squeeze,
/// unsqueeze): they get no buffer of their own and keep their input's buffer alive.
bool is_view_op(Op op);

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
  /// "plan: 5 buffers, 1.2 MB (naive 3.4 MB, 35%), 2 in place".
  std::string summary() const;
};
/// Plans the program's memory: walks the schedule; frees the buffer of every value whose last
/// use has passed; gives each new value (not a leaf, not a view) the buffer of an elementwise
/// input that dies at this step when sizes match (in place), else the smallest free buffer that
/// is big enough, else a new buffer. All shapes must be known (throws `mls::Error` otherwise).
MemoryPlan plan_memory(const Program& p);

/// Runs a program inside the buffers of a plan: allocates each buffer once (on first use),
/// computes each node and stores its value in its buffer, hands values of views through.
class PlannedExecutor {
 public:
  PlannedExecutor(const Program& p, MemoryPlan plan);
  /// Outputs for one feed per program input (copies, so later runs cannot overwrite them).
  std::vector<Tensor> run(const std::vector<Tensor>& feeds);
  /// Bytes of planned buffers allocated so far (the measured peak).
  std::size_t measured_peak_bytes() const { return allocated_; }
  const MemoryPlan& plan() const { return plan_; }

 private:
  const Program* p_;
  MemoryPlan plan_;
  std::vector<Tensor> buffers_;
  std::size_t allocated_ = 0;
};

}  // namespace mls::graph_opt
