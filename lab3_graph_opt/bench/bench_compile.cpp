// compile(fn) vs eager on lab 2's MLP training step (784-256-256-10, batch 128, float32, SGD):
// forward, softmax cross-entropy, backward, update. Both steps use the same SGEMM (the registry's
// default) and the same optimizer; only the forward and backward differ (eager tape vs compiled
// programs). The figures worth quoting are ratios of peers in this program:
//   BM_MlpStepCompiled / BM_MlpStepEager   goal <= 0.7 at 1 thread
//   BM_MlpCompile                          the time to compile (trace, passes, memory plans)
// Before the Google Benchmark runs, the ratio is measured interleaved at 1 thread (the median of
// per-round ratios, mls/common/bench_timing.hpp) and printed with the compile time, as lines a
// script can parse:
//   ratio compile_vs_eager_mlp_step_t1 <v>              (PlannedExecutor, the default)
//   ratio compile_unplanned_vs_eager_mlp_step_t1 <v>    (CompileOptions::planned = false: lab 2's Executor)
//   compile_ms mlp_step <ms>   amortised_ratio_100_steps <v>
// They are printed when the --benchmark_filter (default: all) matches BM_MlpStep.
// MLS_BENCH_REPEAT sets the repetitions (default 9).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <regex>
#include <string>

#include "mls/autodiff/nn.hpp"
#include "mls/common/bench_timing.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"
#include "mls/graph_opt/compile.hpp"

using namespace mls;
using namespace mls::graph_opt;

namespace {

/// One model, its optimizer, an eager step and a compiled step.
struct Steps {
  EagerExample ex = eager_example("mlp", 0);
  autodiff::nn::SGD opt{ex.params, 0.01};
  CompiledFunction compiled;
  explicit Steps(bool planned = true) : compiled(ex.fn, {.name = "mlp_step", .planned = planned}) {}
  double eager() {
    opt.zero_grad();
    const autodiff::Var loss = ex.fn(ex.inputs).at(0);
    loss.backward();
    opt.step();
    return loss.value().item();
  }
  double compiled_step() {
    opt.zero_grad();
    const autodiff::Var loss = compiled(ex.inputs).at(0);
    loss.backward();
    opt.step();
    return loss.value().item();
  }
};

void BM_MlpStepEager(benchmark::State& state) {
  ThreadCountGuard threads(1);
  Steps s;
  for (auto _ : state) benchmark::DoNotOptimize(s.eager());
}
void BM_MlpStepCompiled(benchmark::State& state) {
  ThreadCountGuard threads(1);
  Steps s;
  (void)s.compiled_step();  // compile outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(s.compiled_step());
  state.counters["compiles"] = s.compiled.stats().compiles;
}
void BM_MlpCompile(benchmark::State& state) {
  ThreadCountGuard threads(1);
  Steps s;
  for (auto _ : state) {
    s.compiled.reset();
    benchmark::DoNotOptimize(s.compiled_step());  // one compile and one step
  }
}
BENCHMARK(BM_MlpStepEager)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpStepCompiled)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MlpCompile)->Unit(benchmark::kMillisecond)->UseRealTime();

void print_ratios(const std::string& filter) {
  const std::regex re(filter.empty() || filter == "all" ? "." : filter);
  if (!std::regex_search("BM_MlpStepEager", re) && !std::regex_search("BM_MlpStepCompiled", re)) return;
  ThreadCountGuard threads(1);
  Steps s;
  (void)s.compiled_step();
  const double compile_ms = s.compiled.stats().compile_ms;
  const double r = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(s.eager()); },
                                                 [&] { benchmark::DoNotOptimize(s.compiled_step()); });
  Steps d(false);
  (void)d.compiled_step();
  const double r_direct = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(d.eager()); },
                                                        [&] { benchmark::DoNotOptimize(d.compiled_step()); });
  const double eager_ms = 1e3 * time_min([&] { (void)s.eager(); }, 20);
  std::printf("ratio compile_vs_eager_mlp_step_t1 %.3f\n", r);
  std::printf("ratio compile_unplanned_vs_eager_mlp_step_t1 %.3f\n", r_direct);
  std::printf("compile_ms mlp_step %.3f   eager_step_ms %.3f   amortised_ratio_100_steps %.3f\n", compile_ms, eager_ms,
              (compile_ms + 100 * r * eager_ms) / (100 * eager_ms));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_filter=", 19) == 0) filter = argv[i] + 19;
  print_ratios(filter);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
