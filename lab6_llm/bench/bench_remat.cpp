// Lab 6, part 2: time per training step (forward + backward) of each recompute plan, relative to
// no recompute, on the fused GPT path and on the pure chain.
//
// Prints Google Benchmark's table, then one line per plan:
//   ratio remat_gpt_<plan> <step time / no-remat step time>      (expected 1 .. 4/3 + overhead)
//   ratio remat_chain_<plan> <step time / no-remat step time>
// and the activation bytes of each plan against no remat.
//
//   build/ci/lab6_llm/mls_lab6_bench_remat [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include "mls/common/bench_timing.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/llm/remat.hpp"

using namespace mls;
using namespace mls::llm;

namespace {

std::map<std::string, double> g_seconds;  // name -> mean seconds per step
std::map<std::string, std::int64_t> g_bytes;

void timed(benchmark::State& state, const std::string& name, const std::function<void()>& fn) {
  const double total = mls::bench::timed_iterations(state, fn);
  g_seconds[name] = total / static_cast<double>(state.iterations());
}

struct GptCase {
  GPTConfig cfg;
  std::int64_t B = 8, T = 64;
  GPTParams params;
  Batch batch;
  GptCase() {
    cfg = config_by_name("small");
    cfg.n_layer = 9;
    cfg.vocab_size = 65;
    params = init_params(cfg, 1);
    Rng rng(2, "bench-remat");
    batch.B = B;
    batch.T = T;
    for (std::int64_t i = 0; i < B * T; ++i) {
      batch.inputs.push_back(static_cast<std::int32_t>(rng.randint(0, 65)));
      batch.targets.push_back(static_cast<std::int32_t>(rng.randint(0, 65)));
      batch.mask.push_back(1.f);
    }
  }
};

void register_gpt(GptCase& c) {
  for (const std::string kind : {"none", "sqrt", "optimal"}) {
    const std::string name = "remat_gpt_" + kind;
    auto ra = std::make_shared<RematActivations>(c.cfg, c.B, c.T, gpt_plan(kind, c.cfg, c.B, c.T));
    auto grads = std::make_shared<GPTGrads>(c.cfg);
    g_bytes[name] = ra->bytes();
    benchmark::RegisterBenchmark(name.c_str(), [&c, ra, grads, name](benchmark::State& s) {
      timed(s, name, [&] {
        grads->zero();
        gpt_forward_remat(c.params, *ra, c.batch.inputs.data(), c.batch.targets.data(),
                          c.batch.mask.data(), c.B, c.T);
        gpt_backward_remat(c.params, *grads, *ra, c.batch.inputs.data(), c.batch.targets.data(),
                           c.batch.mask.data());
      });
    })->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

void register_chain() {
  static const ChainModel chain(64, 256, 3);
  static const std::int64_t B = 32;
  static std::vector<float> x0 = [] {
    Rng rng(4, "bench-chain");
    std::vector<float> v(static_cast<std::size_t>(B * 256));
    for (auto& x : v) x = static_cast<float>(rng.normal(0.0, 1.0));
    return v;
  }();
  for (const std::string kind : {"none", "sqrt", "optimal"}) {
    const std::string name = "remat_chain_" + kind;
    const RematPlan plan = make_plan(kind, chain.costs(B));
    g_bytes[name] = chain.train_step(x0, B, plan).peak_bytes;
    benchmark::RegisterBenchmark(name.c_str(), [plan, name](benchmark::State& s) {
      timed(s, name, [&] { benchmark::DoNotOptimize(chain.train_step(x0, B, plan).loss); });
    })->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

/// The chain's measured peak (in layers) and counted FLOPs against the bounds, for several n.
void print_chain_table() {
  std::printf("%6s %8s %22s %16s %16s %16s\n", "n", "plan", "peak (layers, measured)",
              "bound 2sqrt(n)+4", "no remat (layers)", "FLOPs / no remat");
  const std::int64_t B = 2, d = 16;
  for (std::int64_t n : {4, 9, 16, 25, 64, 100, 256}) {
    const ChainModel chain(n, d, 5);
    const std::vector<float> x0(static_cast<std::size_t>(B * d), 0.5f);
    const auto base = chain.train_step(x0, B, no_remat_plan(n));
    for (const std::string kind : {"sqrt", "optimal"}) {
      const auto r = chain.train_step(x0, B, make_plan(kind, chain.costs(B)));
      const double layer = static_cast<double>(chain.layer_bytes(B));
      std::printf("%6lld %8s %22.0f %16.1f %16.0f %16.4f\n", (long long)n, kind.c_str(),
                  static_cast<double>(r.peak_bytes) / layer,
                  2.0 * std::sqrt(static_cast<double>(n)) + 4.0,
                  static_cast<double>(base.peak_bytes) / layer, r.flops / base.flops);
    }
  }
}

int main(int argc, char** argv) {
  print_chain_table();
  GptCase gpt;
  register_gpt(gpt);
  register_chain();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const char* model : {"gpt", "chain"}) {
    const std::string base = std::string("remat_") + model + "_none";
    if (!g_seconds.count(base)) continue;
    for (const char* kind : {"sqrt", "optimal"}) {
      const std::string name = std::string("remat_") + model + "_" + kind;
      if (!g_seconds.count(name)) continue;
      std::printf("ratio %s %.4f\n", name.c_str(), g_seconds[name] / g_seconds[base]);
      std::printf("bytes %s %lld of %lld (%.1f%%)\n", name.c_str(), (long long)g_bytes[name],
                  (long long)g_bytes[base],
                  100.0 * static_cast<double>(g_bytes[name]) / static_cast<double>(g_bytes[base]));
    }
  }
  return 0;
}
