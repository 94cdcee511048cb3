// Our all_to_allv (pairwise exchange over send/recv) against MPI_Alltoallv, on the MPI backend.
// Run it under mpirun (lab5_parallel/tests/run_mpi.sh 2 build/release/bin/mls-mpi-alltoallv-bench):
// uneven counts as expert parallelism makes them (rank r sends rank s a share proportional to
// 1 + (r + s) % N of its buffer), a table of times per rank buffer size, and one line per size:
//   ratio all_to_allv_vs_mpi_alltoallv_<bytes per rank> <our time / MPI_Alltoallv time>
// Goal: <= 1.25 at >= 1 MiB per rank.
//
//   mpirun -np 2 build/release/bin/mls-mpi-alltoallv-bench [--max-bytes 16777216]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/mpi.hpp"
#include "mpi_bench_timing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::parallel::bench::time_per_call;

namespace {


/// What rank r sends rank s for a buffer of `elems` floats per rank (the last rank's share
/// takes the rounding): shares proportional to 1 + (r + s) % n.
std::vector<std::int64_t> counts_of(int r, int n, std::int64_t elems) {
  std::int64_t w = 0;
  for (int s = 0; s < n; ++s) w += 1 + (r + s) % n;
  std::vector<std::int64_t> c(static_cast<std::size_t>(n));
  std::int64_t used = 0;
  for (int s = 0; s < n; ++s) {
    c[s] = s + 1 < n ? elems * (1 + (r + s) % n) / w : elems - used;
    used += c[s];
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t max_bytes = 16LL << 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--max-bytes") && i + 1 < argc) {
      max_bytes = std::atoll(argv[++i]);
      if (max_bytes < 1024) {
        std::fprintf(stderr, "mls-mpi-alltoallv-bench: --max-bytes %lld, expected >= 1024\n", (long long)max_bytes);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: mpirun -np 2 %s [--max-bytes N (>= 1024)]\n", argv[0]);
      return 2;
    }
  }
  return mpi_run([&](Communicator& c) {
    const int n = c.size(), me = c.rank();
    if (me == 0) {
      std::printf("all_to_allv (float32, uneven counts) on %d MPI processes: our pairwise exchange vs MPI_Alltoallv\n", n);
      std::printf("%14s %12s %12s %8s\n", "bytes/rank", "ours us", "MPI us", "ratio");
    }
    std::vector<std::pair<std::int64_t, double>> ratios;
    for (std::int64_t bytes = 16 << 10; bytes <= max_bytes; bytes *= 4) {
      const std::int64_t elems = bytes / 4;
      const std::vector<std::int64_t> send = counts_of(me, n, elems);
      std::vector<std::int64_t> recv(static_cast<std::size_t>(n));
      for (int s = 0; s < n; ++s) recv[s] = counts_of(s, n, elems)[me];
      const Tensor in = Tensor::ones({elems});
      const double t_ours = time_per_call(c, [&] { (void)c.all_to_allv(in, send, recv, Algo::Pairwise); }, bytes);
      const double t_mpi = time_per_call(c, [&] { (void)c.all_to_allv(in, send, recv, Algo::Native); }, bytes);
      if (me == 0)
        std::printf("%14lld %12.2f %12.2f %8.3f\n", (long long)bytes, t_ours * 1e6, t_mpi * 1e6, t_ours / t_mpi);
      ratios.emplace_back(bytes, t_ours / t_mpi);
    }
    if (me == 0) {
      for (auto [b, r] : ratios) std::printf("ratio all_to_allv_vs_mpi_alltoallv_%lld %.4f\n", (long long)b, r);
      std::fflush(stdout);
    }
  });
}
