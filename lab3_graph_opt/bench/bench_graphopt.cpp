// Lab 3 benchmarks. The figures worth quoting are ratios of peers in this program:
//   BM_ChainFused / BM_ChainUnfused   elementwise fusion of a 6-op chain over 16M floats (goal <= 0.4)
//   BM_ResnetFolded / BM_ResnetUnfolded   conv+BN folding (passes conv-bn,dce); both programs run
//                                          every float32 conv on the same kernel (lab 2's conv2d
//                                          finds conv2d_bias's in common's conv2d registry)
//   BM_MemoryPlan/<model>   counters planned_bytes / naive_bytes (a ratio of memory, not time)
// Before the Google Benchmark runs, the two time ratios are measured interleaved (each repetition
// runs both programs back to back, alternating which goes first; the median of the per-repetition
// ratios is printed) at 1 and 2 threads, as lines a script can parse:
//   ratio chain_fused_vs_unfused_t1 <v>   ratio chain_fused_vs_unfused_t2 <v>
//   ratio resnet_folded_vs_unfolded_t1 <v>   ratio resnet_folded_vs_unfolded_t2 <v>
//   ratio parallel_vs_sequential_inception_t2 <v>   ratio parallel_vs_sequential_heads_t2 <v>
//     (the parallel executor on 2 workers / lab 2's sequential executor, both on 2 threads, on an
//     Inception-style block and on multi-head attention with each head a branch; goal <= 0.65)
//   ratio sequential_t2_vs_t1_<model> <v>   (1/s: the sequential executor's 2-thread time / its 1-thread time)
//   ratio parallel_t2_vs_sequential_t1_<model> <v>   (floor 0.5: two nodes at once, one thread each)
//     the first ratio is about the second divided by the first: at best 0.5 * s
//   ratio parallel_planned_vs_sequential_<model>_t2 <v>   (ParallelOptions::planned: nodes computed in
//     the buffers of the concurrent memory plan)
//   ratio parallel_concat_in_place_vs_copies_<model>_t2 <v>   (ParallelOptions::concat_in_place, the
//     default, against concats that copy their inputs: < 1 when computing them in place pays)
//   ratio parallel_searched_vs_bottom_levels_<model>_t2 <v>   (ParallelOptions::search_trials 2000:
//     priorities searched on a simulator with the first 3 runs' node times, against bottom levels)
// They are printed when the --benchmark_filter (default: all) matches BM_Chain / BM_Resnet /
// BM_Parallel.
// MLS_BENCH_REPEAT sets the repetitions (default 9).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>

#include "mls/common/bench_timing.hpp"
#include "mls/common/parallel.hpp"

#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/models.hpp"
#include "mls/graph_opt/parallel.hpp"
#include "mls/graph_opt/passes.hpp"

using namespace mls;
using namespace mls::graph_opt;

namespace {
constexpr std::int64_t kChainN = 16 << 20;
constexpr int kChainOps = 6;

void chain(benchmark::State& state, bool fused) {
  Program p = elementwise_chain(kChainN, kChainOps);
  if (fused) fuse_elementwise(p);
  const auto feeds = random_feeds(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(run(p, feeds));
  // Bytes the unfused program moves (each op reads and writes 16M floats): the same work unit for both.
  state.SetBytesProcessed(state.iterations() * kChainN * 4 * 2 * kChainOps);
  state.counters["nodes"] = static_cast<double>(p.size());
}
void BM_ChainUnfused(benchmark::State& s) { chain(s, false); }
void BM_ChainFused(benchmark::State& s) { chain(s, true); }
BENCHMARK(BM_ChainUnfused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ChainFused)->Unit(benchmark::kMillisecond)->UseRealTime();

void resnet(benchmark::State& state, const std::string& passes) {
  Program p = resnet_block(8, 32, 32, 32);
  if (!passes.empty()) PassManager().add_pipeline(passes).run(p);
  const auto feeds = random_feeds(p, 1);
  for (auto _ : state) benchmark::DoNotOptimize(run(p, feeds));
  state.counters["GFLOP/s"] = benchmark::Counter(program_cost(p).flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["nodes"] = static_cast<double>(p.size());
}
void BM_ResnetUnfolded(benchmark::State& s) { resnet(s, ""); }
void BM_ResnetFolded(benchmark::State& s) { resnet(s, "conv-bn,dce"); }
void BM_ResnetOptimised(benchmark::State& s) { resnet(s, default_pipeline()); }
BENCHMARK(BM_ResnetUnfolded)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ResnetFolded)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ResnetOptimised)->Unit(benchmark::kMillisecond)->UseRealTime();

void memory_plan(benchmark::State& state, const std::string& model, bool optimised) {
  Program p = build_model(model);
  if (optimised) PassManager().add_pipeline(default_pipeline()).run(p);
  MemoryPlan plan;
  for (auto _ : state) benchmark::DoNotOptimize(plan = plan_memory(p));
  state.counters["planned_bytes"] = static_cast<double>(plan.peak_bytes);
  state.counters["naive_bytes"] = static_cast<double>(plan.naive_bytes);
  state.counters["planned/naive"] = static_cast<double>(plan.peak_bytes) / static_cast<double>(plan.naive_bytes);
}
BENCHMARK_CAPTURE(memory_plan, attention, std::string("attention"), false);
BENCHMARK_CAPTURE(memory_plan, mlp, std::string("mlp"), false);
BENCHMARK_CAPTURE(memory_plan, attention_optimised, std::string("attention"), true);
BENCHMARK_CAPTURE(memory_plan, mlp_optimised, std::string("mlp"), true);
// Operator parallelism: graphs with independent branches, sequential executor vs parallel executor.
Program parallel_model(const std::string& name) { return parallel_bench_model(name); }
void parallel_exec(benchmark::State& state, const std::string& model, int workers) {
  ThreadCountGuard guard(2);
  const Program p = parallel_model(model);
  const auto feeds = random_feeds(p, 1);
  ParallelExecutor ex(p, std::max(workers, 1));
  for (auto _ : state) benchmark::DoNotOptimize(workers == 0 ? run(p, feeds) : ex.run(feeds));
  state.counters["GFLOP/s"] = benchmark::Counter(program_cost(p).flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["nodes"] = static_cast<double>(p.size());
}
BENCHMARK_CAPTURE(parallel_exec, BM_ParallelInceptionSequential, std::string("inception"), 0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(parallel_exec, BM_ParallelInceptionW2, std::string("inception"), 2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(parallel_exec, BM_ParallelHeadsSequential, std::string("heads"), 0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(parallel_exec, BM_ParallelHeadsW2, std::string("heads"), 2)->Unit(benchmark::kMillisecond)->UseRealTime();

void print_ratios(const std::string& filter) {
  const std::regex re(filter.empty() || filter == "all" ? "." : filter);
  const bool chain_on = std::regex_search("BM_ChainFused", re) || std::regex_search("BM_ChainUnfused", re);
  const bool resnet_on = std::regex_search("BM_ResnetFolded", re) || std::regex_search("BM_ResnetUnfolded", re);
  const bool parallel_on = std::regex_search("parallel_exec/BM_ParallelInceptionW2", re) ||
                           std::regex_search("parallel_exec/BM_ParallelHeadsW2", re);
  // base / optimised program of the same model, their ratio at 1 and 2 threads
  auto pair = [&](const char* name, const Program& base, const Program& optimised) {
    const auto feeds = random_feeds(base, 1);
    for (int threads : {1, 2}) {
      ThreadCountGuard guard(threads);
      const double r = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(run(base, feeds)); },
                                         [&] { benchmark::DoNotOptimize(run(optimised, feeds)); });
      std::printf("ratio %s_t%d %.3f\n", name, threads, r);
      std::fflush(stdout);
    }
  };
  if (chain_on) {
    Program fused = elementwise_chain(kChainN, kChainOps);
    fuse_elementwise(fused);
    pair("chain_fused_vs_unfused", elementwise_chain(kChainN, kChainOps), fused);
  }
  if (resnet_on) {
    Program folded = resnet_block(8, 32, 32, 32);
    PassManager().add_pipeline("conv-bn,dce").run(folded);
    pair("resnet_folded_vs_unfolded", resnet_block(8, 32, 32, 32), folded);
  }
  if (parallel_on) {
    ThreadCountGuard guard(2);
    for (const char* model : {"inception", "heads"}) {
      const Program p = parallel_model(model);
      const auto feeds = random_feeds(p, 1);
      ParallelExecutor ex(p, 2);
      const double r = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(run(p, feeds)); },
                                                     [&] { benchmark::DoNotOptimize(ex.run(feeds)); });
      std::printf("ratio parallel_vs_sequential_%s_t2 %.3f\n", model, r);
      std::fflush(stdout);
      // What bounds it: the sequential executor's own 2-thread time over its 1-thread time (1/s),
      // and the parallel executor against the sequential one on 1 thread (two nodes at once on
      // one thread each cannot beat 0.5 of it): the ratio above is about their quotient.
      const double seq = mls::bench::interleaved_ratio(
          [&] {
            ThreadCountGuard one(1);
            benchmark::DoNotOptimize(run(p, feeds));
          },
          [&] { benchmark::DoNotOptimize(run(p, feeds)); });
      std::printf("ratio sequential_t2_vs_t1_%s %.3f\n", model, seq);
      const double vs_one = mls::bench::interleaved_ratio(
          [&] {
            ThreadCountGuard one(1);
            benchmark::DoNotOptimize(run(p, feeds));
          },
          [&] { benchmark::DoNotOptimize(ex.run(feeds)); });
      std::printf("ratio parallel_t2_vs_sequential_t1_%s %.3f\n", model, vs_one);
      // The same executor in the buffers of the concurrent memory plan (each node computed in its buffer).
      ParallelExecutor planned(p, 2, {.planned = true});
      const double rp = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(run(p, feeds)); },
                                                      [&] { benchmark::DoNotOptimize(planned.run(feeds)); });
      std::printf("ratio parallel_planned_vs_sequential_%s_t2 %.3f\n", model, rp);
      // The concat in place (default) against concats that copy their inputs, same executor otherwise.
      ParallelExecutor copies(p, 2, {.concat_in_place = false});
      const double rc = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(copies.run(feeds)); },
                                                      [&] { benchmark::DoNotOptimize(ex.run(feeds)); });
      std::printf("ratio parallel_concat_in_place_vs_copies_%s_t2 %.3f\n", model, rc);
      // Priorities searched on a simulator with the first run's node times (search_trials).
      ParallelExecutor searched(p, 2, {.search_trials = 2000});
      for (int r = 0; r < 3; ++r) (void)searched.run(feeds);  // the profiled runs
      const double rs = mls::bench::interleaved_ratio([&] { benchmark::DoNotOptimize(ex.run(feeds)); },
                                                      [&] { benchmark::DoNotOptimize(searched.run(feeds)); });
      std::printf("ratio parallel_searched_vs_bottom_levels_%s_t2 %.3f\n", model, rs);
      std::printf("simulated makespan %s: %.1f us bottom levels, %.1f us searched\n", model,
                  searched.schedule_search().base_makespan * 1e6, searched.schedule_search().best_makespan * 1e6);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_filter=", 19) == 0) filter = argv[i] + 19;
  }
  print_ratios(filter);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
