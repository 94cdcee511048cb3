// Tape overhead: backward of a chain of 1000 tiny ops (1-element tensors), in ns per op; its peer
// is the forward of the same chain with recording off (the cost of the ops themselves).
#include <benchmark/benchmark.h>

#include "mls/autodiff/var.hpp"
#include "mls/common/timer.hpp"

using namespace mls;
using namespace mls::autodiff;

namespace {
constexpr int kChain = 1000;

void BM_TapeBackwardChain(benchmark::State& state) {
  double backward_s = 0.0;  // time in backward() alone (the chain is rebuilt, untimed, each iteration)
  for (auto _ : state) {
    state.PauseTiming();
    Var x(Tensor::scalar(1.0), true);
    Var y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0001f;
    state.ResumeTiming();
    Timer t;
    y.backward();
    backward_s += t.seconds();
    benchmark::DoNotOptimize(x.grad().get());
  }
  state.counters["ns_per_op"] = benchmark::Counter(backward_s * 1e9 / kChain, benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_TapeBackwardChain)->Unit(benchmark::kMicrosecond);

void BM_TapeForwardChain(benchmark::State& state) {
  Var x(Tensor::scalar(1.0), true);
  for (auto _ : state) {
    Var y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0001f;
    benchmark::DoNotOptimize(y.get());
  }
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(kChain),
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TapeForwardChain)->Unit(benchmark::kMicrosecond);

void BM_NoGradForwardChain(benchmark::State& state) {
  Var x(Tensor::scalar(1.0), true);
  for (auto _ : state) {
    NoGradGuard ng;
    Var y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0001f;
    benchmark::DoNotOptimize(y.get());
  }
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(kChain),
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_NoGradForwardChain)->Unit(benchmark::kMicrosecond);
}  // namespace

BENCHMARK_MAIN();
