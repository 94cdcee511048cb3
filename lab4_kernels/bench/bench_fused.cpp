// Lab 4: memory-bound CPU kernels against memcpy (one thread), in GB/s.
//
// Each benchmark reports GB/s (the bytes the kernel must move: every input read once, every
// output written once, read-modify-write counted twice) and vs_memcpy, its GB/s over memcpy's
// GB/s in this run (memcpy of a 32 MiB buffer, counted as read + write). Arrays are 32 MiB each,
// larger than L3, so these are DRAM figures. "unfused" is the slides' three-pass program
// (add, mul, add through temporaries, slides 002).
//
//   build/ci/lab4_kernels/mls_lab4_bench_fused
#include <benchmark/benchmark.h>

#include "mls/common/bench_timing.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/kernels/fused.hpp"

namespace {

constexpr long kN = 8L << 20;  // floats per array (32 MiB)
double g_memcpy_gbs = 0;

std::vector<float> random_vec(long n, const char* stream) {
  mls::Rng rng(7, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform_float() - 0.5f;
  return v;
}

void run(benchmark::State& state, const std::string& name, double bytes,
         const std::function<void()>& fn) {
  const double seconds = mls::bench::timed_iterations(state, fn);
  const double gbs = bytes * static_cast<double>(state.iterations()) / seconds * 1e-9;
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (name == "memcpy") {
    g_memcpy_gbs = gbs;
  } else if (g_memcpy_gbs > 0) {
    state.counters["vs_memcpy"] = gbs / g_memcpy_gbs;
  }
}

void add(const std::string& name, double bytes, std::function<void()> fn) {
  benchmark::RegisterBenchmark(("fused/" + name).c_str(),
                               [=](benchmark::State& s) { run(s, name, bytes, fn); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3);
}

void add_unfused(long n, const float* a, const float* b, float* c) {
  for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
void mul_unfused(long n, const float* a, const float* b, float* c) {
  for (long i = 0; i < n; ++i) c[i] = a[i] * b[i];
}

}  // namespace

int main(int argc, char** argv) {
  static auto A = random_vec(kN, "A"), B = random_vec(kN, "B"), C = random_vec(kN, "C"),
              D = random_vec(kN, "D");
  static std::vector<float> E(kN), T1(kN), T2(kN), dX(kN), W(1024, 1.0f), Bi(1024, 0.0f),
      dW(1024), dB(1024), mean(kN / 1024), rstd(kN / 1024);
  const double f = sizeof(float);
  const long rows = kN / 1024, cols = 1024;
  add("memcpy", 2 * f * kN, [] { std::memcpy(E.data(), A.data(), kN * sizeof(float)); });
  add("add_mul_add", 5 * f * kN, [] {
    mls::kernels::fused_add_mul_add(kN, A.data(), B.data(), C.data(), D.data(), E.data());
  });
  // The unfused program moves 9 arrays' worth; we credit it with the 5 the result needs, so its
  // vs_memcpy shows the cost of not fusing.
  add("add_mul_add_unfused", 5 * f * kN, [] {
    add_unfused(kN, A.data(), B.data(), T1.data());
    mul_unfused(kN, T1.data(), C.data(), T2.data());
    add_unfused(kN, T2.data(), D.data(), E.data());
  });
  add("softmax_1024", 2 * f * kN, [=] { mls::kernels::softmax_forward(E.data(), A.data(), rows, cols); });
  add("layernorm_fwd_1024", 2 * f * kN, [=] {
    mls::kernels::layernorm_forward(E.data(), mean.data(), rstd.data(), A.data(), W.data(), Bi.data(),
                                 rows, cols, 1e-5f);
  });
  add("layernorm_bwd_1024", 4 * f * kN, [=] {
    mls::kernels::layernorm_backward(dX.data(), dW.data(), dB.data(), B.data(), A.data(), W.data(),
                                  mean.data(), rstd.data(), rows, cols);
  });
  add("gelu_fwd", 2 * f * kN, [] { mls::kernels::gelu_forward(E.data(), A.data(), kN); });
  add("gelu_bwd", 3 * f * kN + f * kN, [] {
    mls::kernels::gelu_backward(dX.data(), A.data(), B.data(), kN);
  });
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
