// Lab 1 benchmarks. Each one runs its peer (memcpy over the same number of bytes) in the same
// program right before it, and reports our bandwidth, the peer's and the ratio ours / peer.
//
//   build/release/lab1_tensor/mls_lab1_bench_tensor                 (all, 1 thread)
//   build/release/lab1_tensor/mls_lab1_bench_tensor --benchmark_filter=Add
// Bytes are counted the same way for both sides: every byte read plus every byte written.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"
#include "mls/tensor/tensor.hpp"

namespace {

using mls::Tensor;

/// Seconds memcpy takes to copy `bytes` bytes (best of several runs, buffers pre-touched).
double memcpy_seconds(std::size_t bytes) {
  static std::vector<char> src, dst;
  src.assign(bytes, 1);
  dst.assign(bytes, 0);
  return mls::time_min([&] { std::memcpy(dst.data(), src.data(), bytes); benchmark::DoNotOptimize(dst.data()); }, 7);
}

/// Runs `run` under Google Benchmark's timing, then reports bandwidths and the ratio to the
/// peer, both taken as the best of several runs of the same work: `ours_bytes` and
/// `peer_bytes` count reads + writes of one run of each side.
template <class F>
void measure(benchmark::State& state, F run, double ours_bytes, double peer_bytes, double peer_seconds) {
  for (auto _ : state) run();
  const double ours_seconds = mls::time_min(run, 7);
  const double ours_bw = ours_bytes / ours_seconds, peer_bw = peer_bytes / peer_seconds;
  state.counters["GB/s"] = ours_bw * 1e-9;
  state.counters["memcpy_GB/s"] = peer_bw * 1e-9;
  state.counters["ratio_vs_memcpy"] = ours_bw / peer_bw;
}

void threads_from_arg(benchmark::State& state) { mls::set_num_threads(static_cast<int>(state.range(0))); }

// c = a + b over 16M contiguous floats: reads 2, writes 1 array.
void BM_Add(benchmark::State& state) {
  threads_from_arg(state);
  const std::int64_t n = 16 << 20;
  mls::Rng rng(1);
  const Tensor a = Tensor::rand({n}, rng), b = Tensor::rand({n}, rng);
  Tensor c = Tensor::empty({n});
  const double bytes = 3.0 * n * 4;
  const double peer = memcpy_seconds(static_cast<std::size_t>(n) * 4);  // moves 2 * n * 4 bytes
  measure(state, [&] { c = a + b; benchmark::DoNotOptimize(c.data_ptr()); }, bytes, 2.0 * n * 4, peer);
}
BENCHMARK(BM_Add)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// In-place a += b: the same work without allocating the result.
void BM_AddInplace(benchmark::State& state) {
  threads_from_arg(state);
  const std::int64_t n = 16 << 20;
  mls::Rng rng(1);
  Tensor a = Tensor::rand({n}, rng);
  const Tensor b = Tensor::rand({n}, rng);
  const double peer = memcpy_seconds(static_cast<std::size_t>(n) * 4);
  measure(state, [&] { a += b; benchmark::DoNotOptimize(a.data_ptr()); }, 3.0 * n * 4, 2.0 * n * 4, peer);
}
BENCHMARK(BM_AddInplace)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// compact() of a [64, 64, 64, 64] tensor permuted (0, 2, 3, 1): a strided gather into order.
void BM_CompactPermuted(benchmark::State& state) {
  threads_from_arg(state);
  mls::Rng rng(2);
  const Tensor x = Tensor::rand({64, 64, 64, 64}, rng);
  const Tensor p = x.permute({0, 2, 3, 1});
  const std::int64_t n = x.numel();
  const double peer = memcpy_seconds(static_cast<std::size_t>(n) * 4);
  measure(state, [&] { Tensor c = p.compact(); benchmark::DoNotOptimize(c.data_ptr()); }, 2.0 * n * 4, 2.0 * n * 4,
          peer);
}
BENCHMARK(BM_CompactPermuted)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// sum over one axis of a [4096, 4096] tensor (reads 64 MiB, writes 16 KiB), vs memcpy's read
// bandwidth (bytes memcpy reads per second while copying the same 64 MiB).
void sum_axis(benchmark::State& state, std::int64_t axis) {
  threads_from_arg(state);
  mls::Rng rng(3);
  const Tensor x = Tensor::rand({4096, 4096}, rng);
  const std::int64_t n = x.numel();
  const double peer = memcpy_seconds(static_cast<std::size_t>(n) * 4);  // reads n * 4 bytes
  const std::vector<std::int64_t> axes{axis};
  measure(state, [&] { Tensor s = mls::sum(x, axes); benchmark::DoNotOptimize(s.data_ptr()); }, 1.0 * n * 4,
          1.0 * n * 4, peer);
}
void BM_SumLastAxis(benchmark::State& state) { sum_axis(state, 1); }
void BM_SumFirstAxis(benchmark::State& state) { sum_axis(state, 0); }
BENCHMARK(BM_SumLastAxis)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SumFirstAxis)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
