// Simulated backend: overhead per message and the wall time of an 8-rank ring allreduce.
#include <benchmark/benchmark.h>

#include "mls/parallel/comm.hpp"

using namespace mls;
using namespace mls::parallel;

// One ping-pong of an empty message between two simulated ranks, per iteration (inside one world).
static void BM_SimPingPong(benchmark::State& state) {
  const int iters = 2000;
  for (auto _ : state) {
    run_simulated(2, [&](Communicator& c) {
      Tensor t = Tensor::empty({0}, DType::Float32);
      ping_pong(c, t, iters);
    });
  }
  // Seconds per message (printed with an SI prefix: "5u" is 5 microseconds).
  state.counters["s_per_message"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2 * iters,
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SimPingPong)->Unit(benchmark::kMillisecond)->UseRealTime();

// An 8-rank ring allreduce of `range(0)` bytes of float32 (16 MiB by default).
static void BM_SimRingAllreduce8(benchmark::State& state) {
  const std::int64_t n = state.range(0) / 4;
  for (auto _ : state) {
    run_simulated(8, [&](Communicator& c) {
      Tensor t = Tensor::ones({n});
      c.allreduce(t, ReduceOp::Sum, Algo::Ring);
    });
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_SimRingAllreduce8)->Arg(16 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
