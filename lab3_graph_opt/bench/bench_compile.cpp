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
//   floor gemm_ms <ms> eager_step_ms <ms> floor_ratio <v>
// The floor: the compiled programs' GEMM nodes alone (each timed in a one-worker trace of the
// parallel executor, the minimum of 20 runs), over the eager step. Compile cannot make the
// GEMMs (the same SGEMM kernel, the same products) faster, so no compiled step beats it.
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
#include "mls/graph_opt/parallel.hpp"

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
/// Milliseconds the GEMM (and matmul) nodes of `p` take on `feeds`: per node the minimum over
/// 20 one-worker runs of the parallel executor (its trace times each node).
double gemm_ms(const Program& p, const std::vector<Tensor>& feeds) {
  ParallelExecutor ex(p, 1);
  std::vector<double> best(ex.tasks().size(), 1e300);
  for (int r = 0; r < 20; ++r) {
    (void)ex.run(feeds);
    for (const TraceEvent& e : ex.trace().events)
      best[static_cast<std::size_t>(e.task)] = std::min(best[static_cast<std::size_t>(e.task)], e.end_us - e.start_us);
  }
  double us = 0;
  for (std::size_t i = 0; i < best.size(); ++i)
    if (ex.tasks()[i]->op == kGemm || ex.tasks()[i]->op == Op::Matmul) us += best[i];
  return us / 1e3;
}
/// The GEMM time of a compiled step: its forward program on the step's feeds, its backward
/// program on the saved values and a unit adjoint.
double step_gemm_ms(Steps& s) {
  const CompiledVersion& v = s.compiled.version(0);
  std::vector<Tensor> feeds;
  for (const autodiff::Var& x : s.ex.inputs) feeds.push_back(x.value());
  for (const Capture& c : v.captures)
    if (c.as_input) feeds.push_back(c.node->value);
  const std::vector<Tensor> fo = run(v.forward, feeds);
  std::vector<Tensor> bf;
  for (const auto& [kind, i] : v.backward_sources)
    bf.push_back(kind == 0 ? feeds[i] : kind == 1 ? fo[v.num_outputs + i] : Tensor::ones(fo[i].shape(), fo[i].dtype()));
  return gemm_ms(v.forward, feeds) + (v.has_backward ? gemm_ms(v.backward, bf) : 0.0);
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
  const double floor_ms = step_gemm_ms(s);
  std::printf("floor gemm_ms %.3f eager_step_ms %.3f floor_ratio %.3f\n", floor_ms, eager_ms, floor_ms / eager_ms);
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
