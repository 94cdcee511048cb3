// Lab 4: the SGEMM ladder against OpenBLAS cblas_sgemm in the same program.
//
// Each benchmark is named sgemm/<kernel>/n:<n>/t:<threads> and reports
//   GFLOP/s           2 n^3 per iteration, as a rate
//   vs_openblas       its GFLOP/s divided by OpenBLAS's at the same n and thread count
//                     (OpenBLAS runs first for each (n, threads), so the ratio is from this run)
// Times are taken by hand (UseManualTime) so the GFLOP/s and the ratio use the same clock.
//
//   build/ci/lab4_kernels/mls_lab4_bench --benchmark_filter='n:1024/t:1'
//   /usr/bin/python3 lab4_kernels/bench/collect.py --out lab4_bench.json
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/sgemm.hpp"

namespace {

std::map<std::pair<long, int>, double>& openblas_gflops() {
  static std::map<std::pair<long, int>, double> m;
  return m;
}

struct Problem {
  long n;
  std::vector<float> A, B, C;
  explicit Problem(long n_) : n(n_), A(n_ * n_), B(n_ * n_), C(n_ * n_) {
    mls::Rng rng(42, "bench_sgemm");
    for (auto& x : A) x = rng.uniform_float() - 0.5f;
    for (auto& x : B) x = rng.uniform_float() - 0.5f;
  }
};

void openblas_sgemm(bool, bool, long M, long N, long K, float alpha, const float* A, long lda,
                    const float* B, long ldb, float beta, float* C, long ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

void run(benchmark::State& state, const std::string& name, mls::SgemmFn fn, long n, int threads) {
  const bool is_openblas = name == "openblas";
  openblas_set_num_threads(is_openblas ? threads : 1);
  mls::ThreadCountGuard guard(is_openblas ? 1 : threads);
  Problem p(n);
  fn(false, false, n, n, n, 1.0f, p.A.data(), n, p.B.data(), n, 0.0f, p.C.data(), n);  // warm-up
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(false, false, n, n, n, 1.0f, p.A.data(), n, p.B.data(), n, 0.0f, p.C.data(), n);
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  const double flops = 2.0 * n * n * n;
  const double gflops = flops * static_cast<double>(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["n"] = static_cast<double>(n);
  state.counters["threads"] = threads;
  if (is_openblas) {
    openblas_gflops()[{n, threads}] = gflops;
  } else if (auto it = openblas_gflops().find({n, threads}); it != openblas_gflops().end()) {
    state.counters["vs_openblas"] = gflops / it->second;
  }
  state.SetLabel(name);
}

void add(const std::string& name, mls::SgemmFn fn, long n, int threads) {
  const std::string bench_name =
      "sgemm/" + name + "/n:" + std::to_string(n) + "/t:" + std::to_string(threads);
  benchmark::RegisterBenchmark(bench_name.c_str(),
                               [=](benchmark::State& s) { run(s, name, fn, n, threads); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3);
}

}  // namespace

int main(int argc, char** argv) {
  // Slow rungs only where they finish in reasonable time.
  const std::map<std::string, long> max_n = {{"lab4_naive", 1024}, {"lab4_reordered", 1024},
                                             {"lab4_blocked", 2048}};
  for (long n : {256L, 1024L, 2048L}) {
    for (int threads : {1, 2}) {
      add("openblas", &openblas_sgemm, n, threads);  // the peer first: the ratio needs it
      for (const auto& k : mls::lab4::cpu_kernels()) {
        const std::string name = k.name;
        const bool mt = name == "lab4_packed_mt";
        if ((threads > 1) != mt) continue;  // single-thread rungs at t=1, packed_mt at t=2
        if (auto it = max_n.find(name); it != max_n.end() && n > it->second) continue;
        add(name, k.fn, n, threads);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
