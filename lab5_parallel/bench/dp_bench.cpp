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
// With MLS_LINK_GBPS / MLS_LINK_US (link.hpp) the link is emulated and every line says so.
// --svg FILE draws the fastest blocking and overlapped steps, per rank a compute and a communication lane.
// bench/dp_mpi_speedup.sh reads the seconds_per_step line (blocking; overlapped with --overlap).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "mls/common/file.hpp"
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
  std::int64_t batch = 256, width = 512, bucket = 1 << 20;
  int steps = 10, warmup = 2, ranks = 2;
  bool overlap = false;
  std::string svg;
};

/// The MLP width -> 2·width -> 2·width -> 10 (ReLU), the same on every rank (seeded).
struct Mlp {
  std::vector<nn::Linear> layers;
  explicit Mlp(std::int64_t w) {
    Rng rng(1, "dp-bench");
    const std::int64_t dims[] = {w, 2 * w, 2 * w, 10};
    for (int l = 0; l < 3; ++l) layers.emplace_back(dims[l], dims[l + 1], rng);
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
  Var xs, ys;
  Timed out;
  Trainer(Communicator& w, Communicator& c, const Flags& f, bool ov)
      : world(w), dpc(c), overlap(ov), m(f.width), dp(c, m.params(), DataParallelOptions{f.bucket, ov}),
        opt(m.params(), 0.01, 0.9) {
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
    dp.allreduce_gradients();
    const double t3 = Communicator::wall_now();
    opt.step();
    const double t4 = Communicator::wall_now();
    Tensor e = Tensor::scalar(t4 - t0, DType::Float64);
    world.allreduce(e, ReduceOp::Max);  // a step lasts as long as its slowest rank
    if (!timed || e.item() >= out.seconds) return;  // the picture is of the fastest step (the same on every rank)
    out.seconds = e.item();
    out.last = {{0, kForward, 0, t1 - t0}, {0, kBackward, t1 - t0, t2 - t0}, {0, kWait, t2 - t0, t3 - t0},
                {0, kStep, t3 - t0, t4 - t0}};
    if (&dpc == &world)  // the bucket allreduces (the max above came after t4)
      for (const auto& sp : comm_spans(dpc, t0, t0, kAllreduce))
        if (sp.start <= t4 - t0) out.last.push_back(sp);
  }
};

/// The bucket allreduces alone, as DataParallel issues them (blocking, in bucket order).
struct CommOnly {
  Communicator& world;
  std::vector<Tensor> flats;
  double seconds = 1e300;
  CommOnly(Communicator& w, const Flags& f) : world(w) {
    Mlp m(f.width);
    DataParallel dp(w, m.params(), DataParallelOptions{f.bucket, false});
    for (const auto& b : dp.buckets()) {
      std::int64_t n = 0;
      for (std::size_t i : b) n += m.params()[i].value().numel();
      flats.push_back(Tensor::ones({n}));
    }
  }
  void step(bool timed) {
    world.barrier();
    Timer t;
    for (auto& fl : flats) world.allreduce(fl, ReduceOp::Avg);
    Tensor e = Tensor::scalar(t.seconds(), DType::Float64);
    world.allreduce(e, ReduceOp::Max);
    if (timed) seconds = std::min(seconds, e.item());
  }
};

void run(Communicator& comm, const Flags& f) {
  const std::string link = link_from_env().label();
  Communicator noop(make_noop_transport(comm.rank(), comm.size()));
  Trainer compute(comm, noop, f, false), blocking(comm, comm, f, false), overlapped(comm, comm, f, true);
  CommOnly comm_only(comm, f);
  // interleaved: every round times each of the four once, so a busy moment hits all of them
  for (int s = 0; s < f.warmup + f.steps; ++s) {
    const bool timed = s >= f.warmup;
    compute.step(timed);
    comm_only.step(timed);
    blocking.step(timed);
    overlapped.step(timed);
  }
  const double t_comm = comm_only.seconds;
  const auto tl_block = gather_timeline(comm, blocking.out.last);
  const auto tl_over = gather_timeline(comm, overlapped.out.last);
  if (comm.rank() != 0) return;
  const double tc = compute.out.seconds, tb = blocking.out.seconds, to = overlapped.out.seconds;
  const char* tag = link.empty() ? "" : " [emulated link]";
  if (!link.empty()) std::printf("%s\n", link.c_str());
  std::printf("dp_bench backend %s ranks %d batch %lld width %lld bucket_bytes %lld%s\n", comm.backend().c_str(),
              comm.size(), static_cast<long long>(f.batch), static_cast<long long>(f.width),
              static_cast<long long>(f.bucket), tag);
  std::printf("t_compute %.6f s  t_comm %.6f s  t_step blocking %.6f s  overlapped %.6f s%s\n", tc, t_comm, tb, to, tag);
  std::printf("dp_bench ranks %d batch %lld width %lld seconds_per_step %.6f\n", comm.size(),
              static_cast<long long>(f.batch), static_cast<long long>(f.width), f.overlap ? to : tb);
  std::printf("ratio dp_overlap_efficiency %.3f%s\n", (tc + t_comm - to) / std::min(tc, t_comm), tag);
  std::printf("ratio dp_overlap_step_over_max %.3f%s\n", to / std::max(tc, t_comm), tag);
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
  app.add_option("--ranks", f.ranks, "simulated ranks (threads) when not started by mpirun")->check(CLI::Range(1, 64));
  app.add_flag("--overlap", f.overlap, "the seconds_per_step line reports the overlapped step (default: blocking)");
  app.add_option("--svg", f.svg, "write the timeline (blocking and overlapped step, every rank) to this SVG file");
  CLI11_PARSE(app, argc, argv);
  try {
    link_from_env();  // a bad emulated-link spec fails before any rank starts
#ifdef MLS_HAVE_MPI
    if (under_mpirun()) return mpi_run([&](Communicator& comm) { run(comm, f); });
#endif
    SimOptions o;
    o.timeout = std::chrono::milliseconds(120000);
    run_simulated(f.ranks, [&](Communicator& comm) { run(comm, f); }, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-dp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
