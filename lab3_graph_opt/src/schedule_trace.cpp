// The parallel executor's schedule: levels, the critical path, a text summary and an SVG picture
// (one lane per worker) of a run.
#include <algorithm>
#include <cmath>
#include <queue>
#include <cstdio>
#include <map>
#include <sstream>
#include <unordered_map>

#include "mls/common/rng.hpp"
#include "mls/common/svg.hpp"
#include "mls/graph_opt/parallel.hpp"

namespace mls::graph_opt {

namespace {
std::unordered_map<const Node*, std::size_t> index_of(const Program& p) {
  std::unordered_map<const Node*, std::size_t> idx;
  for (std::size_t i = 0; i < p.graph->nodes().size(); ++i) idx[p.graph->nodes()[i].get()] = i;
  return idx;
}
/// "%5 add 'B'" (the name only when the node has one).
std::string describe(const std::unordered_map<const Node*, std::size_t>& idx, const Node& n) {
  auto it = idx.find(&n);
  std::string s = it == idx.end() ? "%?" : "%" + std::to_string(it->second);
  s += " ";
  s += autodiff::op_name(n.op);
  if (!n.name.empty()) s += " '" + n.name + "'";
  return s;
}
std::string fixed(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
/// A time given in microseconds: "12.5 us" below a millisecond, else "3.142 ms".
std::string time_str(double us) { return us < 1000 ? fixed(us, 1) + " us" : fixed(us / 1e3) + " ms"; }
/// A colour per kind of op: products, convolutions, elementwise, the rest.
const char* fill_of(const Node& n) {
  if (n.op == Op::Matmul || n.op == kGemm) return "#9ecae1";
  if (n.op == Op::Conv2d || n.op == kConvBias) return "#fdae6b";
  if (autodiff::op_def(n.op).elementwise || n.op == kFusedElementwise) return "#a1d99b";
  return "#d9d9d9";
}
}  // namespace

std::vector<std::vector<Node*>> schedule_levels(const Program& p) {
  const std::vector<Node*> tasks = parallel_tasks(p);
  const std::vector<std::vector<int>> deps = task_deps(tasks);
  std::vector<int> level(tasks.size(), 0);
  std::vector<std::vector<Node*>> levels;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    for (int d : deps[i]) level[i] = std::max(level[i], level[static_cast<std::size_t>(d)] + 1);
    const auto l = static_cast<std::size_t>(level[i]);
    if (levels.size() <= l) levels.resize(l + 1);
    levels[l].push_back(tasks[i]);
  }
  return levels;
}

double estimated_seconds(const NodeCost& c, double flops_per_s, double bytes_per_s) {
  MLS_CHECK(flops_per_s > 0 && bytes_per_s > 0, "estimated_seconds: rates must be > 0, got ", flops_per_s, " flop/s and ",
            bytes_per_s, " B/s");
  return std::max(c.flops / flops_per_s, (c.bytes_read + c.bytes_written) / bytes_per_s);
}

CriticalPath critical_path(const Program& p) {
  const std::vector<Node*> tasks = parallel_tasks(p);
  const std::vector<std::vector<int>> deps = task_deps(tasks);
  const std::size_t n = tasks.size();
  CriticalPath cp;
  std::vector<double> best(n, 0.0);  // costliest chain ending at task i, i included
  std::vector<int> pred(n, -1);
  std::vector<std::size_t> depth(n, 1);
  int last = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const double own = estimated_seconds(node_cost(*tasks[i]));
    cp.total_seconds += own;
    for (int d : deps[i]) {
      const auto di = static_cast<std::size_t>(d);
      if (pred[i] < 0 || best[di] > best[static_cast<std::size_t>(pred[i])]) pred[i] = d;
      depth[i] = std::max(depth[i], depth[di] + 1);
    }
    best[i] = own + (pred[i] >= 0 ? best[static_cast<std::size_t>(pred[i])] : 0.0);
    cp.depth = std::max(cp.depth, depth[i]);
    if (last < 0 || best[i] > best[static_cast<std::size_t>(last)]) last = static_cast<int>(i);
  }
  if (last < 0) return cp;
  cp.seconds = best[static_cast<std::size_t>(last)];
  for (int i = last; i >= 0; i = pred[static_cast<std::size_t>(i)]) cp.nodes.push_back(tasks[static_cast<std::size_t>(i)]);
  std::reverse(cp.nodes.begin(), cp.nodes.end());
  return cp;
}

std::string trace_events_text(const Program& p, const ScheduleTrace& t) {
  const auto idx = index_of(p);
  std::vector<const TraceEvent*> order;
  for (const TraceEvent& e : t.events)
    if (e.node) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const TraceEvent* a, const TraceEvent* b) { return a->start_us < b->start_us; });
  // Each line with its start time, nodes and stretches of help merged in start order.
  std::vector<std::pair<double, std::string>> lines;
  for (const TraceEvent* e : order) {
    std::ostringstream os;
    os << "worker " << e->worker << "  " << fixed(e->start_us, 1) << " .. " << fixed(e->end_us, 1) << " us  ("
       << fixed(e->end_us - e->start_us, 1) << " us, waited " << fixed(std::max(0.0, e->start_us - e->ready_us), 1)
       << " us after ready)  budget " << e->intra_threads << "  " << describe(idx, *e->node) << "\n";
    lines.emplace_back(e->start_us, os.str());
  }
  for (const HelpEvent& h : t.helped) {
    if (h.task < 0 || static_cast<std::size_t>(h.task) >= t.events.size() || !t.events[static_cast<std::size_t>(h.task)].node) continue;
    std::ostringstream os;
    os << "worker " << h.worker << "  " << fixed(h.start_us, 1) << " .. " << fixed(h.end_us, 1) << " us  ("
       << fixed(h.end_us - h.start_us, 1) << " us)  helped  " << describe(idx, *t.events[static_cast<std::size_t>(h.task)].node) << "\n";
    lines.emplace_back(h.start_us, os.str());
  }
  std::stable_sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& l : lines) out += l.second;
  return out;
}

namespace {
void check_schedule_input(const std::vector<std::vector<int>>& deps, const std::vector<double>& seconds, int workers,
                          const char* fn) {
  MLS_CHECK(workers >= 1, fn, ": workers is ", workers, ", expected a count >= 1");
  MLS_CHECK(seconds.size() == deps.size(), fn, ": ", deps.size(), " tasks but ", seconds.size(), " durations");
  for (std::size_t i = 0; i < deps.size(); ++i) {
    MLS_CHECK(seconds[i] >= 0, fn, ": task ", i, " lasts ", seconds[i], " s, expected a duration >= 0");
    for (int d : deps[i])
      MLS_CHECK(d >= 0 && static_cast<std::size_t>(d) < i, fn, ": task ", i, " reads task ", d, ", expected an earlier task");
  }
}
}  // namespace

double simulate_schedule(const std::vector<std::vector<int>>& deps, const std::vector<double>& seconds,
                         const std::vector<double>& priority, int workers) {
  check_schedule_input(deps, seconds, workers, "simulate_schedule");
  MLS_CHECK(priority.size() == deps.size(), "simulate_schedule: ", deps.size(), " tasks but ", priority.size(), " priorities");
  const std::size_t n = deps.size();
  std::vector<std::vector<int>> consumers(n);
  std::vector<int> waiting(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (int d : deps[i]) consumers[static_cast<std::size_t>(d)].push_back(static_cast<int>(i)), ++waiting[i];
  auto higher = [&](int a, int b) {  // a before b: higher priority, then lower index
    const double pa = priority[static_cast<std::size_t>(a)], pb = priority[static_cast<std::size_t>(b)];
    return pa != pb ? pa > pb : a < b;
  };
  auto cmp = [&](int a, int b) { return higher(b, a); };
  std::priority_queue<int, std::vector<int>, decltype(cmp)> ready(cmp);
  for (std::size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) ready.push(static_cast<int>(i));
  using Running = std::pair<double, int>;  // (end time, task)
  std::priority_queue<Running, std::vector<Running>, std::greater<Running>> running;
  double now = 0, makespan = 0;
  int free = workers;
  std::size_t done = 0;
  while (done < n) {
    while (free > 0 && !ready.empty()) {
      const int t = ready.top();
      ready.pop();
      running.push({now + seconds[static_cast<std::size_t>(t)], t});
      --free;
    }
    MLS_CHECK(!running.empty(), "simulate_schedule: ", n - done, " tasks can never start");
    const auto [end, t] = running.top();
    running.pop();
    now = end;
    makespan = std::max(makespan, end);
    ++free;
    ++done;
    for (int c : consumers[static_cast<std::size_t>(t)])
      if (--waiting[static_cast<std::size_t>(c)] == 0) ready.push(c);
  }
  return makespan;
}

ScheduleSearch search_schedule(const std::vector<std::vector<int>>& deps, const std::vector<double>& seconds, int workers,
                               int trials, std::uint64_t seed) {
  check_schedule_input(deps, seconds, workers, "search_schedule");
  MLS_CHECK(trials >= 0, "search_schedule: trials is ", trials, ", expected a count >= 0");
  const std::size_t n = deps.size();
  std::vector<double> bottom(seconds);  // each task's time plus its costliest chain of consumers
  for (std::size_t i = n; i-- > 0;)
    for (int d : deps[i]) bottom[static_cast<std::size_t>(d)] = std::max(bottom[static_cast<std::size_t>(d)], seconds[static_cast<std::size_t>(d)] + bottom[i]);
  ScheduleSearch s;
  s.priority = bottom;
  s.base_makespan = s.best_makespan = simulate_schedule(deps, seconds, bottom, workers);
  s.trials = trials;
  Rng rng(seed, "lab3-schedule-search");
  std::vector<double> p(n);
  for (int k = 0; k < trials; ++k) {
    if (k % 4 == 3) {
      for (double& v : p) v = rng.uniform_double();  // any order at all
    } else {
      const double spread = 0.1 + 0.3 * (k % 4);       // bottom levels scaled by up to e^(+-spread)
      for (std::size_t i = 0; i < n; ++i) p[i] = bottom[i] * std::exp(rng.uniform(-spread, spread));
    }
    const double m = simulate_schedule(deps, seconds, p, workers);
    if (m < s.best_makespan) s.best_makespan = m, s.priority = p;
  }
  return s;
}

std::string levels_text(const Program& p) {
  const auto idx = index_of(p);
  std::ostringstream os;
  const auto levels = schedule_levels(p);
  for (std::size_t l = 0; l < levels.size(); ++l) {
    os << "level " << l << " (" << levels[l].size() << "):";
    for (std::size_t i = 0; i < levels[l].size(); ++i) os << (i ? ", " : " ") << describe(idx, *levels[l][i]);
    os << "\n";
  }
  return os.str();
}

double TraceBreakdown::dispatch_total_us() const {
  double s = 0;
  for (double d : dispatch_us) s += d;
  return s;
}

TraceBreakdown trace_breakdown(const ScheduleTrace& t) {
  const auto workers = static_cast<std::size_t>(std::max(1, t.workers));
  TraceBreakdown b;
  b.busy_us.assign(workers, 0.0);
  b.dispatch_us.assign(workers, 0.0);
  b.idle_us.assign(workers, 0.0);
  std::vector<const TraceEvent*> order;
  for (const TraceEvent& e : t.events)
    if (e.worker >= 0 && static_cast<std::size_t>(e.worker) < workers) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const TraceEvent* a, const TraceEvent* c) { return a->start_us < c->start_us; });
  std::vector<double> free_at(workers, 0.0);  // when each worker finished its previous node
  for (const TraceEvent* e : order) {
    const auto w = static_cast<std::size_t>(e->worker);
    const double from = std::max(e->ready_us, free_at[w]);
    b.dispatch_us[w] += std::max(0.0, e->start_us - from);
    b.busy_us[w] += e->end_us - e->start_us;
    free_at[w] = e->end_us;
  }
  for (std::size_t w = 0; w < workers; ++w) b.idle_us[w] = std::max(0.0, t.wall_us - b.busy_us[w] - b.dispatch_us[w]);
  b.helped_us.assign(workers, 0.0);
  for (const HelpEvent& h : t.helped)
    if (h.worker >= 0 && static_cast<std::size_t>(h.worker) < workers)
      b.helped_us[static_cast<std::size_t>(h.worker)] += std::max(0.0, h.end_us - h.start_us);
  // How many nodes run at each moment: a sweep over the starts and ends.
  std::vector<std::pair<double, int>> edges;
  for (const TraceEvent* e : order) edges.push_back({e->start_us, +1}), edges.push_back({e->end_us, -1});
  edges.push_back({t.wall_us, 0});
  std::sort(edges.begin(), edges.end());
  double at = 0;
  int running = 0;
  for (const auto& [time, step] : edges) {
    const double span = std::max(0.0, time - at);
    (running == 0 ? b.none_us : running == 1 ? b.one_us : b.several_us) += span;
    at = std::max(at, time);
    running += step;
  }
  return b;
}

std::string trace_summary(const Program& p, const ScheduleTrace& t) {
  const auto idx = index_of(p);
  const auto levels = schedule_levels(p);
  std::size_t widest = 0;
  for (const auto& l : levels) widest = std::max(widest, l.size());
  const CriticalPath cp = critical_path(p);
  std::ostringstream os;
  int lo = 0, hi = 0;
  for (const TraceEvent& e : t.events) {
    lo = lo ? std::min(lo, e.intra_threads) : e.intra_threads;
    hi = std::max(hi, e.intra_threads);
  }
  os << "parallel run: " << t.events.size() << " nodes on " << t.workers << " workers, " << t.threads << " threads (intra-op budget "
     << lo << (hi != lo ? "-" + std::to_string(hi) : "") << " per node)\n";
  os << "levels: " << levels.size() << " (widest " << widest << " nodes)\n";
  os << "critical path: " << cp.nodes.size() << " nodes, " << time_str(cp.seconds * 1e6) << " estimated; longest chain "
     << cp.depth << " nodes; total work " << time_str(cp.total_seconds * 1e6) << " estimated; parallelism "
     << fixed(cp.parallelism(), 2) << "\n";
  os << "  path:";
  for (const Node* n : cp.nodes) os << " " << describe(idx, *n);
  os << "\n";
  std::vector<double> busy(static_cast<std::size_t>(std::max(1, t.workers)), 0.0);
  std::vector<int> count(busy.size(), 0);
  double total = 0;
  for (const TraceEvent& e : t.events) {
    if (e.worker < 0 || e.worker >= static_cast<int>(busy.size())) continue;
    busy[static_cast<std::size_t>(e.worker)] += e.end_us - e.start_us;
    ++count[static_cast<std::size_t>(e.worker)];
    total += e.end_us - e.start_us;
  }
  os << "measured: wall " << time_str(t.wall_us) << ", busy " << time_str(total) << " (";
  for (std::size_t w = 0; w < busy.size(); ++w)
    os << (w ? ", " : "") << "worker " << w << ": " << time_str(busy[w]) << " in " << count[w] << " nodes";
  os << "), overlap " << fixed(t.wall_us > 0 ? total / t.wall_us : 0.0, 2) << " (busy / wall)\n";
  const TraceBreakdown b = trace_breakdown(t);
  double idle = 0;
  for (double v : b.idle_us) idle += v;
  os << "not busy: " << time_str(b.dispatch_total_us()) << " a ready node waited for its free worker (dispatch: "
     << time_str(t.events.empty() ? 0.0 : b.dispatch_total_us() / static_cast<double>(t.events.size()))
     << " a node), " << time_str(idle) << " a worker had nothing ready; nodes running at once: none "
     << time_str(b.none_us) << ", one " << time_str(b.one_us) << ", several " << time_str(b.several_us) << "\n";
  if (!t.helped.empty()) {
    os << "helped: idle workers ran chunks of another's node for";
    for (std::size_t w = 0; w < b.helped_us.size(); ++w) os << (w ? "," : "") << " worker " << w << " " << time_str(b.helped_us[w]);
    os << " (" << t.helped.size() << " stretches)\n";
  }
  os << "peak bytes of intermediate values: " << t.peak_bytes << "\n";
  return os.str();
}

std::string trace_svg(const Program& p, const ScheduleTrace& t) {
  const auto idx = index_of(p);
  const int lanes = std::max(1, t.workers);
  const double left = 80, right = 20, top = 40, lane_h = 34, width = 960;
  const double height = top + lanes * lane_h + 70;
  svg::Document d(width, height);
  const double wall = std::max(t.wall_us, 1.0);
  const svg::Scale x(0, wall / 1e3, left, width - right);  // milliseconds
  d.text(left, 22,
         "parallel schedule: " + std::to_string(t.events.size()) + " nodes on " + std::to_string(t.workers) + " workers, " +
             std::to_string(t.threads) + " threads, wall " + time_str(t.wall_us),
         {.size = 14, .weight = "bold"});
  for (int w = 0; w < lanes; ++w) {
    const double y = top + w * lane_h;
    d.rect(left, y, width - right - left, lane_h - 2, {.fill = w % 2 ? "#ffffff" : "#f4f6fa"});
    d.text(left - 8, y + lane_h / 2 + 4, "worker " + std::to_string(w), {.anchor = svg::Anchor::End});
  }
  for (const TraceEvent& e : t.events) {
    if (e.node == nullptr) continue;
    const double x0 = x(e.start_us / 1e3), x1 = x(std::max(e.end_us, e.start_us) / 1e3);
    const double y = top + e.worker * lane_h + 4;
    const std::string what = describe(idx, *e.node);
    const std::string tip = what + "  " + shape_str(e.node->shape) + "\n" + time_str(e.end_us - e.start_us) + " on worker " +
                            std::to_string(e.worker) + " with " + std::to_string(e.intra_threads) + " thread(s); level " + std::to_string(e.level) + ", ready wave " + std::to_string(e.wave);
    d.rect(x0, y, std::max(x1 - x0, 1.0), lane_h - 10,
           {.fill = fill_of(*e.node), .stroke = "#1c3d6e", .stroke_width = 0.6, .title = tip});
    // The label inside the box when it fits (about 6.5 pixels a character at 11 px).
    const std::string label = what.substr(0, what.find(' ', what.find(' ') + 1));  // "%5 add"
    const auto fits = static_cast<std::size_t>((x1 - x0 - 4) / 6.5);
    if (fits >= 2) d.text(x0 + 2, y + lane_h / 2, label.substr(0, fits), {.size = 11});
  }
  for (const HelpEvent& h : t.helped) {
    if (h.worker < 0 || h.worker >= lanes || h.task < 0 || static_cast<std::size_t>(h.task) >= t.events.size()) continue;
    const TraceEvent& e = t.events[static_cast<std::size_t>(h.task)];
    if (e.node == nullptr) continue;
    const double x0 = x(h.start_us / 1e3), x1 = x(std::max(h.end_us, h.start_us) / 1e3);
    const double y = top + h.worker * lane_h + 4;
    const std::string what = describe(idx, *e.node);
    d.rect(x0, y, std::max(x1 - x0, 1.0), lane_h - 10,
           {.fill = "#ffffff", .stroke = "#1c3d6e", .stroke_width = 0.8, .dash = "3,2",
            .title = "chunks of " + what + " run by idle worker " + std::to_string(h.worker) + ": " + time_str(h.end_us - h.start_us)});
    const std::string label = "+" + what.substr(0, what.find(' '));  // "+%99"
    const auto fits = static_cast<std::size_t>((x1 - x0 - 4) / 6.5);
    if (fits >= 2) d.text(x0 + 2, y + lane_h / 2, label.substr(0, fits), {.size = 11});
  }
  const double axis_y = top + lanes * lane_h + 4;
  d.x_axis(x, axis_y, {.title = "time (ms)"});
  d.legend(left, axis_y + 52,
           {{"matmul / gemm", "#9ecae1", svg::LegendEntry::Box},
            {"conv", "#fdae6b", svg::LegendEntry::Box},
            {"elementwise", "#a1d99b", svg::LegendEntry::Box},
            {"other", "#d9d9d9", svg::LegendEntry::Box},
            {"helped (dashed)", "#ffffff", svg::LegendEntry::Box}},
           {.horizontal = true, .row = 120});
  return d.str();
}

}  // namespace mls::graph_opt
