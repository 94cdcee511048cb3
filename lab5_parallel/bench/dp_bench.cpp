// mls-dp-bench: seconds per data-parallel training step of an MLP on a fixed global batch, and
// how much of the gradient communication the overlapped step hides (issue 30). On the MPI
// backend (one rank per process: mpirun -np 2 mls-dp-bench), else on --ranks simulated ranks
// (threads; wall time). It times, each the fastest of --steps steps (a step lasts as long as its
// slowest rank):
//   t_compute  the step on a no-op communicator of the same size (no communication at all)
//   t_comm     the bucket allreduces alone
//   blocking   the step with each bucket's allreduce after backward, waited in turn
//   overlapped the step with each bucket's allreduce launched from backward's hooks (--overlap's)
// and prints
//   ratio dp_overlap_efficiency     (t_compute + t_comm − t_overlapped) / min(t_compute, t_comm)
//   ratio dp_overlap_step_over_max  t_overlapped / max(t_compute, t_comm)   (goal: <= 1.15)
//   ratio dp_overlap_speedup        t_blocking / t_overlapped
//   ratio dp_overlap_efficiency_ceiling  the most this model can reach (below)
//   ratio dp_overlap_step_over_max_floor the least t_overlapped / max(t_compute, t_comm) that
//                                   ceiling allows: the efficiency's formula solved for t_step,
//                                   (t_compute + t_comm − ceiling·min) / max; at t_comm = t_compute
//                                   it is 2 − ceiling, so step/max <= 1.15 needs a ceiling >= 0.85
// The optimizer: by default each bucket's SGD step runs as soon as its allreduce is waited
// (DataParallel::allreduce_gradients' on_bucket, one SGD per bucket: bit-identical), next to the
// later buckets' allreduces still in flight; --no-optimizer-per-bucket: one step after all of them.
// The ceiling: a bucket's allreduce can only run after its launch, the first one some way into
// backward; the last bucket (the first layer's gradients, produced last) starts only when
// backward has ended, and its optimizer step (all of the optimizer, without per-bucket steps)
// follows it. So the overlapped step lasts at least forward + the backward before the first
// launch + t_comm + that optimizer step, and at least t_compute + the last bucket's allreduce:
// at most
//   hideable = min(t_compute − forward − the optimizer step after the last allreduce
//                  − backward before the first launch, t_comm − last bucket's allreduce)
// of the communication can hide, and the ceiling is hideable / min(t_compute, t_comm) (phases
// from the compute-only step, the first launch from the overlapped one, the last bucket from the
// bucket allreduces alone). The efficiency's formula is unchanged; the ceiling says what a
// figure below the goal is made of: the model's shape (forward's and the step's share, bucket
// sizes) or lost overlap (the gap between the efficiency and its ceiling). With t_comm =
// t_compute it is about backward's share of t_compute, whatever the mechanism: a Linear layer's
// backward is two GEMMs to forward's one (the first layer's only one: no input gradient), so
// about 2/3, under the issue's 0.7 (handouts/lab5/README.md, "Its ceiling").
// The model: --layers L Linear layers width -> 2·width -> ... -> 2·width -> 10 (ReLU between);
// L = 3 by default. Buckets: --bucket-bytes, the first one --first-bucket-bytes (PyTorch DDP's
// policy: a small first bucket so communication starts early, then cap-sized ones).
// With MLS_LINK_GBPS / MLS_LINK_US (link.hpp) the link is emulated and every line says so.
// --link-auto (MPI) calibrates the emulated link's bandwidth instead, so that t_comm ≈
// t_compute: it measures t_compute, the bucket allreduces on the plain link and the bytes each
// rank sends per step, sets the bandwidth that makes t_comm = t_compute, then corrects it twice
// by t_comm / t_compute measured anew, interleaved (MLS_LINK_US, if set, stays the latency). The link it
// chose is printed (the label names --link-auto) and holds for every measurement after.
// Each rank runs --threads compute threads (default: the cores mpirun bound it to, one of two
// on a 2-core machine); the line "threads" says how many. Comm CPU: the CPU time the threads
// running the collectives used, over their wall time — a waiting communication thread must
// sleep, not spin (that would take the core its rank computes on) — and how the communication
// thread is scheduled (SCHED_FIFO where permitted: it must run the moment it wakes; comm.hpp's
// comm_thread_policy).
// Re-prioritised buckets (P3, ByteScheduler; DataParallelOptions::defer_buckets, wait_in_forward):
// --defer-buckets K adds a third overlapped run whose last K buckets (the first layers) are launched
// together in forward order at the end of backward; with --wait-in-forward they are waited by the
// next forward's hooks (each deferred bucket's optimizer step just before its layer), so their
// allreduces hide under the next forward. The ratio lines then report that run (t_compute and
// t_comm keep their meaning); DDP's overlap of the same run follows as ratio dp_overlap_*_ddp. A
// step with waits in forward cannot be timed alone (its waits are in the next step): the run's
// DataParallel has a communicator of its own (the timing's barriers and maxima never wait for its
// buckets in flight), and it runs --run-steps + 2 steps back to back; its step is the mean from
// the start of the second step to the start of the last (the slowest rank's), the fastest run
// reported. Its ceiling: the step is at least
//   t_compute + the forward's wait  (after backward, the not-deferred communication that did not
//       fit under backward after the first launch — the spill — then the deferred buckets in
//       forward order, layer 1's first, against the not-deferred buckets' optimizer steps and
//       forward up to each deferred bucket's first layer: max over the deferred buckets of
//       spill + their allreduces so far − those optimizer steps − forward before that layer − the
//       deferred optimizer steps before it; forward's time before a layer is estimated as forward
//       × the parameters' share before it: a Linear layer's forward is one GEMM, ~ its weight)
//   t_comm + the link's idle time  (from when its queue drains to the next step's first launch:
//       the optimizer steps + forward + the backward before the first launch + that wait, less the
//       spill and the deferred allreduces)
// and the ceiling is (t_compute + t_comm − that step) / min(t_compute, t_comm). --defer-buckets
// auto runs a short calibration (the compute-only step, the allreduces alone, DDP's overlapped
// step) and takes the K whose bound is least (each part the slowest rank's, so every rank picks
// the same K); it prints the modelled step / max for every K.
// --svg FILE draws the fastest blocking and overlapped steps, per rank a compute and a communication
// lane (with --defer-buckets a third panel: two consecutive steps of that run).
// bench/dp_mpi_speedup.sh reads the seconds_per_step line (blocking; overlapped with --overlap).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"
#include "mls/parallel/data_parallel.hpp"
#include "mls/parallel/link.hpp"
#include "mls/parallel/sim.hpp"
#include "mls/parallel/timeline.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::parallel;
namespace nn = mls::autodiff::nn;
using autodiff::Var;

namespace {

struct Flags {
  std::int64_t batch = 256, width = 512, bucket = 1 << 20, first_bucket = 0;
  int steps = 10, warmup = 2, ranks = 2, layers = 3, threads = 0;
  bool overlap = false, link_auto = false;
  std::string defer = "0";    // --defer-buckets: K or auto
  bool wait_forward = false;  // --wait-in-forward
  int run_len = 4;            // --wait-in-forward: steps per timed run (+ 2)
  bool opt_per_bucket = true;  // the optimizer step of each bucket as soon as its allreduce is waited
  std::string svg;
};

enum Kind { kForward, kBackward, kWait, kStep, kAllreduce, kFwdWait };
const std::vector<std::string> kKinds = {"forward", "backward", "allreduce_gradients (wait)", "optimizer step",
                                         "bucket allreduce", "wait in forward (a deferred bucket)"};

/// The MLP width -> 2·width -> ... -> 2·width -> 10 (`layers` Linear layers, ReLU between),
/// the same on every rank (seeded).
struct Mlp {
  std::vector<nn::Linear> layers;
  Mlp(std::int64_t w, int n_layers) {
    Rng rng(1, "dp-bench");
    std::vector<std::int64_t> dims{w};
    for (int l = 1; l < n_layers; ++l) dims.push_back(2 * w);
    dims.push_back(10);
    for (int l = 0; l < n_layers; ++l) layers.emplace_back(dims[l], dims[l + 1], rng);
  }
  std::vector<nn::Parameter> params() {
    std::vector<nn::Parameter> p;
    for (auto& l : layers) p.insert(p.end(), {l.weight, l.bias});
    return p;
  }
  /// Through the hooks (overlap) or the parameters themselves. With `spans`, a hook that waits for
  /// its deferred bucket (waits in forward) is drawn there (relative to `origin`).
  Var forward(const Var& x, DataParallel* hooked, RankTimeline* spans = nullptr, double origin = 0) {
    auto take = [&](std::size_t i, const nn::Parameter& p) -> Var {
      if (!hooked) return Var(p);
      const std::size_t before = hooked->unflushed();
      if (!spans || before == 0) return hooked->hook(i);
      const std::size_t at = spans->size();
      const double a = Communicator::wall_now();
      spans->push_back({0, kFwdWait, a - origin, a - origin});  // under the bucket's optimizer step
      Var v = hooked->hook(i);
      if (hooked->unflushed() < before) (*spans)[at].end = Communicator::wall_now() - origin;
      else spans->erase(spans->begin() + static_cast<std::ptrdiff_t>(at));
      return v;
    };
    Var h = x;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Var w = take(2 * l, layers[l].weight);
      const Var b = take(2 * l + 1, layers[l].bias);
      h = autodiff::matmul(h, w) + b;
      if (l + 1 < layers.size()) h = autodiff::relu(h);
    }
    return h;
  }
};

struct Timed {
  double seconds = 1e300;  // fastest step (--wait-in-forward: fastest run's mean step), slowest rank
  RankTimeline last;       // this rank's spans of that step (--wait-in-forward: two consecutive steps)
  double forward = 0, backward = 0, optimizer = 0;  // this rank's phases of that step (seconds)
  double optimizer_last = 0;  // the last bucket's optimizer step (per bucket), else the whole step's
  std::vector<double> optimizer_bucket;  // per bucket: its optimizer step (per bucket; bucket order)
  double first_launch = 0;  // seconds into backward when the first bucket was launched (overlapped)
  double comm_wall = 0, comm_cpu = 0;  // the step's collectives: wall and CPU seconds of their threads
  double wake = 0;  // from the first bucket's launch to its allreduce's start (the comm thread waking)
};

double max_over_ranks(Communicator& c, double v) {
  Tensor e = Tensor::scalar(v, DType::Float64);
  c.allreduce(e, ReduceOp::Max);
  return e.item();
}

/// The DataParallel options of a run: the flags' buckets, with or without overlap, deferred buckets
/// and waits in the next forward.
DataParallelOptions dp_options(const Flags& f, bool overlap, int defer = 0, bool wait_in_forward = false) {
  DataParallelOptions o{f.bucket, overlap, f.first_bucket};
  o.defer_buckets = defer, o.wait_in_forward = wait_in_forward;
  return o;
}

/// Data-parallel training steps on `dpc` (the communicator DataParallel uses: the real one, a
/// no-op one, or — waits in forward — a communicator of its own, so that the timing's barriers and
/// maxima on `world` never wait for the buckets left in flight); `world` measures the slowest rank.
/// Kept alive across rounds (interleaved timing).
struct Trainer {
  Communicator& world;
  Communicator& dpc;
  bool overlap;
  Mlp m;
  DataParallel dp;
  nn::SGD opt;
  bool per_bucket;
  std::vector<nn::SGD> bucket_opts;  // per_bucket: one SGD per bucket (the same update per parameter)
  Var xs, ys;
  Timed out;
  // the step in progress: its spans (relative to origin_) and optimizer times; bucket_step records
  // here, also when the next forward's hooks call it (waits in forward)
  RankTimeline spans_;
  double origin_ = 0, opt_s_ = 0, opt_last_ = 0;
  std::vector<double> opt_bucket_;
  struct Marks {
    double t0, t1, t2, t3, t4;  // start, forward done, backward done, allreduce_gradients done, optimizer done
  };
  Trainer(Communicator& w, Communicator& c, const Flags& f, DataParallelOptions o)
      : world(w), dpc(c), overlap(o.overlap), m(f.width, f.layers), dp(c, m.params(), o),
        opt(m.params(), 0.01, 0.9), per_bucket(f.opt_per_bucket) {
    if (per_bucket)
      for (std::size_t b = 0; b < dp.buckets().size(); ++b) bucket_opts.emplace_back(dp.bucket_parameters(b), 0.01, 0.9);
    Rng data(2, "dp-bench-data");
    const Tensor x = Tensor::randn({f.batch, f.width}, data);
    Tensor labels = Tensor::zeros({f.batch}, DType::Int64);
    for (std::int64_t i = 0; i < f.batch; ++i) labels.set({i}, static_cast<double>(i % 10));
    xs = Var(shard_batch(x, w.rank(), w.size()));
    ys = Var(shard_batch(labels, w.rank(), w.size()));
    dpc.set_span_recording(true);
    opt_bucket_.assign(dp.buckets().size(), 0.0);
  }
  /// Bucket b's optimizer step (allreduce_gradients' on_bucket, or the next forward's hook).
  void bucket_step(std::size_t b) {
    const double a = Communicator::wall_now();
    bucket_opts[b].step();
    const double e = Communicator::wall_now();
    spans_.push_back({0, kStep, a - origin_, e - origin_});
    opt_s_ += e - a, opt_last_ = e - a, opt_bucket_[b] = e - a;
  }
  /// One training step; its spans go to spans_ (relative to origin_).
  Marks one_step() {
    Marks k{};
    k.t0 = Communicator::wall_now();
    opt_s_ = opt_last_ = 0;
    const std::size_t first = spans_.size();
    opt.zero_grad();
    const Var loss = autodiff::softmax_cross_entropy(m.forward(xs, overlap ? &dp : nullptr, &spans_, origin_), ys);
    k.t1 = Communicator::wall_now();
    loss.backward();
    k.t2 = Communicator::wall_now();
    if (per_bucket)  // each bucket's step as soon as it is averaged: the later buckets are still in flight
      dp.allreduce_gradients([this](std::size_t b) { bucket_step(b); });
    else
      dp.allreduce_gradients();
    k.t3 = Communicator::wall_now();
    if (!per_bucket) opt.step();
    k.t4 = Communicator::wall_now();
    if (!per_bucket) opt_s_ = opt_last_ = k.t4 - k.t3;
    // the phases under the waits and optimizer steps drawn over them
    RankTimeline phases = {{0, kForward, k.t0 - origin_, k.t1 - origin_}, {0, kBackward, k.t1 - origin_, k.t2 - origin_},
                           {0, kWait, k.t2 - origin_, k.t3 - origin_}};
    if (!per_bucket) spans_.push_back({0, kStep, k.t3 - origin_, k.t4 - origin_});
    spans_.insert(spans_.begin() + static_cast<std::ptrdiff_t>(first), phases.begin(), phases.end());
    return k;
  }
  /// The bucket allreduces that started in [from, to] (wall) — `overlapping`: that ran in it, cut
  /// to it — as communication-lane spans relative to `origin`; adds their wall and CPU seconds to out.
  void comm_lane(double from, double to, double origin, bool overlapping = false) {
    for (const auto& sp : dpc.spans()) {
      if (overlapping ? (sp.end <= from || sp.start >= to) : (sp.start < from || sp.start > to)) continue;
      const double a = overlapping ? std::max(sp.start, from) : sp.start, e = overlapping ? std::min(sp.end, to) : sp.end;
      out.last.push_back({1, kAllreduce, a - origin, e - origin});
      out.comm_wall += sp.end - sp.start, out.comm_cpu += sp.cpu;
    }
  }
  void record_phases(const Marks& k) {
    out.forward = k.t1 - k.t0, out.backward = k.t2 - k.t1, out.optimizer = opt_s_, out.optimizer_last = opt_last_;
    out.optimizer_bucket = opt_bucket_;
    out.first_launch = 0, out.comm_wall = 0, out.comm_cpu = 0;
  }
  /// The first launch of the last step (seconds into its backward) and how long the communication
  /// thread took to start it (the first collective that started after it).
  void record_launch(const Marks& k) {
    if (dp.launch_times().empty()) return;
    const double first = *std::min_element(dp.launch_times().begin(), dp.launch_times().end());
    out.first_launch = std::max(0.0, first - k.t1);
    double first_start = 1e300;
    for (const auto& sp : dpc.spans())
      if (sp.start >= first) first_start = std::min(first_start, sp.start);
    out.wake = first_start < 1e300 ? first_start - first : 0.0;
  }
  /// One step, timed alone (every bucket is waited within it).
  void step(bool timed) {
    world.barrier();
    spans_.clear();
    origin_ = Communicator::wall_now();
    const Marks k = one_step();
    const double e = max_over_ranks(world, k.t4 - k.t0);  // a step lasts as long as its slowest rank
    if (!timed || e >= out.seconds) return;  // the picture is of the fastest step (the same on every rank)
    out.seconds = e;
    out.last = spans_;
    record_phases(k);
    if (&dpc != &world) return;  // the no-op communicator: no collectives
    comm_lane(k.t0, k.t4, k.t0);  // the bucket allreduces (the max above came after t4)
    record_launch(k);
  }
  /// Waits in forward: a step's deferred buckets are waited in the next one, so a step cannot be
  /// timed alone. Runs len + 2 steps back to back, then flush(); the period is the mean from the
  /// start of the second step to the start of the last (len steps, each with the waits of the one
  /// before it in its forward: the steady state), the slowest rank's. The picture: the second and
  /// third steps (the second's deferred buckets under the third's forward).
  void run(bool timed, int len) {
    world.barrier();
    spans_.clear();
    origin_ = Communicator::wall_now();
    std::vector<Marks> marks;
    for (int s = 0; s < len + 2; ++s) marks.push_back(one_step());
    dp.flush();
    const auto L = static_cast<std::size_t>(len);
    const double period = max_over_ranks(world, (marks[L + 1].t0 - marks[1].t0) / len);
    if (!timed || period >= out.seconds) return;
    out.seconds = period;
    const double w0 = marks[1].t0, w1 = marks[std::min<std::size_t>(3, L + 1)].t0;  // two steps
    out.last.clear();
    for (const auto& sp : spans_) {
      const double a = sp.start + origin_, e = sp.end + origin_;
      if (e <= w0 || a >= w1) continue;
      out.last.push_back({sp.lane, sp.kind, std::max(a, w0) - w0, std::min(e, w1) - w0});
    }
    record_phases(marks[L + 1]);
    comm_lane(w0, w1, w0, true);
    record_launch(marks[L + 1]);
  }
};

/// The bucket allreduces alone, as DataParallel issues them (blocking, in issue order).
struct CommOnly {
  Communicator& world;
  std::vector<Tensor> flats;          // in bucket order
  std::vector<std::size_t> order;     // issue order
  double seconds = 1e300;
  std::vector<double> bucket_seconds;  // each bucket's allreduce in the fastest round (slowest rank; bucket order)
  std::int64_t bytes_sent = 0, messages_sent = 0;  // by this rank, per round
  CommOnly(Communicator& w, const Flags& f, int defer) : world(w) {
    Mlp m(f.width, f.layers);
    DataParallel dp(w, m.params(), dp_options(f, false, defer));
    for (const auto& b : dp.buckets()) {
      std::int64_t n = 0;
      for (std::size_t i : b) n += m.params()[i].value().numel();
      flats.push_back(Tensor::ones({n}));
    }
    order = dp.issue_order();
  }
  /// The last-issued bucket's allreduce.
  double last_bucket() const { return bucket_seconds.empty() ? 0.0 : bucket_seconds[order.back()]; }
  void step(bool timed) {
    world.barrier();
    const Traffic::Counts before = world.traffic().total;
    std::vector<double> times(flats.size() + 1, 0.0);
    Timer t;
    for (std::size_t b : order) {
      const double a = t.seconds();
      world.allreduce(flats[b], ReduceOp::Avg);
      times[b + 1] = t.seconds() - a;
    }
    times[0] = t.seconds();
    bytes_sent = world.traffic().total.bytes_sent - before.bytes_sent;
    messages_sent = world.traffic().total.messages_sent - before.messages_sent;
    Tensor e = Tensor::from_vector(times);
    world.allreduce(e, ReduceOp::Max);
    if (timed && e.at({0}) < seconds) {
      seconds = e.at({0});
      bucket_seconds.assign(flats.size(), 0.0);
      for (std::size_t b = 0; b < flats.size(); ++b) bucket_seconds[b] = e.at({static_cast<std::int64_t>(b + 1)});
    }
  }
  void reset() { seconds = 1e300, bucket_seconds.clear(); }
};

#ifdef MLS_HAVE_MPI
/// --link-auto: the emulated link's bandwidth that makes t_comm ≈ t_compute (see the top).
/// Every rank computes the same figures (each a max over the ranks), so every rank sets the
/// same link. Returns the link it set.
LinkEmulation calibrate_link(Communicator& comm, Trainer& compute, CommOnly& comm_only, const Flags& f) {
  LinkEmulation env = link_from_env();
  MLS_CHECK(!env.has_gbps, "mls-dp-bench: --link-auto chooses the bandwidth itself, but MLS_LINK_GBPS=", env.gbps,
            " is set too; unset it (MLS_LINK_US may stay: it is kept as the latency)");
  LinkEmulation plain = env;  // the latency only (or nothing)
  mpi_set_link(plain);
  const int reps = std::max(5, f.steps);
  compute.out.seconds = 1e300;
  comm_only.reset();
  for (int s = 0; s < reps; ++s) compute.step(true), comm_only.step(true);
  const double tc = compute.out.seconds, t0 = comm_only.seconds;
  const double bytes = max_over_ranks(comm, static_cast<double>(comm_only.bytes_sent));
  const double msgs = max_over_ranks(comm, static_cast<double>(comm_only.messages_sent));
  const double latency = plain.has_us ? msgs * plain.us * 1e-6 : 0.0;
  MLS_CHECK(bytes > 0, "mls-dp-bench: --link-auto: the bucket allreduces send no bytes (one rank?): nothing to calibrate");
  MLS_CHECK(tc > t0 + latency, "mls-dp-bench: --link-auto: the bucket allreduces already take ", 1e3 * (t0 + latency),
            " ms on the plain link (with MLS_LINK_US's latency), more than the compute's ", 1e3 * tc,
            " ms: no emulated bandwidth can make t_comm = t_compute (use a larger --batch or a smaller MLS_LINK_US)");
  LinkEmulation link = plain;
  link.has_gbps = true;
  link.gbps = 8.0 * bytes / ((tc - t0 - latency) * 1e9);
  link.origin = "mls-dp-bench --link-auto: t_comm ≈ t_compute";
  for (int round = 0; round < 2; ++round) {
    mpi_set_link(link);
    compute.out.seconds = 1e300;
    comm_only.reset();
    // both again, interleaved (as the measurement is): a busy moment hits both alike
    for (int s = 0; s < reps; ++s) compute.step(true), comm_only.step(true);
    link.gbps *= comm_only.seconds / compute.out.seconds;  // slower if t_comm came out short, faster if long
  }
  // the figure is rounded so that every rank holds exactly the same (it already is: maxima)
  link.gbps = std::round(link.gbps * 1e4) / 1e4;
  mpi_set_link(link);
  comm_only.reset();
  compute.out.seconds = 1e300;
  return link;
}
#endif

/// What the schedule with waits in forward is made of (each the slowest rank's), for its bound.
struct Parts {
  double fwd = 0, bwd = 0, first_launch = 0;  // forward, backward, the first launch into backward (DDP run)
  double t_compute = 0, t_comm = 0;
  std::vector<double> opt;         // per bucket: its optimizer step
  std::vector<double> comm;        // per bucket: its allreduce alone
  std::vector<double> fwd_before;  // per bucket: forward's time before its first parameter is used
};
/// The least steady-state step of the schedule with `defer` buckets deferred and waited in the
/// next forward (see the top of the file), and what it is made of.
struct Bound {
  double period = 0, stall = 0, idle = 0, spill = 0, ceiling = 0;
};
Bound wait_in_forward_bound(const Parts& p, std::size_t defer) {
  const std::size_t nb = p.comm.size();
  Bound r;
  double t_d = 0, o_nd = 0, o = 0;
  for (std::size_t b = 0; b < nb; ++b) {
    if (b + defer >= nb) t_d += p.comm[b];  // deferred: its allreduce after backward
    else o_nd += p.opt[b];                  // not deferred: its optimizer step at the step's end
    o += p.opt[b];
  }
  const double t_nd = std::max(0.0, p.t_comm - t_d);
  // the first launch of a step: the first bucket that is not deferred, or (all deferred) backward's end
  const double b0 = defer >= nb ? p.bwd : std::min(p.first_launch, p.bwd);
  r.spill = std::max(0.0, t_nd - (p.bwd - b0));  // not-deferred communication left when backward ends
  // after backward: the deferred buckets in forward order against the not-deferred buckets'
  // optimizer steps, then forward up to each deferred bucket's first layer (and the deferred steps before)
  double done = r.spill, steps_before = 0;
  for (std::size_t j = nb; j-- > nb - std::min(defer, nb);) {
    done += p.comm[j];
    r.stall = std::max(r.stall, done - o_nd - p.fwd_before[j] - steps_before);
    steps_before += p.opt[j];
  }
  // the communication lane waits from when its queue drains until the next step's first launch
  r.idle = std::max(0.0, o + p.fwd + b0 + r.stall - r.spill - t_d);
  r.period = std::max(p.t_compute + r.stall, p.t_comm + r.idle);
  const double lo = std::min(p.t_compute, p.t_comm);
  r.ceiling = lo > 0 ? std::clamp((p.t_compute + p.t_comm - r.period) / lo, 0.0, 1.0) : 0.0;
  return r;
}

void run(Communicator& comm, const Flags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
  Communicator noop(make_noop_transport(comm.rank(), comm.size()));
  const bool sched = f.defer != "0";  // re-prioritised buckets (a third overlapped run)
  Trainer compute(comm, noop, f, dp_options(f, false)), blocking(comm, comm, f, dp_options(f, false)),
      overlapped(comm, comm, f, dp_options(f, true));
  CommOnly comm_only(comm, f, 0);
  const std::size_t nb = overlapped.dp.buckets().size();
  std::string link = link_from_env().label();
  if (f.link_auto) {
#ifdef MLS_HAVE_MPI
    link = calibrate_link(comm, compute, comm_only, f).label();
#endif
  }
  // the parts of the bounds, each the slowest rank's (the same figures on every rank, so every
  // rank picks the same --defer-buckets auto)
  auto measure_parts = [&] {
    Parts p;
    p.t_compute = compute.out.seconds, p.t_comm = comm_only.seconds;
    p.fwd = max_over_ranks(comm, compute.out.forward), p.bwd = max_over_ranks(comm, compute.out.backward);
    p.first_launch = p.bwd * max_over_ranks(comm, overlapped.out.backward > 0
                                                      ? std::min(1.0, overlapped.out.first_launch / overlapped.out.backward)
                                                      : 1.0);
    double total = 0;  // forward's share before each bucket: its parameters' share of the elements before
    std::vector<double> before;  // (a Linear layer's forward is one GEMM, its cost ~ its weight's size)
    for (const auto& prm : overlapped.m.params()) before.push_back(total), total += static_cast<double>(prm.value().numel());
    for (std::size_t b = 0; b < nb; ++b) {
      p.opt.push_back(max_over_ranks(comm, b < compute.out.optimizer_bucket.size() ? compute.out.optimizer_bucket[b] : 0.0));
      p.comm.push_back(b < comm_only.bucket_seconds.size() ? comm_only.bucket_seconds[b] : 0.0);
      const std::size_t first = *std::min_element(overlapped.dp.buckets()[b].begin(), overlapped.dp.buckets()[b].end());
      p.fwd_before.push_back(p.fwd * before[first] / total);
    }
    return p;
  };
  std::size_t defer = 0;
  std::string defer_note;
  std::optional<Communicator> own;  // waits in forward: DataParallel's own communicator (see Trainer)
  std::unique_ptr<Trainer> deferred;
  if (sched) {
    if (f.defer == "auto") {  // a short calibration of the parts, then the K whose bound is least
      for (int s = 0; s < 2 + std::max(5, f.steps / 2); ++s) {
        const bool timed = s >= 2;
        compute.step(timed), comm_only.step(timed), overlapped.step(timed);
      }
      const Parts p = measure_parts();
      double best = 1e300;
      defer_note = "auto: modelled step / max(t_compute, t_comm) for K = 1.." + std::to_string(nb) + ":";
      for (std::size_t k = 1; k <= nb; ++k) {
        const Bound bd = wait_in_forward_bound(p, k);
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.3f", bd.period / std::max(p.t_compute, p.t_comm));
        defer_note += buf;
        if (bd.period < best * (1 - 1e-9)) best = bd.period, defer = k;
      }
      compute.out = Timed{}, overlapped.out = Timed{};
      comm_only.reset();
    } else {
      defer = static_cast<std::size_t>(std::stoi(f.defer));
    }
    MLS_CHECK(defer <= nb, "mls-dp-bench: --defer-buckets ", defer, " but the model has ", nb,
              " buckets (with --bucket-bytes ", f.bucket, "); expected 0..", nb, " or auto");
    if (f.wait_forward) own.emplace(comm.split(0, comm.rank()));
    deferred = std::make_unique<Trainer>(comm, f.wait_forward ? *own : comm, f,
                                         dp_options(f, true, static_cast<int>(defer), f.wait_forward));
  }
  // interleaved: every round times each of the runs once, so a busy moment hits all of them
  for (int s = 0; s < f.warmup + f.steps; ++s) {
    const bool timed = s >= f.warmup;
    compute.step(timed);
    comm_only.step(timed);
    blocking.step(timed);
    overlapped.step(timed);
    if (deferred && f.wait_forward) deferred->run(timed, f.run_len);
    else if (deferred) deferred->step(timed);
  }
  Trainer& over = deferred ? *deferred : overlapped;  // the overlapped run the ratio lines report
  const double t_comm = comm_only.seconds;
  const Parts parts = measure_parts();
  const double t_fwd = parts.fwd, t_bwd = parts.bwd;
  const double t_opt = max_over_ranks(comm, compute.out.optimizer);
  const double t_opt_last = max_over_ranks(comm, compute.out.optimizer_last);
  const double first_frac =
      max_over_ranks(comm, over.out.backward > 0 ? std::min(1.0, over.out.first_launch / over.out.backward) : 1.0);
  // (the parts printed are each the slowest rank's)
  const double comm_wall = max_over_ranks(comm, over.out.comm_wall);
  const double comm_cpu = max_over_ranks(comm, over.out.comm_cpu);
  const double wake = max_over_ranks(comm, over.out.wake);
  // DDP's bound (also the deferred order's without waits in forward): what cannot overlap, per
  // rank, then the slowest rank's (a step lasts as long as its slowest rank)
  auto ddp_fixed = [&](Trainer& t, std::size_t last) {
    const double frac = t.out.backward > 0 ? std::min(1.0, t.out.first_launch / t.out.backward) : 1.0;
    // the optimizer: all of it follows the last allreduce, or (per bucket) only the last-issued bucket's
    const double opt_last = f.opt_per_bucket && last < compute.out.optimizer_bucket.size()
                                ? compute.out.optimizer_bucket[last] : compute.out.optimizer_last;
    return max_over_ranks(comm, compute.out.forward + opt_last + frac * compute.out.backward);
  };
  const double fixed_ddp = ddp_fixed(overlapped, nb - 1);
  const double fixed_over = deferred ? ddp_fixed(*deferred, deferred->dp.issue_order().back()) : fixed_ddp;
  const auto tl_block = gather_timeline(comm, blocking.out.last);
  const auto tl_over = gather_timeline(comm, overlapped.out.last);
  const auto tl_def = gather_timeline(comm, deferred ? deferred->out.last : RankTimeline{});
  if (comm.rank() != 0) return;
  const double tc = compute.out.seconds, tb = blocking.out.seconds, to = over.out.seconds;
  const double t_ddp = overlapped.out.seconds;
  const char* tag = link.empty() ? "" : " [emulated link]";
  if (!link.empty()) std::printf("%s\n", link.c_str());
  std::printf("dp_bench backend %s ranks %d batch %lld width %lld layers %d buckets %zu bucket_bytes %lld "
              "first_bucket_bytes %lld threads %d%s\n",
              comm.backend().c_str(), comm.size(), static_cast<long long>(f.batch), static_cast<long long>(f.width),
              f.layers, nb, static_cast<long long>(f.bucket),
              static_cast<long long>(f.first_bucket > 0 ? f.first_bucket : f.bucket), num_threads(), tag);
  if (deferred) {
    std::string order;
    for (std::size_t b : deferred->dp.issue_order()) order += (order.empty() ? "" : " ") + std::to_string(b);
    std::printf("schedule: defer_buckets %zu of %zu%s%s, issue order %s; %s%s\n", defer, nb,
                defer_note.empty() ? "" : " ", defer_note.c_str(), order.c_str(),
                (f.wait_forward ? "the deferred buckets waited in the next forward (steps timed as the mean of runs of " +
                                      std::to_string(f.run_len) + ")"
                                : std::string("every bucket waited before the optimizer step"))
                    .c_str(),
                tag);
  }
  std::printf("t_compute %.6f s  t_comm %.6f s  t_step blocking %.6f s  overlapped %.6f s%s\n", tc, t_comm, tb, to, tag);
  std::printf("compute: forward %.3f ms  backward %.3f ms (%.0f%% of t_compute)  optimizer %.3f ms (%s, the last "
              "bucket's %.3f ms); first bucket launched %.3f ms into backward; last bucket alone %.3f ms; comm CPU "
              "%.3f of %.3f ms in collectives (%.0f%%); comm thread scheduling: %s%s\n",
              1e3 * t_fwd, 1e3 * t_bwd, 100.0 * t_bwd / tc, 1e3 * t_opt,
              f.opt_per_bucket ? "per bucket, as each allreduce is waited" : "after every allreduce",
              1e3 * t_opt_last, 1e3 * first_frac * t_bwd,
              1e3 * comm_only.last_bucket(), 1e3 * comm_cpu, 1e3 * comm_wall,
              comm_wall > 0 ? 100.0 * comm_cpu / comm_wall : 0.0, Communicator::comm_thread_policy(), tag);
  // the same compute in the runs: where they differ much, the machine is not quiet (a loaded
  // scheduler favours the run whose threads sleep more), and no figure here is worth quoting
  char deferred_bwd[64] = "";
  if (deferred) std::snprintf(deferred_bwd, sizeof deferred_bwd, ", deferred %.3f ms", 1e3 * deferred->out.backward);
  std::printf("backward in each run: compute-only %.3f ms, blocking %.3f ms, overlapped %.3f ms%s (rank 0); the "
              "communication thread started the first bucket %.3f ms after its launch%s\n",
              1e3 * compute.out.backward, 1e3 * blocking.out.backward, 1e3 * overlapped.out.backward, deferred_bwd,
              1e3 * wake, tag);
  std::printf("dp_bench ranks %d batch %lld width %lld seconds_per_step %.6f\n", comm.size(),
              static_cast<long long>(f.batch), static_cast<long long>(f.width), f.overlap ? to : tb);
  auto ddp_ceiling = [&](double fixed, double last) {
    const double hideable = std::max(0.0, std::min(tc - fixed, t_comm - last));
    return std::min(1.0, hideable / std::min(tc, t_comm));
  };
  const double ceiling_ddp = ddp_ceiling(fixed_ddp, comm_only.last_bucket());
  double ceiling = ceiling_ddp;
  Bound bound;
  if (deferred && f.wait_forward) {
    bound = wait_in_forward_bound(parts, defer);
    ceiling = bound.ceiling;
  } else if (deferred) {
    ceiling = ddp_ceiling(fixed_over, parts.comm[deferred->dp.issue_order().back()]);
  }
  // the least t_step / max the ceiling allows: the efficiency's formula solved for t_step
  const double step_floor = tc > 0 && t_comm > 0 ? step_over_max_floor(tc, t_comm, ceiling) : 1.0;
  std::printf("ratio dp_overlap_efficiency %.3f%s\n", (tc + t_comm - to) / std::min(tc, t_comm), tag);
  const char* floor_text = "so t_step / max(t_compute, t_comm) >= %.3f ((t_compute + t_comm - ceiling * min) / max: "
                           "2 - ceiling at t_comm = t_compute, the goal 1.15 needs a ceiling >= 0.85)\n";
  if (deferred && f.wait_forward) {
    std::printf("ratio dp_overlap_efficiency_ceiling %.3f%s (waits in forward, %zu deferred: the step is at least "
                "max(t_compute + the forward's wait %.3f ms, t_comm + the link's idle %.3f ms): the not-deferred "
                "communication that does not fit under backward after the first launch (%.3f ms) and the deferred "
                "buckets' allreduces, layer 1's first, before forward reaches their layers; the link idles from "
                "when its queue drains to the next step's first launch, %.3f ms into backward); ",
                ceiling, tag, defer, 1e3 * bound.stall, 1e3 * bound.idle, 1e3 * bound.spill,
                1e3 * (defer >= nb ? t_bwd : parts.first_launch));
  } else {
    std::printf("ratio dp_overlap_efficiency_ceiling %.3f%s (min(t_compute - forward - %s - backward before "
                "the first launch, t_comm - last bucket) / min(t_compute, t_comm); at t_comm = t_compute at most "
                "backward's share of t_compute, %.2f here: the goal 0.7 needs backward >= 70%% of the step, or "
                "--defer-buckets with --wait-in-forward); ",
                ceiling, tag, f.opt_per_bucket ? "the last bucket's optimizer step" : "optimizer", t_bwd / tc);
  }
  std::printf(floor_text, step_floor);
  std::printf("ratio dp_overlap_step_over_max %.3f%s\n", to / std::max(tc, t_comm), tag);
  std::printf("ratio dp_overlap_step_over_max_floor %.3f%s (the ceiling's bound on the line above)\n", step_floor, tag);
  std::printf("ratio dp_overlap_speedup %.3f%s\n", tb / to, tag);
  if (deferred) {  // DDP's overlap in the same run, for comparison
    std::printf("ratio dp_overlap_efficiency_ddp %.3f%s (the overlap without deferred buckets, same run)\n",
                (tc + t_comm - t_ddp) / std::min(tc, t_comm), tag);
    std::printf("ratio dp_overlap_efficiency_ceiling_ddp %.3f%s\n", ceiling_ddp, tag);
    std::printf("ratio dp_overlap_step_over_max_ddp %.3f%s\n", t_ddp / std::max(tc, t_comm), tag);
  }
  if (!f.svg.empty()) {
    const std::string title = "data-parallel step, " + std::to_string(comm.size()) + " ranks (" + comm.backend() +
                              "): blocking vs overlapped bucket allreduces";
    std::vector<std::pair<std::string, std::vector<RankTimeline>>> panels = {{"blocking", tl_block},
                                                                            {"overlapped (--overlap)", tl_over}};
    if (deferred)
      panels.push_back({"--defer-buckets " + std::to_string(defer) + (f.wait_forward ? " --wait-in-forward: two steps" : ""),
                        tl_def});
    write_file_atomic(f.svg, timeline_svg(panels, kKinds, title, link.empty() ? "shared-memory link" : link));
    std::printf("timeline: %s\n", f.svg.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-dp-bench: seconds per data-parallel step and its overlap efficiency (MPI: one rank per process)"};
  Flags f;
  app.add_option("--batch", f.batch, "global batch (rows), split over the ranks")->check(CLI::PositiveNumber);
  app.add_option("--width", f.width, "MLP input width (hidden layers are twice as wide)")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "timed steps (the fastest is reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-bytes", f.bucket, "gradient bucket size")->check(CLI::PositiveNumber);
  app.add_option("--first-bucket-bytes", f.first_bucket,
                 "the first bucket's size (the last layers' gradients; PyTorch DDP: small), default: --bucket-bytes")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", f.layers, "Linear layers of the MLP (>= 2): width -> 2 width -> ... -> 10")
      ->check(CLI::Range(2, 256));
  app.add_option("--threads", f.threads, "compute threads per rank (default: the cores the rank may run on)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--link-auto", f.link_auto,
               "MPI: calibrate the emulated link's bandwidth so that t_comm ~ t_compute (instead of MLS_LINK_GBPS)");
  app.add_option("--ranks", f.ranks, "simulated ranks (threads) when not started by mpirun")->check(CLI::Range(1, 64));
  app.add_flag("--optimizer-per-bucket,!--no-optimizer-per-bucket", f.opt_per_bucket,
               "each bucket's optimizer step as soon as its allreduce is waited, next to the later buckets' "
               "allreduces (default); --no-optimizer-per-bucket: one step after every allreduce");
  app.add_flag("--overlap", f.overlap, "the seconds_per_step line reports the overlapped step (default: blocking)");
  app.add_option("--defer-buckets", f.defer,
                 "re-prioritised buckets (P3, ByteScheduler): the last K buckets (the first layers) launched together "
                 "in forward order at the end of backward; auto: the K whose modelled step is least (a short "
                 "calibration; needs --wait-in-forward); a third overlapped run, reported by the ratio lines")
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        std::size_t end = 0;
        int k = -1;
        try {
          k = std::stoi(v, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        return end == v.size() && k >= 0 ? "" : "expected a bucket count >= 0 or 'auto', got '" + v + "'";
      });
  app.add_flag("--wait-in-forward", f.wait_forward,
               "the deferred buckets are waited (and their optimizer steps run) by the next forward's hooks, not "
               "before the optimizer step (needs --defer-buckets K >= 1 or auto, and the per-bucket optimizer)");
  app.add_option("--run-steps", f.run_len, "--wait-in-forward: steps per timed run (the mean of a run is its step)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--svg", f.svg, "write the timeline (blocking and overlapped step, every rank) to this SVG file");
  CLI11_PARSE(app, argc, argv);
  try {
    MLS_CHECK(!f.wait_forward || f.defer != "0", "mls-dp-bench: --wait-in-forward needs --defer-buckets K (>= 1) or "
              "auto: with no bucket deferred there is nothing to wait for in the next forward");
    MLS_CHECK(f.defer != "auto" || f.wait_forward, "mls-dp-bench: --defer-buckets auto picks K for --wait-in-forward's "
              "schedule; add --wait-in-forward, or give K");
    MLS_CHECK(!f.wait_forward || f.opt_per_bucket, "mls-dp-bench: --wait-in-forward runs each deferred bucket's "
              "optimizer step in the next forward: it needs the per-bucket optimizer (drop --no-optimizer-per-bucket)");
    link_from_env();  // a bad emulated-link spec fails before any rank starts
#ifdef MLS_HAVE_MPI
    if (under_mpirun()) return mpi_run([&](Communicator& comm) { run(comm, f); });
#endif
    MLS_CHECK(!f.link_auto, "mls-dp-bench: --link-auto needs the MPI backend (run it under mpirun): simulated ranks "
              "time the wall clock, where the emulated link only moves the modelled clock");
    SimOptions o;
    o.timeout = std::chrono::milliseconds(120000);
    run_simulated(f.ranks, [&](Communicator& comm) { run(comm, f); }, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-dp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
