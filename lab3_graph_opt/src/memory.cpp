// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Memory planning (slides 003): liveness, buffer assignment with reuse and in-place updates, and
// an executor that runs a program inside the planned buffers.
#include "mls/graph_opt/memory.hpp"

#include <algorithm>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "mls/common/timer.hpp"
#include "mls/tensor/index.hpp"

namespace mls::graph_opt {

bool is_view_op(Op op) {
  return op == Op::Reshape || op == Op::Permute || op == Op::Slice || op == Op::Expand || op == Op::Squeeze ||
         op == Op::Unsqueeze;
}

namespace {
/// The strides node `n`'s value has in the planned executors when every value its chain of views
/// starts from (a computed value in its buffer, a leaf) is compact: a permute reorders them, a
/// slice multiplies one by its step, a reshape, squeeze or unsqueeze re-splits them where lab 1's
/// reshape can without a copy (`view_strides`). False when that reshape would copy, for an expand
/// and for unknown shapes.
bool planned_strides(const Node& n, Strides& st) {
  if (!is_view_op(n.op)) {
    for (std::int64_t d : n.shape)
      if (d < 0) return false;
    st.assign(n.shape.size(), 0);
    std::int64_t acc = 1;
    for (std::size_t d = n.shape.size(); d-- > 0;) st[d] = acc, acc *= n.shape[d];
    return true;
  }
  Strides in;
  if (n.op == Op::Expand || !planned_strides(*n.inputs[0], in)) return false;
  const Shape& is = n.inputs[0]->shape;
  if (n.op == Op::Permute) {
    const auto& dims = n.attrs.ints("dims");
    if (dims.size() != in.size()) return false;
    st.assign(dims.size(), 0);
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const std::int64_t d = dims[i] < 0 ? dims[i] + static_cast<std::int64_t>(in.size()) : dims[i];
      if (d < 0 || d >= static_cast<std::int64_t>(in.size())) return false;
      st[i] = in[static_cast<std::size_t>(d)];
    }
    return true;
  }
  if (n.op == Op::Slice) {
    const std::int64_t d = n.attrs.i("dim"), step = n.attrs.i("step");
    if (d < 0 || d >= static_cast<std::int64_t>(in.size()) || step < 1) return false;
    st = in;
    st[static_cast<std::size_t>(d)] *= step;
    return true;
  }
  for (std::int64_t d : n.shape)
    if (d < 0) return false;
  return view_strides(is, in, n.shape, st);  // reshape, squeeze, unsqueeze
}
}  // namespace

bool yields_view(const Node& n) {
  if (!is_view_op(n.op)) return false;
  if (n.op != Op::Reshape) return true;
  // A reshape is a view where lab 1's reshape makes one of its input as planned (a compact
  // value, or a compact value permuted or sliced so that the new shape re-splits its strides:
  // the heads [B, T, H, D] of attention's q|k|v slice); else it copies into a buffer of its own.
  Strides st;
  return planned_strides(n, st);
}
std::size_t value_bytes(const Node& n) {
  std::size_t b = itemsize(n.dtype);
  for (std::int64_t d : n.shape) b *= static_cast<std::size_t>(std::max<std::int64_t>(d, 0));
  return b;
}

namespace {
[[maybe_unused]] std::size_t bytes_of(const Node& n) { return value_bytes(n); }
/// Step of the value that owns the memory `step` reads (itself, or what a view views; -1: a leaf).
[[maybe_unused]] std::vector<std::int64_t> roots(const std::vector<Node*>& schedule,
                                const std::unordered_map<const Node*, std::int64_t>& step_of) {
  std::vector<std::int64_t> root(schedule.size());
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    const Node& n = *schedule[i];
    if (n.is_leaf()) root[i] = -1;
    else if (yields_view(n)) root[i] = root[static_cast<std::size_t>(step_of.at(n.inputs[0].get()))];
    else root[i] = static_cast<std::int64_t>(i);
  }
  return root;
}
bool ops_known(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
}

/// The program's schedule with no value assigned a buffer yet (every planner starts here).
MemoryPlan unassigned_plan(const Program& p) {
  MemoryPlan plan;
  plan.schedule = p.schedule();
  plan.buffer.assign(plan.schedule.size(), -1);
  plan.in_place.assign(plan.schedule.size(), false);
  return plan;
}
}  // namespace

MemoryPlan plan_memory(const Program& p);
namespace {
/// The largest plan among the sub-graphs of the control nodes of `schedule` (each planned once).
std::size_t subgraph_peak(const std::vector<Node*>& schedule) {
  std::size_t peak = 0;
  std::unordered_set<std::int64_t> seen;
  for (const Node* n : schedule) {
    if (n->op != Op::Cond && n->op != Op::WhileLoop) continue;
    const autodiff::ControlFlow* cf = autodiff::control_flow(*n);
    if (!cf || !seen.insert(cf->id).second) continue;
    for (std::size_t i = n->op == Op::WhileLoop ? 1 : 0; i < cf->subs.size(); ++i)
      peak = std::max(peak, plan_memory(subgraph_program(cf->subs[i])).peak_bytes);
  }
  return peak;
}
}  // namespace

std::vector<Interval> liveness(const Program& p, const std::vector<Node*>& schedule) {
  std::vector<Interval> live(schedule.size());
  // BEGIN SOLUTION
  std::unordered_map<const Node*, std::int64_t> step_of;
  for (std::size_t i = 0; i < schedule.size(); ++i) step_of[schedule[i]] = static_cast<std::int64_t>(i);
  const std::vector<std::int64_t> root = roots(schedule, step_of);
  for (std::size_t i = 0; i < schedule.size(); ++i) live[i] = {static_cast<std::int64_t>(i), static_cast<std::int64_t>(i)};
  // A read of a value is a read of the memory it lives in: extend the root's interval.
  auto touch = [&](std::int64_t s, std::int64_t when) {
    if (s < 0) return;
    auto& l = live[static_cast<std::size_t>(s)].last_use;
    l = std::max(l, when);
    const std::int64_t r = root[static_cast<std::size_t>(s)];
    if (r >= 0) live[static_cast<std::size_t>(r)].last_use = std::max(live[static_cast<std::size_t>(r)].last_use, when);
  };
  for (std::size_t i = 0; i < schedule.size(); ++i)
    for (const NodePtr& in : schedule[i]->inputs) touch(step_of.at(in.get()), static_cast<std::int64_t>(i));
  const auto end = static_cast<std::int64_t>(schedule.size());
  for (const Var& o : p.outputs) touch(step_of.at(o.get()), end);
  // END SOLUTION
  return live;
}

MemoryPlan plan_memory(const Program& p) {
  MemoryPlan plan = unassigned_plan(p);
  const auto& s = plan.schedule;
  // BEGIN SOLUTION
  for (const Node* n : s)
    for (std::int64_t d : n->shape)
      MLS_CHECK(d >= 0, "plan_memory: node ", node_ref(p, n), " (", autodiff::op_name(n->op), ") has shape ", shape_str(n->shape),
                "; give the program concrete input shapes");
  std::unordered_map<const Node*, std::int64_t> step_of;
  for (std::size_t i = 0; i < s.size(); ++i) step_of[s[i]] = static_cast<std::int64_t>(i);
  const std::vector<std::int64_t> root = roots(s, step_of);
  const std::vector<Interval> live = liveness(p, s);
  std::vector<int> free_list;  // buffers no live value occupies
  for (std::size_t i = 0; i < s.size(); ++i) {
    const Node& n = *s[i];
    if (root[i] != static_cast<std::int64_t>(i)) continue;  // leaves and views own no memory
    const std::size_t need = bytes_of(n);
    plan.naive_bytes += need;
    int b = -1;
    // In place: an elementwise op may overwrite an input that dies here and has its size.
    if (autodiff::op_def(n.op).elementwise || n.op == kFusedElementwise)
      for (const NodePtr& in : n.inputs) {
        const std::int64_t k = step_of.at(in.get());
        if (root[static_cast<std::size_t>(k)] == k && live[static_cast<std::size_t>(k)].last_use == static_cast<std::int64_t>(i) &&
            bytes_of(*in) == need && in->dtype == n.dtype) {
          b = plan.buffer[static_cast<std::size_t>(k)];
          plan.in_place[i] = true;
          break;
        }
      }
    if (b < 0) {  // best fit among the free buffers
      for (int f : free_list)
        if (plan.buffer_bytes[static_cast<std::size_t>(f)] >= need &&
            (b < 0 || plan.buffer_bytes[static_cast<std::size_t>(f)] < plan.buffer_bytes[static_cast<std::size_t>(b)]))
          b = f;
      if (b >= 0) std::erase(free_list, b);
    }
    if (b < 0) {
      b = static_cast<int>(plan.buffer_bytes.size());
      plan.buffer_bytes.push_back(need);
    }
    plan.buffer[i] = b;
    // Values whose last read is this step give their buffers back (unless taken in place).
    for (std::size_t k = 0; k < i; ++k)
      if (root[k] == static_cast<std::int64_t>(k) && live[k].last_use == static_cast<std::int64_t>(i) && plan.buffer[k] != b)
        free_list.push_back(plan.buffer[k]);
  }
  for (std::size_t b : plan.buffer_bytes) plan.peak_bytes += b;
  for (std::size_t i = 0; i < s.size(); ++i) {
    std::size_t at = 0;
    for (std::size_t k = 0; k <= i; ++k)
      if (root[k] == static_cast<std::int64_t>(k) && live[k].last_use > static_cast<std::int64_t>(i)) at += bytes_of(*s[k]);
    plan.live_bytes_max = std::max(plan.live_bytes_max, at);
  }
  // END SOLUTION
  plan.subgraph_bytes = subgraph_peak(s);
  return plan;
}

namespace {
/// What the concurrent planner and its checker know of a schedule: where each node stands, the
/// value owning the memory it reads (roots), per owning value the nodes reading it (directly or
/// through views), the values the outputs pin, and each node's ancestors (a bitset over steps).
struct Dag {
  std::unordered_map<const Node*, std::int64_t> step_of;
  std::vector<std::int64_t> root;
  std::vector<std::vector<std::int64_t>> readers;  // per owning step: the steps reading its memory
  std::vector<bool> pinned;                         // per owning step: an output lives in it
  std::vector<std::vector<std::uint64_t>> anc;      // per step: bit j set when step j is an ancestor
  bool is_ancestor(std::int64_t a, std::int64_t of) const {
    return (anc[static_cast<std::size_t>(of)][static_cast<std::size_t>(a) / 64] >> (a % 64)) & 1u;
  }
};
Dag dag_of(const Program& p, const std::vector<Node*>& s) {
  Dag d;
  const std::size_t n = s.size(), words = (n + 63) / 64;
  for (std::size_t i = 0; i < n; ++i) d.step_of[s[i]] = static_cast<std::int64_t>(i);
  d.root = roots(s, d.step_of);
  d.readers.resize(n);
  d.pinned.assign(n, false);
  d.anc.assign(n, std::vector<std::uint64_t>(words, 0));
  for (std::size_t i = 0; i < n; ++i) {
    for (const NodePtr& in : s[i]->inputs) {
      const auto k = static_cast<std::size_t>(d.step_of.at(in.get()));
      for (std::size_t w = 0; w < words; ++w) d.anc[i][w] |= d.anc[k][w];  // the schedule is topological
      d.anc[i][k / 64] |= std::uint64_t{1} << (k % 64);
      const std::int64_t r = d.root[k];
      if (r >= 0) {
        auto& rd = d.readers[static_cast<std::size_t>(r)];
        if (rd.empty() || rd.back() != static_cast<std::int64_t>(i)) rd.push_back(static_cast<std::int64_t>(i));
      }
    }
  }
  for (const Var& o : p.outputs) {
    const std::int64_t r = d.root[static_cast<std::size_t>(d.step_of.at(o.get()))];
    if (r >= 0) d.pinned[static_cast<std::size_t>(r)] = true;
  }
  return d;
}
/// Whether step v may write into the memory of value u in every parallel order: u is no output,
/// and u's producer and all its readers have finished before v starts; v itself may be one of the
/// readers only `in_place` (an elementwise op, which reads each item before it writes it: a
/// matmul or a concat writing into its own input would overwrite what it has still to read).
bool may_follow(const Dag& d, std::int64_t u, std::int64_t v, bool in_place) {
  if (d.pinned[static_cast<std::size_t>(u)] || !d.is_ancestor(u, v)) return false;
  for (std::int64_t r : d.readers[static_cast<std::size_t>(u)])
    if (r == v ? !in_place : !d.is_ancestor(r, v)) return false;
  return true;
}
}  // namespace

std::vector<std::int64_t> concat_slices(const Program& p, const std::vector<Node*>& s) {
  std::vector<std::int64_t> slice(s.size(), -1);
  std::unordered_map<const Node*, std::int64_t> step_of;
  std::unordered_map<const Node*, int> uses;  // input edges reading each value
  for (std::size_t i = 0; i < s.size(); ++i) {
    step_of[s[i]] = static_cast<std::int64_t>(i);
    for (const NodePtr& in : s[i]->inputs) ++uses[in.get()];
  }
  std::unordered_set<const Node*> outputs;
  for (const Var& o : p.outputs) outputs.insert(o.get());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const Node& c = *s[i];
    if (c.op != Op::Concat || c.inputs.empty() || !ops_known(c.shape)) continue;
    bool ok = true;
    for (const NodePtr& in : c.inputs)  // a concat input is no slice itself: its own inputs may be
      ok = ok && !in->is_leaf() && in->op != Op::Concat && !yields_view(*in) && in->dtype == c.dtype &&
           ops_known(in->shape) && uses[in.get()] == 1 && !outputs.count(in.get()) && step_of.count(in.get());
    if (ok)
      for (const NodePtr& in : c.inputs) slice[static_cast<std::size_t>(step_of.at(in.get()))] = static_cast<std::int64_t>(i);
  }
  return slice;
}

MemoryPlan plan_memory_concurrent(const Program& p, ConcurrentPlanOptions options) {
  MemoryPlan plan = unassigned_plan(p);
  const auto& s = plan.schedule;
  for (const Node* n : s)
    MLS_CHECK(ops_known(n->shape), "plan_memory_concurrent: node ", node_ref(p, n), " (", autodiff::op_name(n->op),
              ") has shape ", shape_str(n->shape), "; give the program concrete input shapes");
  const Dag d = dag_of(p, s);
  if (options.concat_in_place) {
    plan.slice_of = concat_slices(p, s);
    if (std::none_of(plan.slice_of.begin(), plan.slice_of.end(), [](std::int64_t c) { return c >= 0; })) plan.slice_of.clear();
  }
  // Per step: the steps that write its memory (itself; a concat in place: its slices).
  std::vector<std::vector<std::int64_t>> writers(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) writers[i].push_back(static_cast<std::int64_t>(i));
  for (std::size_t k = 0; k < plan.slice_of.size(); ++k)
    if (const std::int64_t c = plan.slice_of[k]; c >= 0) {
      auto& w = writers[static_cast<std::size_t>(c)];
      if (w.size() == 1 && w[0] == c) w.clear();
      w.push_back(static_cast<std::int64_t>(k));
    }
  std::vector<std::int64_t> last;  // per buffer: the step of the value it holds last
  for (std::size_t i = 0; i < s.size(); ++i) {
    const Node& n = *s[i];
    const auto si = static_cast<std::int64_t>(i);
    if (d.root[i] != si) continue;  // leaves and views own no memory
    const std::size_t need = value_bytes(n);
    plan.naive_bytes += need;
    if (!plan.slice_of.empty() && plan.slice_of[i] >= 0) continue;  // computed in its concat's buffer
    const std::vector<std::int64_t>& w = writers[i];
    auto free_for_all = [&](std::int64_t u) {
      return std::all_of(w.begin(), w.end(), [&](std::int64_t v) { return may_follow(d, u, v, false); });
    };
    int b = -1;
    if (autodiff::op_def(n.op).elementwise || n.op == kFusedElementwise)
      for (const NodePtr& in : n.inputs) {
        const std::int64_t k = d.step_of.at(in.get());
        if (d.root[static_cast<std::size_t>(k)] == k && value_bytes(*in) == need && in->dtype == n.dtype && may_follow(d, k, si, true)) {
          b = plan.buffer[static_cast<std::size_t>(k)];
          plan.in_place[i] = true;
          break;
        }
      }
    if (b < 0)  // best fit among the buffers whose latest value is done with in every order
      for (std::size_t f = 0; f < last.size(); ++f)
        if (plan.buffer_bytes[f] >= need && (b < 0 || plan.buffer_bytes[f] < plan.buffer_bytes[static_cast<std::size_t>(b)]) &&
            free_for_all(last[f]))
          b = static_cast<int>(f);
    if (b < 0) {
      b = static_cast<int>(plan.buffer_bytes.size());
      plan.buffer_bytes.push_back(need);
      last.push_back(si);
    }
    plan.buffer[i] = b;
    last[static_cast<std::size_t>(b)] = si;
  }
  for (std::size_t b : plan.buffer_bytes) plan.peak_bytes += b;
  // The schedule order's live bytes after each step: values produced so far and read later (or outputs).
  std::vector<std::int64_t> end(s.size(), -1);
  for (std::size_t k = 0; k < s.size(); ++k)
    if (d.root[k] == static_cast<std::int64_t>(k))
      end[k] = d.pinned[k] ? static_cast<std::int64_t>(s.size()) : d.readers[k].empty() ? -1 : d.readers[k].back();
  for (std::size_t i = 0; i < s.size(); ++i) {
    std::size_t at = 0;
    for (std::size_t k = 0; k <= i; ++k)
      if (end[k] > static_cast<std::int64_t>(i)) at += value_bytes(*s[k]);
    plan.live_bytes_max = std::max(plan.live_bytes_max, at);
  }
  plan.subgraph_bytes = subgraph_peak(s);
  return plan;
}

std::string concurrent_plan_violation(const Program& p, const MemoryPlan& plan) {
  const auto& s = plan.schedule;
  MLS_CHECK(s == p.schedule(), "concurrent_plan_violation: the plan's schedule (", s.size(),
            " nodes) is not the program's (", p.schedule().size(), " nodes): a plan of another program");
  MLS_CHECK(plan.buffer.size() == s.size() && plan.in_place.size() == s.size(), "concurrent_plan_violation: the plan has ",
            plan.buffer.size(), " buffer entries for a schedule of ", s.size(), " nodes");
  // Ancestors by depth-first search over the inputs (not the planner's bitsets).
  std::unordered_map<const Node*, std::unordered_set<const Node*>> anc;
  std::function<const std::unordered_set<const Node*>&(const Node*)> ancestors = [&](const Node* n) -> const std::unordered_set<const Node*>& {
    if (auto it = anc.find(n); it != anc.end()) return it->second;
    std::unordered_set<const Node*> a;
    for (const NodePtr& in : n->inputs) {
      a.insert(in.get());
      const auto& up = ancestors(in.get());
      a.insert(up.begin(), up.end());
    }
    return anc.emplace(n, std::move(a)).first->second;
  };
  // Concats in place: each slice an input of its concat, read by it alone, owning no buffer.
  std::unordered_map<const Node*, const Node*> concat_of;  // slice -> the concat it is written in
  std::unordered_map<const Node*, std::vector<const Node*>> slices;
  MLS_CHECK(plan.slice_of.empty() || plan.slice_of.size() == s.size(), "concurrent_plan_violation: the plan has ",
            plan.slice_of.size(), " slice entries for a schedule of ", s.size(), " nodes");
  for (std::size_t k = 0; k < plan.slice_of.size(); ++k) {
    const std::int64_t c = plan.slice_of[k];
    if (c < 0) continue;
    const Node* v = s[k];
    const Node* cat = c < static_cast<std::int64_t>(s.size()) ? s[static_cast<std::size_t>(c)] : nullptr;
    if (!cat || cat->op != Op::Concat || plan.buffer[static_cast<std::size_t>(c)] < 0 ||
        std::none_of(cat->inputs.begin(), cat->inputs.end(), [&](const NodePtr& in) { return in.get() == v; }))
      return node_ref(p, v) + " " + autodiff::op_name(v->op) + " is planned as a slice of step " + std::to_string(c) +
             ", which is not a concat with a buffer reading it";
    if (plan.buffer[k] >= 0)
      return node_ref(p, v) + " " + autodiff::op_name(v->op) + " is planned both in buffer " + std::to_string(plan.buffer[k]) +
             " and as a slice of " + node_ref(p, cat);
    int uses = 0;
    for (const Node* r : s)
      for (const NodePtr& in : r->inputs) uses += in.get() == v;
    for (const Var& o : p.outputs) uses += o.get() == v ? 2 : 0;
    if (uses != 1)
      return node_ref(p, v) + " " + autodiff::op_name(v->op) + " is planned as a slice of " + node_ref(p, cat) +
             " but is read elsewhere too (or is an output): the concat's buffer would not hold it for them";
    concat_of[v] = cat;
    slices[cat].push_back(v);
  }
  // The memory each node reads: the value it views, followed through views (a slice: its concat's).
  auto owner = [&](const Node* n) {
    while (yields_view(*n)) n = n->inputs[0].get();
    if (auto it = concat_of.find(n); it != concat_of.end()) n = it->second;
    return n;
  };
  std::unordered_set<const Node*> outputs;
  for (const Var& o : p.outputs) outputs.insert(owner(o.get()));
  std::unordered_map<int, const Node*> holder;  // buffer -> its latest value so far
  for (std::size_t i = 0; i < s.size(); ++i) {
    const int b = plan.buffer[i];
    if (b < 0) continue;
    const Node* v = s[i];
    if (auto it = holder.find(b); it != holder.end()) {
      const Node* u = it->second;
      if (outputs.count(u))
        return node_ref(p, v) + " " + autodiff::op_name(v->op) + " takes buffer " + std::to_string(b) + " of " +
               node_ref(p, u) + " " + autodiff::op_name(u->op) + ", an output of the program";
      // Who writes v's memory: v, or (a concat in place) each of its slices, before v runs.
      std::vector<const Node*> writers{v};
      if (auto sl = slices.find(v); sl != slices.end()) writers = sl->second;
      for (const Node* w : writers) {
        const std::string as = w == v ? "" : " (writing its slice of " + node_ref(p, v) + ")";
        if (!ancestors(w).count(u))
          return node_ref(p, w) + " " + autodiff::op_name(w->op) + as + " takes buffer " + std::to_string(b) + " of " +
                 node_ref(p, u) + " " + autodiff::op_name(u->op) + ", which may not be computed yet: " + node_ref(p, u) +
                 " is not an ancestor of " + node_ref(p, w);
        for (const Node* r : s) {
          if (!std::any_of(r->inputs.begin(), r->inputs.end(), [&](const NodePtr& in) { return owner(in.get()) == u; }))
            continue;
          if (r == w) {  // w reads the memory it writes: only an elementwise op in place may
            if (w == v && plan.in_place[i]) continue;
            return node_ref(p, w) + " " + autodiff::op_name(w->op) + as + " is written into the buffer of " + node_ref(p, u) +
                   " " + autodiff::op_name(u->op) + ", which it reads itself (only an elementwise op may write in place)";
          }
          if (!ancestors(w).count(r))
            return node_ref(p, w) + " " + autodiff::op_name(w->op) + as + " is written " +
                   (plan.in_place[i] ? "in place " : "") + "into the buffer of " + node_ref(p, u) + " " +
                   autodiff::op_name(u->op) + ", which " + node_ref(p, r) + " " + autodiff::op_name(r->op) +
                   " may still read: " + node_ref(p, r) + " is not an ancestor of " + node_ref(p, w);
        }
      }
    }
    holder[b] = v;
  }
  return "";
}

Program subgraph_program(const autodiff::SubGraph& sg) {
  Program q;
  std::unordered_map<const Node*, Var> map;
  for (const Var& in : sg.inputs)
    if (in.defined()) map[in.get()] = q.input(in.name(), in.shape(), in.dtype());
  for (Node* n : autodiff::topo_sort(sg.outputs)) {
    if (map.count(n)) continue;
    MLS_CHECK(n->op != Op::Placeholder, "subgraph_program: placeholder '", n->name, "' is not an input of the sub-graph");
    if (n->op == Op::Constant || n->op == Op::Variable) {
      map[n] = q.constant(n->value, n->name);
      continue;
    }
    std::vector<Var> ins;
    for (const NodePtr& in : n->inputs) ins.push_back(map.at(in.get()));
    map[n] = q.make(n->op, std::move(ins), n->attrs);
  }
  for (const Var& o : sg.outputs) q.output(map.at(o.get()));
  return q;
}

LoopMemory control_memory(const Program& p, const Node& n, std::int64_t trip_count) {
  const autodiff::ControlFlow* cf = autodiff::control_flow(n);
  MLS_CHECK(cf && (n.op == Op::Cond || n.op == Op::WhileLoop), "control_memory: node ", node_ref(p, &n), " (",
            autodiff::op_name(n.op), ") is not a cond or while_loop node of this process");
  LoopMemory m;
  const bool loop = n.op == Op::WhileLoop;
  for (std::size_t i = loop ? 1 : 0; i < cf->subs.size(); ++i)  // while: the body; cond: both branches
    m.body_bytes = std::max(m.body_bytes, plan_memory(subgraph_program(cf->subs[i])).peak_bytes);
  for (const Var& o : cf->subs[loop ? 1 : 0].outputs) {
    MLS_CHECK(ops_known(o.shape()), "control_memory: node ", node_ref(p, &n), " has a sub-graph output of shape ",
              shape_str(o.shape()), "; give the program concrete input shapes");
    m.state_bytes += bytes_of(*o.get());
  }
  if (!loop) return m;
  m.saves_states = cf->saves_states;
  m.trip_count = trip_count >= 0 ? trip_count : autodiff::last_trip_count(n);
  MLS_CHECK(m.trip_count >= 0, "control_memory: loop ", node_ref(p, &n),
            " has not run yet; give its trip count (the iterations T)");
  if (m.saves_states) m.saved_bytes = static_cast<std::size_t>(m.trip_count + 1) * m.state_bytes;
  return m;
}

std::string MemoryPlan::summary() const {
  std::ostringstream os;
  const auto in_place_count = std::count(in_place.begin(), in_place.end(), true);
  os << "plan: " << buffer_bytes.size() << " buffers, " << peak_bytes << " bytes (naive " << naive_bytes << ", "
     << (naive_bytes ? 100 * peak_bytes / naive_bytes : 0) << "%; live max " << live_bytes_max << "), " << in_place_count
     << " in place";
  if (subgraph_bytes) os << "; sub-graphs " << subgraph_bytes << " bytes, reused per iteration";
  return os.str();
}

PlannedExecutor::PlannedExecutor(const Program& p, MemoryPlan plan) : p_(&p), plan_(std::move(plan)) {
  buffers_.resize(plan_.buffer_bytes.size());
  ever_allocated_.assign(plan_.buffer_bytes.size(), false);
  // Per step, once: where its inputs are (steps) and its forward into a buffer.
  const auto& s = plan_.schedule;
  std::unordered_map<const Node*, int> step;
  for (std::size_t i = 0; i < s.size(); ++i) step[s[i]] = static_cast<int>(i);
  auto step_of = [&](const Node* n) {
    auto it = step.find(n);
    return it == step.end() ? -1 : it->second;
  };
  for (const Var& in : p.inputs) input_step_.push_back(step_of(in.get()));
  for (const Var& o : p.outputs) output_step_.push_back(step_of(o.get()));
  args_.resize(s.size());
  into_.resize(s.size(), nullptr);
  views_.resize(s.size());
  lent_.resize(plan_.buffer_bytes.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (const NodePtr& in : s[i]->inputs) args_[i].push_back(step_of(in.get()));
    if (!s[i]->is_leaf()) into_[i] = forward_into(s[i]->op);
  }
}

void PlannedExecutor::set_profiling(bool on) {
  profiling_ = on;
  step_seconds_.assign(plan_.schedule.size(), 0.0);
  copy_seconds_.assign(plan_.schedule.size(), 0.0);
}

std::vector<Tensor> PlannedExecutor::run(const std::vector<Tensor>& feeds) {
  const Program& p = *p_;
  MLS_CHECK(feeds.size() == p.inputs.size(), "run: the program has ", p.inputs.size(), " inputs, ", feeds.size(), " fed");
  const auto& s = plan_.schedule;
  std::vector<Tensor> vals(s.size());  // per step
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const Node& n = *p.inputs[i].get();
    MLS_CHECK(feeds[i].defined() && feeds[i].dtype() == n.dtype && feeds[i].shape() == n.shape, "run: input ", i, " '",
              n.name, "' expects ", n.dtype, " ", shape_str(n.shape));
    if (input_step_[i] >= 0) vals[static_cast<std::size_t>(input_step_[i])] = feeds[i];
  }
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const Node& n = *s[i];
    if (n.op == Op::Placeholder) {
      MLS_CHECK(vals[i].defined(), "run: placeholder '", n.name, "' is needed but is not an input of the program");
      continue;
    }
    if (n.op == Op::Constant || n.op == Op::Variable) {
      vals[i] = n.value;
      continue;
    }
    in.assign(n.inputs.size(), Tensor());
    for (std::size_t k = 0; k < n.inputs.size(); ++k) in[k] = vals[static_cast<std::size_t>(args_[i][k])];
    Timer timer;
    const int b = plan_.buffer[i];
    if (b < 0) {  // a view: it lives in the memory of what it views
      vals[i] = autodiff::eval_node(n, in);
      if (profiling_) step_seconds_[i] += timer.seconds();
      continue;
    }
    Tensor& buf = buffers_[static_cast<std::size_t>(b)];
    if (!buf.defined()) {
      const std::size_t bytes = plan_.buffer_bytes[static_cast<std::size_t>(b)];
      // A buffer handed out with an output that its caller has let go of since (we hold the only
      // reference: the backward consumed the saved activation) is taken back, not allocated anew
      // (no fresh pages to fault in at every step); one the caller still holds stays theirs.
      Tensor& lent = lent_[static_cast<std::size_t>(b)];
      if (lent.defined() && lent.storage().use_count() == 1) buf = std::move(lent);
      else buf = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::Bool);  // 1-byte items: raw bytes
      lent = Tensor();
      if (!ever_allocated_[static_cast<std::size_t>(b)]) allocated_ += bytes;
      ever_allocated_[static_cast<std::size_t>(b)] = true;
    }
    // The buffer viewed with the node's shape: made once per allocation of the buffer, not per run.
    Tensor& dst = views_[i];
    if (!dst.defined() || dst.storage() != buf.storage()) {
      Strides st(n.shape.size());
      std::int64_t acc = 1;
      for (std::size_t d = n.shape.size(); d-- > 0;) {
        st[d] = acc;
        acc *= n.shape[d];
      }
      dst = Tensor(buf.storage(), 0, n.shape, st, n.dtype);
    }
    // Computed in its buffer where the op can (lab 3's gemm and fused loops, matmul, the float
    // add/sub/mul/div), else computed and copied there.
    const ForwardIntoFn into = into_[i];
    if (!into || !into(in, n.attrs, dst)) {
      Tensor t = autodiff::eval_node(n, in);
      if (profiling_) step_seconds_[i] += timer.seconds(), timer.reset();
      dst.copy_(t);
      if (profiling_) copy_seconds_[i] += timer.seconds();
    } else if (profiling_) {
      step_seconds_[i] += timer.seconds();
    }
    vals[i] = dst;
  }
  // The outputs: a value in a planned buffer is handed out with that buffer, which the next run
  // allocates again (no copy; the caller owns it); anything else (an input, a constant, a view
  // of one) is copied, so that later runs cannot overwrite what was returned.
  std::unordered_map<const void*, std::size_t> buffer_of;
  for (std::size_t k = 0; k < buffers_.size(); ++k)
    if (buffers_[k].defined()) buffer_of[buffers_[k].storage().get()] = k;
  std::vector<Tensor> out;
  std::vector<bool> given(buffers_.size(), false);
  for (std::size_t j = 0; j < p.outputs.size(); ++j) {
    const Tensor& t = vals.at(static_cast<std::size_t>(output_step_[j]));
    auto it = buffer_of.find(t.storage().get());
    if (it != buffer_of.end() && !given[it->second]) {
      given[it->second] = true;
      out.push_back(t);
    } else {
      out.push_back(t.clone());
    }
  }
  for (std::size_t k = 0; k < buffers_.size(); ++k)
    if (given[k]) lent_[k] = std::move(buffers_[k]), buffers_[k] = Tensor();  // reallocated or taken back by the next run
  for (std::size_t i = 0; i < s.size(); ++i)  // the caller's alone: no view of ours keeps it
    if (plan_.buffer[i] >= 0 && given[static_cast<std::size_t>(plan_.buffer[i])]) views_[i] = Tensor();
  return out;
}

}  // namespace mls::graph_opt
