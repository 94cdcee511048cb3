// NCCL backend (where a GPU is lent): allreduce bus bandwidth of ncclAllReduce and of our ring
// over NCCL send/recv, 1 KiB to 256 MiB, as nccl-tests define them (algbw = bytes / time,
// busbw = algbw * 2(n-1)/n). One process per GPU:
//   build/ci/bin/mls-nccl-allreduce-bench                    # world size 1 (one GPU)
//   mpirun -np 2 build/ci/bin/mls-nccl-allreduce-bench       # two GPUs (NCCL id broadcast over MPI)
// Prints a table, then one line per size:
//   ratio nccl_allreduce_ring_<bytes>_vs_nccl <ncclAllReduce time / our ring's time>  (>= 1: ours as fast)
// Tensors are CPU tensors staged through device buffers, so both sides include the copies.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/nccl.hpp"

using namespace mls;
using namespace mls::parallel;

int main() try {
  std::string why;
  if (!nccl_gpu_available(&why)) {
    std::printf("SKIPPED: no GPU (%s)\n", why.c_str());
    return 0;
  }
  Communicator c = nccl_world_from_env();
  const int n = c.size();
  if (c.rank() == 0)
    std::printf("%12s %12s %12s %12s %12s %8s\n", "bytes", "nccl us", "ours us", "nccl busbw", "ours busbw", "ratio");
  std::vector<std::pair<std::int64_t, double>> ratios;
  for (std::int64_t bytes = 1024; bytes <= (256LL << 20); bytes *= 4) {
    Tensor a = Tensor::zeros({bytes / 4}), b = Tensor::zeros({bytes / 4});
    auto time = [&](auto f) {
      f();
      double best = 1e300;
      for (int rep = 0; rep < 5; ++rep) {
        c.barrier();
        Timer t;
        f();
        best = std::min(best, t.seconds());
      }
      return best;
    };
    const double tn = time([&] { c.allreduce(a, ReduceOp::Sum, Algo::Native); });
    const double to = time([&] { c.allreduce(b, ReduceOp::Sum, Algo::Ring); });
    const double f = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    if (c.rank() == 0)
      std::printf("%12lld %12.2f %12.2f %12.3f %12.3f %8.3f\n", static_cast<long long>(bytes), tn * 1e6, to * 1e6,
                  static_cast<double>(bytes) / tn / 1e9 * f, static_cast<double>(bytes) / to / 1e9 * f, tn / to);
    ratios.emplace_back(bytes, tn / to);
  }
  if (c.rank() == 0 && n == 1) {
    // one rank: our ring returns at once (nothing to exchange), ncclAllReduce still stages the
    // tensor through the device; a ratio would compare nothing with a copy
    std::printf("world size 1: our ring exchanges nothing; ncclAllReduce's time is the host<->device staging. "
                "Ratios need two or more GPUs (mpirun -np 2).\n");
  } else if (c.rank() == 0) {
    for (const auto& [bytes, r] : ratios) std::printf("ratio nccl_allreduce_ring_%lld_vs_nccl %.4f\n", static_cast<long long>(bytes), r);
  }
  return 0;
} catch (const std::exception& e) {
  // e.g. two ranks on one GPU: "nccl_world: ncclCommInitRank failed: invalid usage"
  std::fprintf(stderr, "mls-nccl-allreduce-bench: %s\n", e.what());
  return 1;
}
