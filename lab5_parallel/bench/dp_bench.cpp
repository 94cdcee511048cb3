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
// about 2/3, under the 0.7 (handouts/lab5/README.md, "Its ceiling").
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
// --svg FILE draws the fastest blocking and overlapped steps, per rank a compute and a communication lane.
// bench/dp_mpi_speedup.sh reads the seconds_per_step line (blocking; overlapped with --overlap).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

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
  bool opt_per_bucket = true;  // the optimizer step of each bucket as soon as its allreduce is waited
  std::string svg;
};

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
  /// Through the hooks (overlap) or the parameters themselves.
  Var forward(const Var& x, DataParallel* hooked) {
    Var h = x;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Var w = hooked ? hooked->hook(2 * l) : Var(layers[l].weight);
      const Var b = hooked ? hooked->hook(2 * l + 1) : Var(layers[l].bias);
      h = autodiff::matmul(h, w) + b;
      if (l + 1 < layers.size()) h = autodiff::relu(h);
    }
    return h;
  }
};

enum Kind { kForward, kBackward, kWait, kStep, kAllreduce };
const std::vector<std::string> kKinds = {"forward", "backward", "allreduce_gradients (wait)", "optimizer step", "bucket allreduce"};

struct Timed {
  double seconds = 1e300;  // fastest step, slowest rank
  RankTimeline last;       // this rank's spans of that step
  double forward = 0, backward = 0, optimizer = 0;  // this rank's phases of that step (seconds)
  double optimizer_last = 0;  // the last bucket's optimizer step (per bucket), else the whole step's
  double first_launch = 0;  // seconds into backward when the first bucket was launched (overlapped)
  double comm_wall = 0, comm_cpu = 0;  // the step's collectives: wall and CPU seconds of their threads
  double wake = 0;  // from the first bucket's launch to its allreduce's start (the comm thread waking)
};

/// Data-parallel training steps on `dpc` (the communicator DataParallel uses: the real one or a
/// no-op one); `world` measures the slowest rank. Kept alive across rounds (interleaved timing).
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
  Trainer(Communicator& w, Communicator& c, const Flags& f, bool ov)
      : world(w), dpc(c), overlap(ov), m(f.width, f.layers),
        dp(c, m.params(), DataParallelOptions{f.bucket, ov, f.first_bucket}),
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
  }
  void step(bool timed) {
    world.barrier();
    const double t0 = Communicator::wall_now();
    opt.zero_grad();
    const Var loss = autodiff::softmax_cross_entropy(m.forward(xs, overlap ? &dp : nullptr), ys);
    const double t1 = Communicator::wall_now();
    loss.backward();
    const double t2 = Communicator::wall_now();
    RankTimeline steps;  // per bucket: its optimizer step
    double opt_s = 0, opt_last = 0;
    if (per_bucket) {  // each bucket's step as soon as it is averaged: the later buckets are still in flight
      dp.allreduce_gradients([&](std::size_t b) {
        const double a = Communicator::wall_now();
        bucket_opts[b].step();
        const double e = Communicator::wall_now();
        steps.push_back({0, kStep, a - t0, e - t0});
        opt_s += e - a, opt_last = e - a;
      });
    } else {
      dp.allreduce_gradients();
    }
    const double t3 = Communicator::wall_now();
    if (!per_bucket) opt.step();
    const double t4 = Communicator::wall_now();
    if (!per_bucket) opt_s = opt_last = t4 - t3;
    Tensor e = Tensor::scalar(t4 - t0, DType::Float64);
    world.allreduce(e, ReduceOp::Max);  // a step lasts as long as its slowest rank
    if (!timed || e.item() >= out.seconds) return;  // the picture is of the fastest step (the same on every rank)
    out.seconds = e.item();
    out.last = {{0, kForward, 0, t1 - t0}, {0, kBackward, t1 - t0, t2 - t0}, {0, kWait, t2 - t0, t3 - t0}};
    if (per_bucket)
      out.last.insert(out.last.end(), steps.begin(), steps.end());  // drawn over the wait
    else
      out.last.push_back({0, kStep, t3 - t0, t4 - t0});
    out.forward = t1 - t0, out.backward = t2 - t1, out.optimizer = opt_s, out.optimizer_last = opt_last;
    out.first_launch = 0, out.comm_wall = 0, out.comm_cpu = 0;
    if (&dpc != &world) return;
    if (!dp.launch_times().empty()) out.first_launch = std::max(0.0, dp.launch_times().front() - t1);
    double first_start = 1e300;
    for (const auto& sp : dpc.spans()) {  // the bucket allreduces (the max above came after t4)
      if (sp.start < t0 || sp.start > t4) continue;
      out.last.push_back({1, kAllreduce, sp.start - t0, sp.end - t0});
      out.comm_wall += sp.end - sp.start, out.comm_cpu += sp.cpu;
      first_start = std::min(first_start, sp.start);
    }
    out.wake = first_start < 1e300 && !dp.launch_times().empty() ? first_start - dp.launch_times().front() : 0.0;
  }
};

/// The bucket allreduces alone, as DataParallel issues them (blocking, in bucket order).
struct CommOnly {
  Communicator& world;
  std::vector<Tensor> flats;
  double seconds = 1e300;
  double last_bucket = 0;  // the last bucket's allreduce in the fastest round (slowest rank)
  std::int64_t bytes_sent = 0, messages_sent = 0;  // by this rank, per round
  CommOnly(Communicator& w, const Flags& f) : world(w) {
    Mlp m(f.width, f.layers);
    DataParallel dp(w, m.params(), DataParallelOptions{f.bucket, false, f.first_bucket});
    for (const auto& b : dp.buckets()) {
      std::int64_t n = 0;
      for (std::size_t i : b) n += m.params()[i].value().numel();
      flats.push_back(Tensor::ones({n}));
    }
  }
  void step(bool timed) {
    world.barrier();
    const Traffic::Counts before = world.traffic().total;
    Timer t;
    double last_start = 0;
    for (std::size_t b = 0; b < flats.size(); ++b) {
      if (b + 1 == flats.size()) last_start = t.seconds();
      world.allreduce(flats[b], ReduceOp::Avg);
    }
    const double total = t.seconds();
    bytes_sent = world.traffic().total.bytes_sent - before.bytes_sent;
    messages_sent = world.traffic().total.messages_sent - before.messages_sent;
    Tensor e = Tensor::from_vector(std::vector<double>{total, total - last_start});
    world.allreduce(e, ReduceOp::Max);
    if (timed && e.at({0}) < seconds) seconds = e.at({0}), last_bucket = e.at({1});
  }
  void reset() { seconds = 1e300, last_bucket = 0; }
};

double max_over_ranks(Communicator& c, double v) {
  Tensor e = Tensor::scalar(v, DType::Float64);
  c.allreduce(e, ReduceOp::Max);
  return e.item();
}

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

void run(Communicator& comm, const Flags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
  Communicator noop(make_noop_transport(comm.rank(), comm.size()));
  Trainer compute(comm, noop, f, false), blocking(comm, comm, f, false), overlapped(comm, comm, f, true);
  CommOnly comm_only(comm, f);
  std::string link = link_from_env().label();
  if (f.link_auto) {
#ifdef MLS_HAVE_MPI
    link = calibrate_link(comm, compute, comm_only, f).label();
#endif
  }
  // interleaved: every round times each of the four once, so a busy moment hits all of them
  for (int s = 0; s < f.warmup + f.steps; ++s) {
    const bool timed = s >= f.warmup;
    compute.step(timed);
    comm_only.step(timed);
    blocking.step(timed);
    overlapped.step(timed);
  }
  const double t_comm = comm_only.seconds;
  // the ceiling's parts (each the slowest rank's): see the top of this file
  const double t_fwd = max_over_ranks(comm, compute.out.forward);
  const double t_bwd = max_over_ranks(comm, compute.out.backward);
  const double t_opt = max_over_ranks(comm, compute.out.optimizer);
  const double t_opt_last = max_over_ranks(comm, compute.out.optimizer_last);
  const double first_frac = max_over_ranks(
      comm, overlapped.out.backward > 0 ? std::min(1.0, overlapped.out.first_launch / overlapped.out.backward) : 1.0);
  // (the parts printed are each the slowest rank's)
  const double comm_wall = max_over_ranks(comm, overlapped.out.comm_wall);
  const double comm_cpu = max_over_ranks(comm, overlapped.out.comm_cpu);
  const double wake = max_over_ranks(comm, overlapped.out.wake);
  // what cannot overlap, per rank, then the slowest rank's (a step lasts as long as its slowest rank)
  const double my_first_frac =
      overlapped.out.backward > 0 ? std::min(1.0, overlapped.out.first_launch / overlapped.out.backward) : 1.0;
  // the optimizer: all of it follows the last allreduce, or (per bucket) only the last bucket's
  const double fixed_compute = max_over_ranks(
      comm, compute.out.forward + compute.out.optimizer_last + my_first_frac * compute.out.backward);
  const auto tl_block = gather_timeline(comm, blocking.out.last);
  const auto tl_over = gather_timeline(comm, overlapped.out.last);
  if (comm.rank() != 0) return;
  const double tc = compute.out.seconds, tb = blocking.out.seconds, to = overlapped.out.seconds;
  const char* tag = link.empty() ? "" : " [emulated link]";
  if (!link.empty()) std::printf("%s\n", link.c_str());
  std::printf("dp_bench backend %s ranks %d batch %lld width %lld layers %d buckets %zu bucket_bytes %lld "
              "first_bucket_bytes %lld threads %d%s\n",
              comm.backend().c_str(), comm.size(), static_cast<long long>(f.batch), static_cast<long long>(f.width),
              f.layers, comm_only.flats.size(), static_cast<long long>(f.bucket),
              static_cast<long long>(f.first_bucket > 0 ? f.first_bucket : f.bucket), num_threads(), tag);
  std::printf("t_compute %.6f s  t_comm %.6f s  t_step blocking %.6f s  overlapped %.6f s%s\n", tc, t_comm, tb, to, tag);
  std::printf("compute: forward %.3f ms  backward %.3f ms (%.0f%% of t_compute)  optimizer %.3f ms (%s, the last "
              "bucket's %.3f ms); first bucket launched %.3f ms into backward; last bucket alone %.3f ms; comm CPU "
              "%.3f of %.3f ms in collectives (%.0f%%); comm thread scheduling: %s%s\n",
              1e3 * t_fwd, 1e3 * t_bwd, 100.0 * t_bwd / tc, 1e3 * t_opt,
              f.opt_per_bucket ? "per bucket, as each allreduce is waited" : "after every allreduce",
              1e3 * t_opt_last, 1e3 * first_frac * t_bwd,
              1e3 * comm_only.last_bucket, 1e3 * comm_cpu, 1e3 * comm_wall,
              comm_wall > 0 ? 100.0 * comm_cpu / comm_wall : 0.0, Communicator::comm_thread_policy(), tag);
  // the same compute in the three runs: where they differ much, the machine is not quiet (a
  // loaded scheduler favours the run whose threads sleep more), and no figure here is worth quoting
  std::printf("backward in each run: compute-only %.3f ms, blocking %.3f ms, overlapped %.3f ms (rank 0); the "
              "communication thread started the first bucket %.3f ms after its launch%s\n",
              1e3 * compute.out.backward, 1e3 * blocking.out.backward, 1e3 * overlapped.out.backward, 1e3 * wake, tag);
  std::printf("dp_bench ranks %d batch %lld width %lld seconds_per_step %.6f\n", comm.size(),
              static_cast<long long>(f.batch), static_cast<long long>(f.width), f.overlap ? to : tb);
  const double hideable = std::max(0.0, std::min(tc - fixed_compute, t_comm - comm_only.last_bucket));
  const double ceiling = std::min(1.0, hideable / std::min(tc, t_comm));
  // the least t_step / max the ceiling allows: the efficiency's formula solved for t_step
  const double step_floor = tc > 0 && t_comm > 0 ? step_over_max_floor(tc, t_comm, ceiling) : 1.0;
  std::printf("ratio dp_overlap_efficiency %.3f%s\n", (tc + t_comm - to) / std::min(tc, t_comm), tag);
  std::printf("ratio dp_overlap_efficiency_ceiling %.3f%s (min(t_compute - forward - %s - backward before "
              "the first launch, t_comm - last bucket) / min(t_compute, t_comm); at t_comm = t_compute at most "
              "backward's share of t_compute, %.2f here: the goal 0.7 needs backward >= 70%% of the step); "
              "so t_step / max(t_compute, t_comm) >= %.3f ((t_compute + t_comm - ceiling * min) / max: "
              "2 - ceiling at t_comm = t_compute, the goal 1.15 needs a ceiling >= 0.85)\n",
              ceiling, tag, f.opt_per_bucket ? "the last bucket's optimizer step" : "optimizer", t_bwd / tc, step_floor);
  std::printf("ratio dp_overlap_step_over_max %.3f%s\n", to / std::max(tc, t_comm), tag);
  std::printf("ratio dp_overlap_step_over_max_floor %.3f%s (the ceiling's bound on the line above)\n", step_floor, tag);
  std::printf("ratio dp_overlap_speedup %.3f%s\n", tb / to, tag);
  if (!f.svg.empty()) {
    const std::string title = "data-parallel step, " + std::to_string(comm.size()) + " ranks (" + comm.backend() +
                              "): blocking vs overlapped bucket allreduces";
    write_file_atomic(f.svg, timeline_svg({{"blocking", tl_block}, {"overlapped (--overlap)", tl_over}}, kKinds, title,
                                          link.empty() ? "shared-memory link" : link));
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
  app.add_option("--svg", f.svg, "write the timeline (blocking and overlapped step, every rank) to this SVG file");
  CLI11_PARSE(app, argc, argv);
  try {
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
