#pragma once
// The timing of lab 5's MPI benchmarks (mls-mpi-allreduce-bench, mls-mpi-alltoallv-bench).
#include <algorithm>
#include <cstdint>

#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel::bench {

/// Seconds per call of `f` on the slowest rank: the best of 5 timed batches, each of enough calls
/// to move about 64 MiB (2 to 500), after one warm-up call (first touch, connection setup).
template <class F>
double time_per_call(Communicator& c, F&& f, std::int64_t bytes) {
  const int iters = static_cast<int>(std::clamp<std::int64_t>((64LL << 20) / std::max<std::int64_t>(bytes, 1), 2, 500));
  f();
  double best = 1e300;
  for (int rep = 0; rep < 5; ++rep) {
    c.barrier();
    Timer t;
    for (int i = 0; i < iters; ++i) f();
    Tensor s = Tensor::full({1}, t.seconds() / iters, DType::Float64);
    c.allreduce(s, ReduceOp::Max, Algo::Native);
    best = std::min(best, s.at({0}));
  }
  return best;
}

}  // namespace mls::parallel::bench
