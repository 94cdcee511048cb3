// mls-zero-bench: time per training step of ZeRO stages 0-3 relative to stage 0, the measured
// communication time next to the α-β-γ model's, and bf16 vs fp32 step time (lab 6, part 2).
//
//   mls-zero-bench --ranks 2                         (simulated ranks: threads of one process)
//   lab5_parallel/tests/run_mpi.sh 2 mls-zero-bench --backend mpi     (2 MPI processes)
//
// Prints lines "ratio <name> <value>":
//   zero<s>_step_vs_zero0_<backend>   seconds per step of stage s / stage 0 (best of --reps)
//   zero<s>_comm_measured_vs_modelled_<backend>  wall seconds inside collectives / the α-β-γ
//                                     model's seconds for the same messages (sim clock)
//   bf16_step_vs_fp32                 seconds per step, one rank, stage 0
// and whether this CPU has AVX-512 BF16 (this code upcasts bf16 to fp32 for the GEMMs either way).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "mls/common/error.hpp"
#include "mls/llm/zero.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::llm;

namespace {

struct Result {
  double step_s = std::numeric_limits<double>::infinity();
  double comm_wall_s = 0, modelled_s = 0;
};

ZeroRunOptions options(const std::string& config, int stage, Precision p, std::int64_t batch,
                       std::int64_t steps) {
  ZeroRunOptions o;
  o.cfg = config_by_name(config);
  o.cfg.vocab_size = 256;
  o.zero.stage = stage;
  o.zero.precision = p;
  o.batch = batch;
  o.context = o.cfg.block_size;
  o.steps = steps;
  return o;
}

/// Best of `reps` runs; fn returns a report.
template <class F>
Result best(int reps, std::int64_t steps, F&& fn) {
  Result r;
  for (int i = 0; i < reps; ++i) {
    const ZeroRunReport rep = fn();
    const double s = rep.wall_s / static_cast<double>(steps);
    if (s < r.step_s) {
      r.step_s = s;
      r.comm_wall_s = *std::max_element(rep.comm_wall_s.begin(), rep.comm_wall_s.end()) / steps;
      r.modelled_s = *std::max_element(rep.modelled_comm_s.begin(), rep.modelled_comm_s.end()) / steps;
    }
  }
  return r;
}

void print(const std::string& backend, const Result (&r)[4], bool root) {
  if (!root) return;
  std::printf("%-6s %14s %10s %16s %16s\n", "stage", "ms/step", "vs stage0", "comm ms (wall)", "comm ms (model)");
  for (int s = 0; s < 4; ++s)
    std::printf("%-6d %14.3f %10.3f %16.3f %16.3f\n", s, 1e3 * r[s].step_s, r[s].step_s / r[0].step_s,
                1e3 * r[s].comm_wall_s, 1e3 * r[s].modelled_s);
  for (int s = 1; s < 4; ++s)
    std::printf("ratio zero%d_step_vs_zero0_%s %.4f\n", s, backend.c_str(), r[s].step_s / r[0].step_s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-zero-bench: ZeRO stages 0-3 and bf16 vs fp32, time per step"};
  std::string backend = "sim", config = "nano";
  int ranks = 2, reps = 3;
  std::int64_t steps = 10, batch = 8;
  app.add_option("--backend", backend, "sim | mpi (under mpirun)")->capture_default_str();
  app.add_option("--ranks", ranks, "simulated ranks")->capture_default_str();
  app.add_option("--config", config, "nano | small")->capture_default_str();
  app.add_option("--steps", steps, "steps per run")->capture_default_str();
  app.add_option("--batch", batch, "B per rank")->capture_default_str();
  app.add_option("--reps", reps, "runs per stage (best taken)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("config %s, B = %lld per rank, %lld steps, best of %d; AVX-512 BF16 on this CPU: %s\n",
                config.c_str(), static_cast<long long>(batch), static_cast<long long>(steps), reps,
                cpu_has_avx512_bf16() ? "yes" : "no");
    Result r[4];
    if (backend == "sim") {
      std::printf("backend sim, %d ranks (threads)\n", ranks);
      for (int s = 0; s < 4; ++s)
        r[s] = best(reps, steps, [&] { return run_zero_simulated(ranks, options(config, s, Precision::FP32, batch, steps)); });
      print("sim", r, true);
      for (int s = 0; s < 4; ++s)
        if (r[s].modelled_s > 0)
          std::printf("ratio zero%d_comm_measured_vs_modelled_sim %.4f\n", s, r[s].comm_wall_s / r[s].modelled_s);
      Result f = best(reps, steps, [&] { return run_zero_simulated(1, options(config, 0, Precision::FP32, batch, steps)); });
      Result b = best(reps, steps, [&] { return run_zero_simulated(1, options(config, 0, Precision::BF16, batch, steps)); });
      std::printf("one rank, stage 0: fp32 %.3f ms/step, bf16 %.3f ms/step\n", 1e3 * f.step_s, 1e3 * b.step_s);
      std::printf("ratio bf16_step_vs_fp32 %.4f\n", b.step_s / f.step_s);
      return 0;
    }
    MLS_CHECK(backend == "mpi", "mls-zero-bench: --backend '", backend, "', expected sim or mpi");
#ifdef MLS_HAVE_MPI
    return parallel::mpi_run([&](parallel::Communicator& c) {
      // The α-β-γ model of the same messages: the simulated backend's clock on as many ranks.
      Result model[4];
      for (int s = 0; s < 4; ++s) {
        mem::global().set_enabled(true);
        r[s] = best(reps, steps, [&] {
          mem::global().reset();
          return run_zero(c, options(config, s, Precision::FP32, batch, steps));
        });
        if (c.rank() == 0)
          model[s] = best(1, steps, [&] { return run_zero_simulated(c.size(), options(config, s, Precision::FP32, batch, steps)); });
      }
      if (c.rank() == 0) std::printf("backend mpi, %d processes (comm model: the sim clock)\n", c.size());
      for (int s = 0; s < 4; ++s) r[s].modelled_s = model[s].modelled_s;
      print("mpi", r, c.rank() == 0);
      if (c.rank() == 0)
        for (int s = 0; s < 4; ++s)
          std::printf("ratio zero%d_comm_measured_mpi_vs_modelled %.4f\n", s,
                      r[s].modelled_s > 0 ? r[s].comm_wall_s / r[s].modelled_s : 0.0);
    });
#else
    fail("mls-zero-bench: built without MPI");
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-zero-bench: %s\n", e.what());
    return 1;
  }
}
