// Lab 4: the SGEMM ladder against OpenBLAS cblas_sgemm in the same program.
//
// Each benchmark is named sgemm/<kernel>/n:<n>/t:<threads> and reports
//   GFLOP/s           2 n^3 per iteration, as a rate
//   vs_openblas       OpenBLAS's time over ours for the same product and thread count, measured
//                     interleaved in this run (mls::bench::interleaved_ratio: rounds of a batch
//                     of each, back to back, the median of the rounds), so a noisy neighbour or a
//                     peer's still-spinning threads fall on both alike
// and, at the end, one line per ratio a script can parse:
//   ratio sgemm_lab4_packed_vs_openblas_n1024_t1 0.98     (ours / OpenBLAS GFLOP/s: higher wins)
// Times are taken by hand (UseManualTime) so the GFLOP/s and the ratio use the same clock.
//
//   build/ci/lab4_kernels/mls_lab4_bench_sgemm --benchmark_filter='n:1024/t:1'
//   build/ci/lab4_kernels/mls_lab4_bench_sgemm --benchmark_filter=sgemm_tf   (a transformer's shapes)
//
// `tuned` (at n = 1024 and 2048, and on the transformer's shapes) is the autotuner's kernel as every
// lab gets it (MLS_MATMUL=tuned, mls/kernels/tune.hpp): the tuning database's knobs for the problem
// (with its transposes and beta), compiled on its first call (the warm-up run, not timed), run on
// the operands where they lie. A problem with no record of its own takes the nearest tuned shape's
// knobs (same flags, same thread count), else the template's default knobs; so tune first
// (`mls-tune sgemm --transformer --threads T`, `mls-tune sgemm --m 1024 ...`) for figures worth
// quoting. It runs lab4_packed (lab4_packed_mt) only where it cannot compile.
//   /usr/bin/python3 lab4_kernels/bench/collect.py --out lab4_bench.json
#include <benchmark/benchmark.h>

#include "mls/common/bench_timing.hpp"
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/kernels/transformer_gemms.hpp"

namespace {

/// "ratio <name> <value>" lines printed after the run (ours / OpenBLAS GFLOP/s, higher is better).
std::map<std::string, double>& ratios() {
  static std::map<std::string, double> m;
  return m;
}

/// Ours / OpenBLAS GFLOP/s (OpenBLAS time / ours) for the same call, interleaved: 9 rounds of a
/// 10 ms batch of each, each batch after 30 ms of untimed calls of its own (longer than our pool's
/// 2 ms spin, so our idle threads are asleep when OpenBLAS is timed, and long enough for the
/// scheduler to spread a library's woken threads over the CPUs). Both libraries are set to
/// `threads` (each has its own pool).
double vs_openblas(mls::SgemmFn ours, mls::SgemmFn blas, int threads, bool ta, bool tb, long M,
                   long N, long K, const float* A, long lda, const float* B, long ldb, float beta,
                   float* C, long ldc) {
  openblas_set_num_threads(threads);
  mls::ThreadCountGuard guard(threads);
  return mls::bench::interleaved_ratio(
      [&] { ours(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc); },
      [&] { blas(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc); }, 9, /*batch*/ 10e-3,
      /*warm*/ 30e-3);
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
  mls::bench::timed_iterations(state, [&] {
    fn(false, false, n, n, n, 1.0f, p.A.data(), n, p.B.data(), n, 0.0f, p.C.data(), n);
  });
  const double flops = 2.0 * n * n * n;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["n"] = static_cast<double>(n);
  state.counters["threads"] = threads;
  if (!is_openblas) {
    const std::string tag = "sgemm_" + name + "_vs_openblas_n" + std::to_string(n) + "_t" + std::to_string(threads);
    if (!ratios().count(tag))  // once per benchmark (Google Benchmark calls this several times)
      ratios()[tag] = vs_openblas(fn, &openblas_sgemm, threads, false, false, n, n, n, p.A.data(), n,
                                  p.B.data(), n, 0.0f, p.C.data(), n);
    state.counters["vs_openblas"] = ratios()[tag];
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

// ---- the GEMMs of a transformer layer (mls/kernels/transformer_gemms.hpp: lab 6's `small` GPT) ---
// For a linear layer y = x·Wᵀ with x (M, K) and W (N, K): forward (no trans, trans B), input
// gradient dx = dy·W (no trans, no trans) and weight gradient dW = dyᵀ·x (trans A, no trans), each
// adding to C (beta 1). Named sgemm_tf/<kernel>/<op>:<M>x<N>x<K>/t:<threads>, with vs_openblas as
// above; the kernels: OpenBLAS, lab4_packed (lab4_packed_mt at 2 threads) and `tuned` (the
// autotuner's: the tuning database's knobs for the problem with its flags, run on the operands where
// they lie; see its note at the top of this file).

void openblas_sgemm_t(bool ta, bool tb, long M, long N, long K, float alpha, const float* A,
                      long lda, const float* B, long ldb, float beta, float* C, long ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void run_tf(benchmark::State& state, const std::string& name, mls::SgemmFn fn, bool ta, bool tb,
            long M, long N, long K, int threads, const std::string& key) {
  const bool is_openblas = name == "openblas";
  openblas_set_num_threads(is_openblas ? threads : 1);
  mls::ThreadCountGuard guard(is_openblas ? 1 : threads);
  mls::Rng rng(7, "bench_sgemm_tf");
  std::vector<float> A(M * K), B(K * N), C(M * N, 0.0f);
  for (auto& x : A) x = rng.uniform_float() - 0.5f;
  for (auto& x : B) x = rng.uniform_float() - 0.5f;
  const long lda = ta ? M : K, ldb = tb ? K : N;
  mls::bench::timed_iterations(state, [&] {
    fn(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 1.0f, C.data(), N);
  });
  const double flops = 2.0 * M * N * K;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (!is_openblas) {
    std::string tag = "sgemm_tf_" + name + "_vs_openblas_" + key;
    for (char& c : tag) {
      if (c == ':' || c == '/') c = '_';
    }
    if (!ratios().count(tag))  // once per benchmark (Google Benchmark calls this several times)
      ratios()[tag] = vs_openblas(fn, &openblas_sgemm_t, threads, ta, tb, M, N, K, A.data(), lda,
                                  B.data(), ldb, 1.0f, C.data(), N);
    state.counters["vs_openblas"] = ratios()[tag];
  }
  state.SetLabel(name);
}

/// The registry's `tuned` kernel (the autotuner's: mls/kernels/tune.hpp), or null.
mls::SgemmFn tuned_kernel() {
  for (const auto& k : mls::sgemm_kernels())
    if (k.name == "tuned") return k.fn;
  return nullptr;
}

void add_transformer_shapes() {
  for (const mls::kernels::TransformerGemm& g : mls::kernels::transformer_gemms()) {
    for (int threads : {1, 2}) {
      const std::string key = g.key() + "/t:" + std::to_string(threads);
      const std::string ours = threads > 1 ? "lab4_packed_mt" : "lab4_packed";
      mls::SgemmFn packed = nullptr;
      for (const auto& k : mls::kernels::cpu_kernels())
        if (k.name == ours) packed = k.fn;
      for (const auto& [name, fn] : {std::pair<std::string, mls::SgemmFn>{"openblas", &openblas_sgemm_t},
                                     std::pair<std::string, mls::SgemmFn>{ours, packed},
                                     std::pair<std::string, mls::SgemmFn>{"tuned", tuned_kernel()}}) {
        if (!fn) continue;
        const mls::SgemmFn f = fn;
        const bool ta = g.trans_a, tb = g.trans_b;
        const long m = g.m, n = g.n, kk = g.k;
        benchmark::RegisterBenchmark(("sgemm_tf/" + name + "/" + key).c_str(),
                                     [=](benchmark::State& s) { run_tf(s, name, f, ta, tb, m, n, kk, threads, key); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.1);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Slow rungs only where they finish in reasonable time.
  const std::map<std::string, long> max_n = {{"lab4_naive", 1024}, {"lab4_reordered", 1024},
                                             {"lab4_blocked", 2048}};
  for (long n : {256L, 1024L, 2048L}) {
    for (int threads : {1, 2}) {
      add("openblas", &openblas_sgemm, n, threads);  // the peer first: the ratio needs it
      for (const auto& k : mls::kernels::cpu_kernels()) {
        const std::string name = k.name;
        const bool mt = name == "lab4_packed_mt";
        if ((threads > 1) != mt) continue;  // single-thread rungs at t=1, packed_mt at t=2
        if (auto it = max_n.find(name); it != max_n.end() && n > it->second) continue;
        add(name, k.fn, n, threads);
      }
      if (n >= 1024 && tuned_kernel()) add("tuned", tuned_kernel(), n, threads);
    }
  }
  add_transformer_shapes();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const auto& [name, value] : ratios()) std::printf("ratio %s %.4f\n", name.c_str(), value);
  return 0;
}
