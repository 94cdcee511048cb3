// Student file of lab 3: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Operator-parallel execution (slides 003, after MXNet's dependency engine): the ready queue (a
// count of unfinished inputs per node) and an executor that runs a program's ready nodes on W
// workers with common's run_dag.
#include "mls/graph_opt/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <unordered_set>


namespace mls::graph_opt {

// ---- the ready queue (student code) ---------------------------------------------------------------
ReadyQueue::ReadyQueue(const std::vector<std::vector<int>>& deps)
    : consumers_(deps.size()), waiting_(deps.size(), 0), wave_(deps.size(), -1) {
  const int n = static_cast<int>(deps.size());
  for (int i = 0; i < n; ++i)
    for (int d : deps[static_cast<std::size_t>(i)]) {
      MLS_CHECK(d >= 0 && d < n, "ReadyQueue: task ", i, " reads task ", d, ", outside [0, ", n, ")");
      MLS_CHECK(d != i, "ReadyQueue: task ", i, " reads itself");
    }
  // BEGIN SOLUTION
  for (int i = 0; i < n; ++i)
    for (int d : deps[static_cast<std::size_t>(i)]) {
      consumers_[static_cast<std::size_t>(d)].push_back(i);
      ++waiting_[static_cast<std::size_t>(i)];
    }
  for (int i = 0; i < n; ++i)
    if (waiting_[static_cast<std::size_t>(i)] == 0) {
      queue_.push_back(i);
      wave_[static_cast<std::size_t>(i)] = 0;
    }
  // END SOLUTION
}

int ReadyQueue::take() {
  int task = -1;
  // BEGIN SOLUTION
  if (!queue_.empty()) {
    task = queue_.front();
    queue_.pop_front();
  }
  // END SOLUTION
  return task;
}

void ReadyQueue::finish(int task) {
  MLS_CHECK(task >= 0 && task < size(), "ReadyQueue::finish: task ", task, " is outside [0, ", size(), ")");
  // BEGIN SOLUTION
  ++finished_;
  for (int c : consumers_[static_cast<std::size_t>(task)])
    if (--waiting_[static_cast<std::size_t>(c)] == 0) {
      queue_.push_back(c);
      wave_[static_cast<std::size_t>(c)] = finished_;
    }
  // END SOLUTION
}

// ---- tasks ----------------------------------------------------------------------------------------
std::vector<Node*> parallel_tasks(const Program& p) {
  std::vector<Node*> tasks;
  for (Node* n : p.schedule())
    if (!n->is_leaf()) tasks.push_back(n);
  return tasks;
}

std::vector<std::vector<int>> task_deps(const std::vector<Node*>& tasks) {
  std::unordered_map<const Node*, int> task_of;
  for (std::size_t i = 0; i < tasks.size(); ++i) task_of[tasks[i]] = static_cast<int>(i);
  std::vector<std::vector<int>> deps(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i)
    for (const NodePtr& in : tasks[i]->inputs) {
      auto it = task_of.find(in.get());
      if (it != task_of.end()) deps[i].push_back(it->second);
    }
  return deps;
}

std::vector<double> bottom_levels(const std::vector<Node*>& tasks, const std::vector<std::vector<int>>& deps) {
  std::vector<double> rank(tasks.size(), 0.0);
  for (std::size_t i = tasks.size(); i-- > 0;) {  // consumers come later in schedule order
    rank[i] += estimated_seconds(node_cost(*tasks[i]));
    for (int d : deps[i]) rank[static_cast<std::size_t>(d)] = std::max(rank[static_cast<std::size_t>(d)], rank[i]);
  }
  return rank;
}

int pick_ready(const std::vector<int>& ready, const std::vector<double>& rank, int worker,
               const std::vector<std::vector<int>>& deps, const std::vector<int>& producer, const std::vector<int>& last_worker) {
  const bool affine = worker >= 0 && !deps.empty();
  auto local = [&](int t) {  // 2 per input edge `worker` computed in this run, 1 when it ran t last run
    if (!affine) return 0;
    int score = 0;
    for (int d : deps.at(static_cast<std::size_t>(t))) score += 2 * (producer.at(static_cast<std::size_t>(d)) == worker);
    return score + (last_worker.at(static_cast<std::size_t>(t)) == worker);
  };
  int best = -1;
  for (std::size_t i = 0; i < ready.size(); ++i) {
    const int t = ready[i];
    MLS_CHECK(t >= 0 && static_cast<std::size_t>(t) < rank.size(), "pick_ready: ready task ", t, " has no rank (",
              rank.size(), " ranks)");
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const int b = ready[static_cast<std::size_t>(best)];
    const double rt = rank[static_cast<std::size_t>(t)], rb = rank[static_cast<std::size_t>(b)];
    const int lt = rt == rb ? local(t) : 0, lb = rt == rb ? local(b) : 0;
    if (rt != rb ? rt > rb : lt != lb ? lt > lb : t < b) best = static_cast<int>(i);
  }
  return best;
}

namespace {
std::size_t bytes_of(const Node& n) { return value_bytes(n); }

/// The ready queue's tasks, longest path first: every task the ReadyQueue releases joins the
/// ready list, and a worker takes the one of highest rank (ties: the lower index); the queue keeps
/// counting inputs and waves. With `affinity`, a worker chooses among the tasks of the highest
/// rank (equal ranks: independent branches of one shape, such as the heads of an attention) the
/// one with the most inputs it computed itself in this run, then one it ran in the last run: so
/// the same nodes run on the same worker from run to run, and their weights, buffers and inputs
/// can stay in that core's caches (`pick_ready`).
class LongestPathFirst final : public DagScheduler {
 public:
  /// The executor's record for affinity: per task, its worker in this run (-1 until it has run)
  /// and in the last run (-1: none); null: no affinity.
  struct Affinity {
    const std::vector<std::vector<int>>* deps = nullptr;
    const std::vector<int>* producer = nullptr;
    const std::vector<int>* last_worker = nullptr;
  };
  LongestPathFirst(ReadyQueue& q, const std::vector<double>& rank, Affinity affinity) : q_(q), rank_(rank), aff_(affinity) {}
  int size() const override { return q_.size(); }
  int take() override { return take_for(-1); }
  int take_for(int worker) override {
    for (int t; (t = q_.take()) >= 0;) ready_.push_back(t);
    static const std::vector<std::vector<int>> no_deps;
    static const std::vector<int> none;
    const int at = aff_.deps ? pick_ready(ready_, rank_, worker, *aff_.deps, *aff_.producer, *aff_.last_worker)
                             : pick_ready(ready_, rank_, worker, no_deps, none, none);
    if (at < 0) return -1;
    const int t = ready_[static_cast<std::size_t>(at)];
    ready_[static_cast<std::size_t>(at)] = ready_.back();
    ready_.pop_back();
    return t;
  }
  void finish(int task) override { q_.finish(task); }
  int ready() const override { return q_.ready() + static_cast<int>(ready_.size()); }

 private:
  ReadyQueue& q_;
  const std::vector<double>& rank_;
  Affinity aff_;
  std::vector<int> ready_;
};
/// Level of each task: 0 when it reads only leaves, else 1 + the highest level among its inputs.
std::vector<int> task_levels(const std::vector<std::vector<int>>& deps) {
  std::vector<int> level(deps.size(), 0);
  for (std::size_t i = 0; i < deps.size(); ++i)  // deps point to earlier tasks (schedule order)
    for (int d : deps[i]) level[i] = std::max(level[i], level[static_cast<std::size_t>(d)] + 1);
  return level;
}

/// What the tasks of one run share: values, reader counts, the memory account.
struct RunState {
  explicit RunState(std::size_t n) : vals(n), direct(n), root_uses(n), concats(n) {}
  std::vector<Tensor> vals;                       // per task: its value, dropped after its last reader
  std::vector<std::atomic<int>> direct;           // per task: readers (edges) still to finish
  std::vector<std::atomic<int>> root_uses;        // per owning task: reads of its memory still to finish
  std::atomic<std::size_t> live{0}, peak{0};
  std::vector<Tensor> concats;                    // per concat task in place (unplanned): its value
  std::mutex concat_mutex;
  /// The value of concat task `c` computed in place: allocated (and counted live) by the first of
  /// its inputs to need it.
  Tensor concat_value(std::size_t c, const Node& cat) {
    std::lock_guard<std::mutex> lock(concat_mutex);
    if (!concats[c].defined()) {
      concats[c] = Tensor::empty(cat.shape, cat.dtype);
      add_live(value_bytes(cat));
    }
    return concats[c];
  }
  void add_live(std::size_t b) {
    const std::size_t now = live.fetch_add(b) + b;
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};
/// A dense row-major view of `shape` at the start of `buf` (a planned buffer).
Tensor dense_in(const Tensor& buf, const Node& node) {
  Strides strides(node.shape.size());
  std::int64_t acc = 1;
  for (std::size_t d = node.shape.size(); d-- > 0;) {
    strides[d] = acc;
    acc *= node.shape[d];
  }
  return Tensor(buf.storage(), 0, node.shape, strides, node.dtype);
}
}  // namespace

// ---- the executor -----------------------------------------------------------------------------------
ParallelExecutor::ParallelExecutor(const Program& p, int workers, ParallelOptions options)
    : p_(&p), workers_(workers), options_(options) {
  MLS_CHECK(workers >= 1, "ParallelExecutor: workers is ", workers, ", expected a count >= 1");
  for (Node* n : p.schedule()) {
    if (n->op == Op::Placeholder) {
      bool is_input = false;
      for (const Var& v : p.inputs) is_input |= v.get() == n;
      MLS_CHECK(is_input, "ParallelExecutor: placeholder '", n->name, "' (", node_ref(p, n),
                ") is needed by the outputs but is not an input of the program");
    }
    MLS_CHECK(n->op != Op::Assign, "ParallelExecutor: node ", node_ref(p, n),
              " is an assign (a side effect whose order matters); run it with the sequential executor");
  }
  tasks_ = parallel_tasks(p);
  deps_ = task_deps(tasks_);
  rank_ = bottom_levels(tasks_, deps_);
  level_ = task_levels(deps_);
  trace_.workers = workers_;
  // Everything a run needs that does not depend on the feeds, resolved once: where each input of
  // each task comes from, who owns the memory each value lives in, which values the outputs keep.
  const std::size_t n = tasks_.size();
  std::unordered_map<const Node*, int> task_of, input_of;
  for (std::size_t i = 0; i < n; ++i) task_of[tasks_[i]] = static_cast<int>(i);
  for (std::size_t i = 0; i < p.inputs.size(); ++i) input_of.emplace(p.inputs[i].get(), static_cast<int>(i));
  auto source = [&](const Node* v) {
    Source s;
    if (auto it = task_of.find(v); it != task_of.end()) s.task = it->second;
    else if (auto in = input_of.find(v); in != input_of.end()) s.input = in->second;
    else s.leaf = v;  // a constant or variable: its value is read at run time (a variable may change)
    return s;
  };
  args_.resize(n);
  root_.resize(n);
  readers_.assign(n, 0);
  root_reads_.assign(n, 0);
  keep_.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const Node& t = *tasks_[i];
    for (const NodePtr& in : t.inputs) args_[i].push_back(source(in.get()));
    if (!yields_view(t)) root_[i] = static_cast<int>(i);
    else {
      const int src = args_[i].empty() ? -1 : args_[i][0].task;
      root_[i] = src < 0 ? -1 : root_[static_cast<std::size_t>(src)];
    }
    for (int d : deps_[i]) {
      ++readers_[static_cast<std::size_t>(d)];
      const int r = root_[static_cast<std::size_t>(d)];
      if (r >= 0) ++root_reads_[static_cast<std::size_t>(r)];
    }
  }
  for (const Var& o : p.outputs) {
    const Source s = source(o.get());
    outputs_.push_back(s);
    if (s.task < 0) continue;
    keep_[static_cast<std::size_t>(s.task)] = true;
    if (root_[static_cast<std::size_t>(s.task)] >= 0) keep_[static_cast<std::size_t>(root_[static_cast<std::size_t>(s.task)])] = true;
  }
  if (options_.planned) {
    plan_ = plan_memory_concurrent(p, {.concat_in_place = options_.concat_in_place});
    std::unordered_map<const Node*, int> buffer_of;
    for (std::size_t i = 0; i < plan_.schedule.size(); ++i) buffer_of[plan_.schedule[i]] = plan_.buffer[i];
    for (const Node* t : tasks_) {
      task_buffer_.push_back(buffer_of.at(t));
      // An elementwise op with a broadcast input (a bias over [C, 1, 1]) is computed by lab 1's
      // kernel and copied: the fused loop's broadcast indexing is slower than the copy (15x on
      // the Inception block's bias adds).
      bool broadcast = false;
      if (autodiff::op_def(t->op).elementwise)
        for (const NodePtr& in : t->inputs) broadcast |= in->shape != t->shape;
      into_.push_back(broadcast ? nullptr : forward_into(t->op));
    }
    for (std::size_t bytes : plan_.buffer_bytes)  // 1-byte items: raw bytes
      buffers_.push_back(Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::Bool));
    // Buffers that hold an output at the end are handed out with it (no copy) and allocated
    // again at the start of the next run, as PlannedExecutor does.
    out_buffer_.assign(buffers_.size(), false);
    for (const Source& s : outputs_)
      if (s.task >= 0 && root_[static_cast<std::size_t>(s.task)] >= 0) {
        const int b = task_buffer_[static_cast<std::size_t>(root_[static_cast<std::size_t>(s.task)])];
        if (b >= 0) out_buffer_[static_cast<std::size_t>(b)] = true;
      }
  }
  // Concat in place: a task computed in its slice of a concat's value (the concat copies nothing).
  // Planned, the plan's choice (`MemoryPlan::slice_of`: it holds the concat's buffer for them);
  // otherwise the same choice, `concat_slices`.
  slice_.assign(n, Slice{});
  if (options_.concat_in_place) {
    const std::vector<Node*> schedule = options_.planned ? plan_.schedule : p.schedule();
    const std::vector<std::int64_t> slice_of = options_.planned ? plan_.slice_of : concat_slices(p, schedule);
    for (std::size_t i = 0; i < slice_of.size(); ++i) {
      if (slice_of[i] < 0) continue;
      const Node* cat = schedule[static_cast<std::size_t>(slice_of[i])];
      const std::int64_t nd = static_cast<std::int64_t>(cat->shape.size()), a = cat->attrs.i("axis");
      Slice sl{task_of.at(cat), a < 0 ? a + nd : a, 0};
      for (const NodePtr& in : cat->inputs) {
        if (in.get() == schedule[i]) break;
        sl.begin += in->shape[static_cast<std::size_t>(sl.axis)];
      }
      slice_[static_cast<std::size_t>(task_of.at(schedule[i]))] = sl;
      sliced_concat_.insert(sl.concat);
    }
  }
}

std::vector<Tensor> ParallelExecutor::run(const std::vector<Tensor>& feeds) {
  const Program& p = *p_;
  MLS_CHECK(feeds.size() == p.inputs.size(), "ParallelExecutor::run: the program has ", p.inputs.size(), " inputs, ",
            feeds.size(), " fed");
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const Node& n = *p.inputs[i].get();
    MLS_CHECK(feeds[i].defined() && feeds[i].dtype() == n.dtype && autodiff::shape_matches(n.shape, feeds[i].shape()),
              "ParallelExecutor::run: input ", i, " '", n.name, "' expects ", n.dtype, " ", shape_str(n.shape), ", fed ",
              feeds[i].defined() ? std::string(dtype_name(feeds[i].dtype())) + " " + shape_str(feeds[i].shape())
                                 : std::string("nothing"));
  }
  const std::size_t n = tasks_.size();
  RunState st(n);
  for (std::size_t i = 0; i < n; ++i) {
    st.direct[i] = readers_[i];
    st.root_uses[i] = root_reads_[i];
  }
  if (options_.planned)  // the last run handed its output buffers out with the outputs
    for (std::size_t b = 0; b < buffers_.size(); ++b)
      if (out_buffer_[b] && buffers_[b].storage().use_count() > 1)
        buffers_[b] = Tensor::empty({static_cast<std::int64_t>(plan_.buffer_bytes[b])}, DType::Bool);
  trace_ = ScheduleTrace{};
  trace_.workers = workers_;
  trace_.threads = num_threads();
  trace_.events.resize(n);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto us_since = [&](clock::time_point t) { return std::chrono::duration<double, std::micro>(t - t0).count(); };
  auto value = [&](const Source& s) -> const Tensor& {
    return s.task >= 0 ? st.vals[static_cast<std::size_t>(s.task)] : s.input >= 0 ? feeds[static_cast<std::size_t>(s.input)] : s.leaf->value;
  };

  ReadyQueue queue(deps_);
  std::vector<int> producer(n, -1);  // per task: the worker that ran it in this run
  if (last_worker_.size() != n) last_worker_.assign(n, -1);
  LongestPathFirst ranked(queue, rank_,
                          options_.affinity ? LongestPathFirst::Affinity{&deps_, &producer, &last_worker_} : LongestPathFirst::Affinity{});
  DagScheduler& sched = options_.longest_path_first ? static_cast<DagScheduler&>(ranked) : queue;
  std::vector<std::vector<Tensor>> scratch(static_cast<std::size_t>(workers_));  // per worker: a task's inputs
  std::mutex help_mutex;
  auto on_help = [&](const DagHelp& h) {  // chunks an idle worker ran for another's node: traced
    std::lock_guard<std::mutex> lock(help_mutex);
    trace_.helped.push_back(HelpEvent{h.worker, h.task, us_since(h.start), us_since(h.end)});
  };
  run_dag(sched, workers_, [&](const TaskContext& c) {
    const auto ti = static_cast<std::size_t>(c.task);
    const Node& node = *tasks_[ti];
    std::vector<Tensor>& in = scratch[static_cast<std::size_t>(c.worker)];
    in.clear();
    for (const Source& s : args_[ti]) in.push_back(value(s));
    TraceEvent& ev = trace_.events[ti];
    ev.start_us = us_since(clock::now());
    Tensor out;
    const Slice& sl = slice_[ti];
    if (sl.concat >= 0) {
      // Concat in place: computed in its slice of the concat's value (its planned buffer, or one
      // allocated by the first of its inputs to run): straight in where the slice is contiguous
      // and the op has a forward_into, else computed and copied there.
      const auto ci = static_cast<std::size_t>(sl.concat);
      const Tensor whole = options_.planned ? dense_in(buffers_[static_cast<std::size_t>(task_buffer_[ci])], *tasks_[ci])
                                            : st.concat_value(ci, *tasks_[ci]);
      out = whole.slice(sl.axis, sl.begin, sl.begin + node.shape[static_cast<std::size_t>(sl.axis)]);
      const ForwardIntoFn into = options_.planned ? into_[ti] : nullptr;
      if (!into || !out.is_contiguous() || !into(in, node.attrs, out)) out.copy_(autodiff::op_def(node.op).forward(in, node.attrs));
    } else if (sliced_concat_.count(c.task)) {
      // A concat whose inputs were computed in their slices of it: nothing left to do.
      out = options_.planned ? dense_in(buffers_[static_cast<std::size_t>(task_buffer_[ti])], node) : st.concat_value(ti, node);
    } else if (options_.planned && task_buffer_[ti] >= 0) {
      // Computed in its buffer where the op can (PlannedExecutor's forward_into: matmul, gemm,
      // fused loops, concat, the float add/sub/mul/div), else computed and copied there.
      out = dense_in(buffers_[static_cast<std::size_t>(task_buffer_[ti])], node);
      const ForwardIntoFn into = into_[ti];
      if (!into || !into(in, node.attrs, out)) out.copy_(autodiff::op_def(node.op).forward(in, node.attrs));
    } else {
      out = autodiff::op_def(node.op).forward(in, node.attrs);  // the sequential executor's code
    }
    ev.end_us = us_since(clock::now());
    ev.node = &node;
    ev.task = c.task;
    ev.worker = c.worker;
    ev.intra_threads = c.intra_threads;
    ev.level = level_[ti];
    producer[ti] = c.worker;  // read by take_for only once this task has finished (under run_dag's lock)
    in.clear();
    st.vals[ti] = std::move(out);
    // Memory it owns from now on (a concat in place was counted when its value was allocated; a
    // value in its slice of one owns none).
    if (root_[ti] == c.task && sl.concat < 0 && !sliced_concat_.count(c.task)) st.add_live(bytes_of(node));
    // Readers done: drop values nobody reads any more, and give back memory nothing reads.
    for (int d : deps_[ti]) {
      const auto di = static_cast<std::size_t>(d);
      if (st.direct[di].fetch_sub(1) == 1 && !keep_[di]) st.vals[di] = Tensor();
      const int r = root_[di];
      if (r >= 0 && st.root_uses[static_cast<std::size_t>(r)].fetch_sub(1) == 1 && !keep_[static_cast<std::size_t>(r)] &&
          slice_[static_cast<std::size_t>(r)].concat < 0)
        st.live.fetch_sub(bytes_of(*tasks_[static_cast<std::size_t>(r)]));
    }
  }, on_help);
  trace_.wall_us = us_since(clock::now());
  trace_.peak_bytes = options_.planned ? plan_.peak_bytes : st.peak.load();
  if (options_.search_trials > 0 && search_.trials == 0) {
    // A profile-guided schedule: each node's fastest time over the first runs (the first alone is
    // cold and noisy), then priorities searched on the simulator with them.
    constexpr int kProfileRuns = 3;
    if (profile_.size() != n) profile_.assign(n, 1e300);
    for (std::size_t i = 0; i < n; ++i)
      profile_[i] = std::min(profile_[i], std::max(0.0, trace_.events[i].end_us - trace_.events[i].start_us) * 1e-6);
    if (++profiled_runs_ >= kProfileRuns) {
      search_ = search_schedule(deps_, profile_, workers_, options_.search_trials);
      rank_ = search_.priority;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    TraceEvent& e = trace_.events[i];
    e.wave = queue.ready_wave()[i];
    last_worker_[i] = e.worker;
    e.ready_us = 0;  // when its last input finished (0: it reads only leaves)
    for (int d : deps_[i]) e.ready_us = std::max(e.ready_us, trace_.events[static_cast<std::size_t>(d)].end_us);
  }

  std::vector<Tensor> out;
  out.reserve(p.outputs.size());
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    const Source& s = outputs_[k];
    if (s.task < 0) out.push_back(value(s));
    else if (options_.planned && (root_[static_cast<std::size_t>(s.task)] < 0 || task_buffer_[static_cast<std::size_t>(root_[static_cast<std::size_t>(s.task)])] < 0))
      out.push_back(st.vals[static_cast<std::size_t>(s.task)].clone());  // a view of an input or constant
    else out.push_back(st.vals[static_cast<std::size_t>(s.task)]);  // planned: its buffer is allocated again next run
  }
  return out;
}

}  // namespace mls::graph_opt
