// Lab 3 benchmarks. The figures worth quoting are ratios of peers in this program:
//   BM_ChainFused / BM_ChainUnfused   elementwise fusion of a 6-op chain over 16M floats (goal <= 0.4)
//   BM_ResnetFolded / BM_ResnetUnfolded   conv+BN folding (and the rest of the default pipeline)
//   BM_MemoryPlan/<model>   counters planned_bytes / naive_bytes (a ratio of memory, not time)
#include <benchmark/benchmark.h>

#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/models.hpp"
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
}  // namespace

BENCHMARK_MAIN();
