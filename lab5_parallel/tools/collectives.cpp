// mls-collectives: the collectives' costs, counted and modelled, and a picture of their messages.
//
//   mls-collectives table [--ranks 8] [--sizes 1K,64K,1M,16M] [--collective allreduce|all]
//                         [--model cost.json | --alpha A --beta B --gamma G]
//       per algorithm and size, on simulated ranks: messages and bytes sent by the busiest rank,
//       steps, the simulated α-β-γ time, the closed-form prediction (cost.hpp), and which
//       algorithm the model picks at each size (the crossover, as MPI libraries choose).
//   mls-collectives trace --svg trace.svg [--collective allreduce] [--algo ring] [--ranks 4]
//                         [--bytes 4096]
//       every message of one collective on a timeline: one lane per rank, an arrow per message
//       from (send time, source) to (arrival, destination), labelled with its round.
//   mls-collectives calibrate [--out cost.json]
//       measures α (small-message latency), β (seconds per byte) and γ (seconds per reduced
//       float) on this machine: through MPI when started by mpirun (-np 2), else between threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"
#include "mls/common/file.hpp"
#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/cost.hpp"
#include "mls/parallel/sim.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::parallel;

namespace {

const std::vector<std::string> kCollectives = {"allreduce", "broadcast", "reduce", "allgather",
                                               "reduce_scatter", "all_to_all", "gather", "scatter"};

std::int64_t parse_bytes(std::string s) {
  MLS_CHECK(!s.empty(), "mls-collectives: empty size");
  std::int64_t mult = 1;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? 1024 : last == 'M' ? 1024 * 1024 : 1024LL * 1024 * 1024;
    s.pop_back();
  }
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    MLS_CHECK(used == s.size() && v >= 0, "bad");
    return v * mult;
  } catch (const std::exception&) {
    fail("mls-collectives: cannot read the size '", s, "' (expected e.g. 4096, 64K, 16M)");
  }
}

std::string human(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.4g MiB", bytes / (1024.0 * 1024));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.4g KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

std::string micros(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s * 1e6);
  return buf;
}

/// Runs one collective of `bytes` bytes of float32 with `algo` on every rank of `c`.
void run_collective(Communicator& c, const std::string& coll, const std::string& algo, std::int64_t bytes) {
  const int n = c.size();
  const std::int64_t elems = bytes / 4, per = elems / n;
  const Algo a = parse_algo(algo);
  if (coll == "allreduce") {
    Tensor t = Tensor::ones({elems});
    c.allreduce(t, ReduceOp::Sum, a);
  } else if (coll == "broadcast") {
    Tensor t = Tensor::ones({elems});
    c.broadcast(t, 0, a);
  } else if (coll == "reduce") {
    Tensor t = Tensor::ones({elems});
    c.reduce(t, ReduceOp::Sum, 0, a);
  } else if (coll == "allgather") {
    (void)c.allgather(Tensor::ones({per}), a);
  } else if (coll == "reduce_scatter") {
    (void)c.reduce_scatter(Tensor::ones({per * n}), ReduceOp::Sum, a);
  } else if (coll == "all_to_all") {
    (void)c.all_to_all(Tensor::ones({n, per}));
  } else if (coll == "gather") {
    (void)c.gather(Tensor::ones({per}), 0);
  } else if (coll == "scatter") {
    (void)c.scatter(Tensor::ones({n, per}), 0);
  } else {
    fail("mls-collectives: unknown collective '", coll, "'");
  }
}

struct Measured {
  std::int64_t messages = 0, bytes = 0, steps = 0;
  double modelled = 0, wall = 0;
  std::vector<std::vector<TraceEvent>> trace;
};

Measured simulate(const std::string& coll, const std::string& algo, int n, std::int64_t bytes, const CostModel& m,
                  bool trace) {
  SimOptions o;
  o.cost = m;
  o.trace = trace;
  SimReport rep = run_simulated(n, [&](Communicator& c) { run_collective(c, coll, algo, bytes); }, o);
  Measured out;
  for (const auto& t : rep.traffic) {
    out.messages = std::max(out.messages, t.total.messages_sent);
    out.bytes = std::max(out.bytes, t.total.bytes_sent);
    out.steps = std::max(out.steps, t.total.steps);
  }
  out.modelled = rep.max_modelled_seconds();
  out.wall = rep.wall_seconds;
  out.trace = rep.trace;
  return out;
}

// ---- table ------------------------------------------------------------------------------------

int cmd_table(int n, const std::string& sizes_arg, const std::string& which, const CostModel& m) {
  std::vector<std::int64_t> sizes;
  std::stringstream ss(sizes_arg);
  for (std::string item; std::getline(ss, item, ',');) sizes.push_back(parse_bytes(item));
  std::vector<std::string> colls = which == "all" ? kCollectives : std::vector<std::string>{which};
  std::printf("α-β-γ model: alpha = %.3g s, beta = %.3g s/B (%.3g GB/s), gamma = %.3g s/element; %d simulated ranks\n",
              m.alpha, m.beta, m.beta > 0 ? 1e-9 / m.beta : 0.0, m.gamma, n);
  std::printf("bytes: the whole collective's tensor (allgather/gather: the result; all_to_all: one rank's buffer)\n\n");
  for (const auto& coll : colls) {
    std::printf("%-15s %-19s %10s %9s %12s %6s %13s %13s %6s\n", coll.c_str(), "algorithm", "bytes", "msgs/rank",
                "bytes/rank", "steps", "simulated us", "formula us", "pick");
    for (std::int64_t b : sizes) {
      const std::string pick = cheapest(m, coll, n, b);
      for (const auto& algo : algorithms_of(coll)) {
        Measured r = simulate(coll, algo, n, b, m, false);
        CostEstimate e = estimate(m, coll, algo, n, b);
        std::printf("%-15s %-19s %10s %9lld %12s %6lld %13s %13s %6s\n", "", algo.c_str(), human(static_cast<double>(b)).c_str(),
                    static_cast<long long>(r.messages), human(static_cast<double>(r.bytes)).c_str(),
                    static_cast<long long>(r.steps), micros(r.modelled).c_str(), micros(e.seconds).c_str(),
                    algo == pick ? "<--" : "");
      }
    }
    std::printf("\n");
  }
  if (which == "allreduce" || which == "all") {
    // The crossover: where the model switches from the latency-bound to the bandwidth-bound algorithm.
    std::string prev;
    std::printf("allreduce on %d ranks, the model's pick by size:", n);
    for (std::int64_t b = 64; b <= (256LL << 20); b *= 2) {
      const std::string pick = cheapest(m, "allreduce", n, b);
      if (pick != prev) std::printf("  from %s: %s", human(static_cast<double>(b)).c_str(), pick.c_str());
      prev = pick;
    }
    std::printf("\n");
  }
  return 0;
}

// ---- trace ------------------------------------------------------------------------------------

/// One lane per rank (time runs left to right), an arrow per message labelled with its round.
std::string trace_svg(const std::vector<TraceEvent>& ev, int n, const std::string& title, double t_end) {
  const double left = 90, right = 40, top = 70, lane = 70, width = 1000;
  const double plot = width - left - right, height = top + lane * (n - 1) + 70;
  if (t_end <= 0) t_end = 1e-9;
  const svg::Scale x(0, t_end, left, left + plot);
  auto y = [&](int r) { return top + lane * r; };
  const char* kBlue = "#1f5fa8";
  svg::Document d(width, height);
  d.arrowhead("arrow", kBlue);
  d.text(left, 24, title, {.size = 15, .weight = "bold"});
  d.text(left, 44, "time runs left to right (α-β-γ model); an arrow is one message, labelled with its round",
         {.fill = "#555"});
  for (int r = 0; r < n; ++r) {
    d.line(left, y(r), left + plot, y(r), {.stroke = "#999", .stroke_width = 1.5});
    d.text(left - 12, y(r) + 4, "rank " + std::to_string(r), {.anchor = svg::Anchor::End, .weight = "bold"});
  }
  svg::AxisStyle axis{.label = [](double t) { return micros(t) + " us"; }, .tick_out = 4, .tick_in = 4,
                      .colour = "#333"};
  for (int k = 0; k <= 5; ++k) axis.ticks.push_back(t_end * k / 5);
  d.x_axis(x, y(n - 1) + 35, axis);
  for (const auto& e : ev) {
    const double x1 = x(e.t_send), y1 = y(e.src), x2 = x(e.t_recv), y2 = y(e.dst);
    d.line(x1, y1, x2, y2,
           {.stroke = kBlue, .stroke_width = 1.6, .extra = {{"marker-end", "url(#arrow)"}},
            .title = "round " + std::to_string(e.step) + ": rank " + std::to_string(e.src) + " -> rank " +
                     std::to_string(e.dst) + ", " + std::to_string(e.bytes) + " bytes"});
    // The label sits in the middle of the first gap between lanes the arrow crosses, so the labels
    // of long arrows (the ring's wrap-around) do not land on those of neighbouring ranks.
    const int span = std::max(1, std::abs(e.dst - e.src));
    const double f = (e.dst > e.src ? 0.38 : 0.62) / span;  // crossing arrows: labels side by side
    const double mx = x1 + (x2 - x1) * f, my = y1 + (y2 - y1) * f;
    d.circle(mx, my, 8, {.fill = "white", .stroke = kBlue});
    d.text(mx, my + 4, std::to_string(e.step), {.anchor = svg::Anchor::Middle, .size = 10});
  }
  return d.str();
}

int cmd_trace(const std::string& coll, const std::string& algo, int n, std::int64_t bytes, const std::string& svg,
              const CostModel& m) {
  Measured r = simulate(coll, algo, n, bytes, m, true);
  std::vector<TraceEvent> all;
  for (const auto& t : r.trace) all.insert(all.end(), t.begin(), t.end());
  std::sort(all.begin(), all.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return std::tie(a.t_recv, a.dst, a.src) < std::tie(b.t_recv, b.dst, b.src);
  });
  // A round is a distinct departure time on the modelled clock: every message that leaves at the
  // same moment belongs to the same round (the tree's ⌈log2 N⌉, the ring's 2(N-1)).
  std::vector<double> departs;
  for (const auto& e : all) departs.push_back(e.t_send);
  std::sort(departs.begin(), departs.end());
  std::vector<double> rounds;
  for (double t : departs)
    if (rounds.empty() || t > rounds.back() + 1e-12 + 1e-9 * rounds.back()) rounds.push_back(t);
  for (auto& e : all)
    e.step = 1 + static_cast<int>(std::lower_bound(rounds.begin(), rounds.end(), e.t_send - 1e-12 - 1e-9 * e.t_send) -
                                  rounds.begin());
  std::printf("%s (%s) of %s on %d ranks: %zu messages in %zu rounds, modelled %s us\n", coll.c_str(), algo.c_str(),
              human(static_cast<double>(bytes)).c_str(), n, all.size(), rounds.size(), micros(r.modelled).c_str());
  std::printf("%6s %5s %5s %10s %12s %12s\n", "round", "from", "to", "bytes", "sent us", "arrived us");
  for (const auto& e : all)
    std::printf("%6d %5d %5d %10lld %12s %12s\n", e.step, e.src, e.dst, static_cast<long long>(e.bytes),
                micros(e.t_send).c_str(), micros(e.t_recv).c_str());
  if (!svg.empty()) {
    write_file_atomic(svg,
                      trace_svg(all, n,
                                coll + " (" + algo + "), " + human(static_cast<double>(bytes)) + " on " +
                                    std::to_string(n) + " ranks: " + std::to_string(all.size()) + " messages in " +
                                    std::to_string(rounds.size()) + " rounds",
                                r.modelled),
                      "mls-collectives trace");
    std::printf("wrote %s\n", svg.c_str());
  }
  return 0;
}

// ---- calibrate --------------------------------------------------------------------------------

/// Seconds per reduced float32 element (sum into an accumulator), best of a few runs.
double measure_gamma() {
  double best = 1e300;
  run_simulated(1, [&](Communicator& c) {
    Tensor a = Tensor::ones({1 << 22}), b = Tensor::ones({1 << 22});
    for (int k = 0; k < 5; ++k) {
      Timer t;
      c.reduce_into(a, b, ReduceOp::Sum);
      best = std::min(best, t.seconds() / (1 << 22));
    }
  });
  return best;
}

/// α and β from ping-pongs of `small` and `large` bytes: time per one-way message.
template <class PingPong>
std::pair<double, double> fit_alpha_beta(PingPong&& pp) {
  const std::int64_t small = 8, large = 8 << 20;
  const double ts = pp(small, 2000), tl = pp(large, 20);
  const double beta = std::max(0.0, (tl - ts) / static_cast<double>(large - small));
  return {std::max(0.0, ts - small * beta), beta};
}

int cmd_calibrate(const std::string& out) {
  CostModel m;
  std::string how;
#ifdef MLS_HAVE_MPI
  if (under_mpirun()) {
    Communicator c = mpi_world();
    MLS_CHECK(c.size() >= 2, "mls-collectives calibrate: needs 2 MPI processes (mpirun -np 2), got ", c.size());
    auto pp = [&](std::int64_t bytes, int iters) {
      Tensor t = Tensor::zeros({bytes}, DType::Bool);
      double best = 1e300;
      for (int rep = 0; rep < 3; ++rep) {
        c.barrier();
        Timer timer;
        ping_pong(c, t, iters);
        best = std::min(best, timer.seconds() / (2.0 * iters));
      }
      Tensor v = Tensor::full({1}, best, DType::Float64);
      c.broadcast(v, 0, Algo::Linear);
      return v.at({0});
    };
    std::tie(m.alpha, m.beta) = fit_alpha_beta(pp);
    how = "MPI ping-pong between 2 processes";
    if (c.rank() != 0) return 0;
  }
#endif
  if (how.empty()) {
    auto pp = [&](std::int64_t bytes, int iters) {
      double best = 1e300;
      for (int rep = 0; rep < 3; ++rep) {
        SimReport r = run_simulated(2, [&](Communicator& c) {
          Tensor t = Tensor::zeros({bytes}, DType::Bool);
          ping_pong(c, t, iters);
        });
        best = std::min(best, r.wall_seconds / (2.0 * iters));
      }
      return best;
    };
    std::tie(m.alpha, m.beta) = fit_alpha_beta(pp);
    how = "ping-pong between 2 threads (simulated backend; run under mpirun -np 2 for MPI)";
  }
  m.gamma = measure_gamma();
  std::printf("calibrated by %s:\n  alpha = %.3g s per message\n  beta  = %.3g s per byte (%.3g GB/s)\n"
              "  gamma = %.3g s per reduced float32\n",
              how.c_str(), m.alpha, m.beta, m.beta > 0 ? 1e-9 / m.beta : 0.0, m.gamma);
  if (!out.empty()) {
    mls::write_file_atomic(out, m.to_json() + "\n", "mls-collectives calibrate");
    std::printf("wrote %s (use it with --model %s)\n", out.c_str(), out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-collectives: traffic, α-β-γ model and message traces of lab 5's collectives"};
  app.require_subcommand(1);
  std::string model_file;
  CostModel m;
  auto add_model = [&](CLI::App* c) {
    c->add_option("--model", model_file, "cost model JSON (from mls-collectives calibrate)");
    c->add_option("--alpha", m.alpha, "seconds per message");
    c->add_option("--beta", m.beta, "seconds per byte");
    c->add_option("--gamma", m.gamma, "seconds per reduced element");
  };
  int ranks = 8;
  std::string sizes = "1K,16K,256K,4M", which = "allreduce";
  auto* table = app.add_subcommand("table", "per algorithm and size: messages, bytes, steps, simulated and formula time");
  table->add_option("--ranks", ranks, "simulated ranks")->check(CLI::Range(1, 64));
  table->add_option("--sizes", sizes, "comma-separated sizes in bytes (K, M, G suffixes)");
  table->add_option("--collective", which,
                    "allreduce | broadcast | reduce | allgather | reduce_scatter | all_to_all | gather | scatter, or all")
      ->capture_default_str();
  add_model(table);

  std::string algo = "ring", svg;
  std::string bytes_arg = "4096";
  int trace_ranks = 4;
  auto* trace = app.add_subcommand("trace", "every message of one collective, as text and an SVG timeline");
  trace->add_option("--collective", which,
                    "allreduce | broadcast | reduce | allgather | reduce_scatter | all_to_all | gather | scatter")
      ->capture_default_str();
  trace->add_option("--algo", algo,
                    "its algorithm: allreduce ring | recursive_doubling | rabenseifner; broadcast tree | linear; "
                    "reduce tree; allgather, reduce_scatter ring; all_to_all pairwise; gather, scatter linear")
      ->capture_default_str();
  trace->add_option("--ranks", trace_ranks, "simulated ranks")->check(CLI::Range(1, 32));
  trace->add_option("--bytes", bytes_arg, "bytes (K, M suffixes)");
  trace->add_option("--svg", svg, "write the timeline here");
  add_model(trace);

  std::string out;
  auto* cal = app.add_subcommand("calibrate", "measure α, β, γ on this machine");
  cal->add_option("--out", out, "write the model as JSON here");

  CLI11_PARSE(app, argc, argv);
  try {
    if (!model_file.empty()) {
      const CostModel flags = m;
      m = CostModel::load(model_file);
      (void)flags;
    }
    if (*table) {
      if (which != "all") (void)algorithms_of(which);
      return cmd_table(ranks, sizes, which, m);
    }
    if (*trace) {
      // Both names checked before any rank starts, with the choices in the message.
      const std::vector<std::string> algos = algorithms_of(which);
      if (std::find(algos.begin(), algos.end(), algo) == algos.end()) {
        std::string list;
        for (const auto& a : algos) list += (list.empty() ? "" : ", ") + a;
        fail("trace: ", which, " has no algorithm '", algo, "', expected one of: ", list);
      }
      return cmd_trace(which, algo, trace_ranks, parse_bytes(bytes_arg), svg, m);
    }
    if (*cal) return cmd_calibrate(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
