// Our ring allreduce (over send/recv) against MPI_Allreduce, on the MPI backend. Run it under
// mpirun (bench/compare_mpi.sh does): prints a table with time, algbw and busbw (as nccl-tests
// define them: algbw = bytes / time, busbw = algbw * 2(n-1)/n), the α-β-γ prediction when
// --model is given, and one line per size:
//   ratio allreduce_<bytes> <our time / MPI_Allreduce time>
//
//   mpirun -np 2 build/ci/bin/mls-mpi-allreduce-bench [--model cost.json] [--max-bytes 67108864]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mls/common/timer.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/cost.hpp"
#include "mls/parallel/mpi.hpp"
#include "mpi_bench_timing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::parallel::bench::time_per_call;

int main(int argc, char** argv) {
  std::string model_file;
  std::int64_t max_bytes = 64LL << 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model_file = argv[++i];
    else if (!std::strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: mpirun -np 2 %s [--model cost.json] [--max-bytes N]\n", argv[0]);
      return 2;
    }
  }
  return mpi_run([&](Communicator& c) {
    const int n = c.size();
    const bool have_model = !model_file.empty();
    // Only rank 0 prints the model: the file need be on its host only (two machines, no shared disk).
    const CostModel m = have_model && c.rank() == 0 ? CostModel::load(model_file) : CostModel{};
    if (c.rank() == 0) {
      std::printf("allreduce (sum, float32) on %d MPI processes: our ring over send/recv vs MPI_Allreduce\n", n);
      std::printf("%12s %12s %12s %7s %11s %11s %11s %12s %9s\n", "bytes", "ours us", "MPI us", "ratio", "algbw GB/s",
                  "busbw GB/s", "MPI busbw", "model us", "model/ours");
    }
    std::vector<std::pair<std::int64_t, double>> ratios;
    for (std::int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      Tensor ours = Tensor::zeros({bytes / 4}), peer = Tensor::zeros({bytes / 4});
      const double t_ours = time_per_call(c, [&] { c.allreduce(ours, ReduceOp::Sum, Algo::Ring); }, bytes);
      const double t_mpi = time_per_call(c, [&] { c.allreduce(peer, ReduceOp::Sum, Algo::Native); }, bytes);
      const double algbw = static_cast<double>(bytes) / t_ours / 1e9, factor = 2.0 * (n - 1) / n;
      const double mpi_bus = static_cast<double>(bytes) / t_mpi / 1e9 * factor;
      const double model = estimate(m, "allreduce", "ring", n, bytes, 4).seconds;
      if (c.rank() == 0) {
        std::printf("%12lld %12.2f %12.2f %7.3f %11.3f %11.3f %11.3f %12s %9s\n", static_cast<long long>(bytes),
                    t_ours * 1e6, t_mpi * 1e6, t_ours / t_mpi, algbw, algbw * factor, mpi_bus,
                    have_model ? std::to_string(model * 1e6).substr(0, 10).c_str() : "-",
                    have_model ? std::to_string(model / t_ours).substr(0, 5).c_str() : "-");
      }
      ratios.emplace_back(bytes, t_ours / t_mpi);
    }
    if (c.rank() == 0) {
      for (auto [b, r] : ratios) std::printf("ratio allreduce_%lld %.4f\n", static_cast<long long>(b), r);
      std::fflush(stdout);
    }
  });
}
