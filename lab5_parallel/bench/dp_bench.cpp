// mls-dp-bench: seconds per data-parallel training step of an MLP on a fixed global batch, on
// the MPI backend (one rank per process) — run with mpirun -np 1 and -np 2 by
// bench/dp_mpi_speedup.sh, which prints the ratio. Without MPI (or mpirun) it runs one rank.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "mls/common/timer.hpp"
#include "mls/parallel/data_parallel.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::parallel;
namespace nn = mls::autodiff::nn;

namespace {
void run(Communicator& comm, std::int64_t batch, std::int64_t width, int steps, int warmup, std::int64_t bucket) {
  Rng rng(1, "dp-bench");
  auto model = nn::mlp({width, 2 * width, 2 * width, 10}, rng, "relu");
  DataParallel dp(comm, model->parameters(), DataParallelOptions{bucket, false});
  dp.broadcast_parameters(0);
  nn::SGD opt(model->parameters(), 0.01, 0.9);
  Rng data(2, "dp-bench-data");
  const Tensor x = Tensor::randn({batch, width}, data);
  Tensor labels = Tensor::zeros({batch}, DType::Int64);
  for (std::int64_t i = 0; i < batch; ++i) labels.set({i}, static_cast<double>(i % 10));
  const autodiff::Var xs(shard_batch(x, comm.rank(), comm.size())), ys(shard_batch(labels, comm.rank(), comm.size()));
  double best = 1e300;
  for (int s = 0; s < warmup + steps; ++s) {
    comm.barrier();
    Timer t;
    opt.zero_grad();
    autodiff::softmax_cross_entropy(model->forward(xs), ys).backward();
    dp.allreduce_gradients();
    opt.step();
    Tensor e = Tensor::scalar(t.seconds(), DType::Float64);
    comm.allreduce(e, ReduceOp::Max);  // a step lasts as long as its slowest rank
    if (s >= warmup) best = std::min(best, e.item());
  }
  if (comm.rank() == 0)
    std::printf("dp_bench ranks %d batch %lld width %lld seconds_per_step %.6f\n", comm.size(),
                static_cast<long long>(batch), static_cast<long long>(width), best);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-dp-bench: seconds per data-parallel step (MPI: one rank per process)"};
  std::int64_t batch = 256, width = 512, bucket = 1 << 20;
  int steps = 10, warmup = 2;
  app.add_option("--batch", batch, "global batch (rows), split over the ranks");
  app.add_option("--width", width, "MLP input width (hidden layers are twice as wide)");
  app.add_option("--steps", steps, "timed steps (the fastest is reported)");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--bucket-bytes", bucket, "gradient bucket size");
  CLI11_PARSE(app, argc, argv);
  try {
#ifdef MLS_HAVE_MPI
    return mpi_run([&](Communicator& comm) { run(comm, batch, width, steps, warmup, bucket); });
#else
    run_simulated(1, [&](Communicator& comm) { run(comm, batch, width, steps, warmup, bucket); });
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
