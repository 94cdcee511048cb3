// Lab 4 part 2: a first speed check of generated code (not the autotuner, which comes next).
//
// SGEMM C = A·B (row-major, n x n) from one hand-picked schedule of the tensor expression
// C[y][x] = sum_k A[y][k] * B[k][x], in the Goto/BLIS shape of lab 4's packed kernel:
//   x -> xc (NC columns) -> xr (NR) -> xi;  y -> yc (MC rows) -> yr (MR) -> yi;  k -> ko (KC) -> ki
//   loops xc, ko, yc, xr, yr, then the MR x NR x KC tile as one register-blocked micro-kernel call
//   (gemm_regblock_intrinsic); B's KC x NC block packed per ko (cache_read), A's MC x KC block per
//   yc; both copies vectorized; yc parallel (run at one thread here).
// It is compiled once per n (the JIT's disk cache makes later runs start at once) and checked
// against lab4_packed before anything is timed. Benchmarks codegen_sgemm/<kernel>/n:<n>/t:1 for the
// generated kernel, lab4_packed (through the registry's lab 4 ladder) and OpenBLAS where it is
// found, with GFLOP/s; at the end, interleaved ratios (mls::bench::interleaved_ratio) one a line:
//   ratio codegen_sgemm_1024_vs_packed 0.93       (generated / lab4_packed GFLOP/s: higher wins)
//   ratio codegen_sgemm_1024_vs_openblas 0.90
//
//   build/release/lab4_kernels/mls_lab4_bench_codegen --benchmark_filter=n:512
//   MLS_CODEGEN_DUMP=/tmp/cg build/release/lab4_kernels/mls_lab4_bench_codegen   (the source too)
#include <benchmark/benchmark.h>

#include "mls/common/bench_timing.hpp"
#ifdef MLS_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/codegen.hpp"
#include "mls/kernels/sgemm.hpp"

namespace {

namespace te = mls::kernels::te;

/// The schedule's knobs (hand-picked for AVX-512 / AVX2; the autotuner will search them).
struct Blocks {
  std::int64_t mr = 8, nr = 0, kc = 256, mc = 64, nc = 512;  // nr = 0: two vectors of the CPU's lanes
};

/// C = A·B on n x n matrices, scheduled as described at the top of this file.
te::LoweredFunc sgemm_schedule(std::int64_t n, Blocks b) {
  if (b.nr == 0) b.nr = 2 * te::resolved_vector_lanes({});
  te::Tensor A = te::placeholder("A", {n, n}), B = te::placeholder("B", {n, n});
  te::IterVar k = te::reduce_axis(n, "k");
  te::Tensor C = te::compute("C", {n, n}, [&](te::Var y, te::Var x) { return te::sum(A(y, k) * B(k, x), {k}); },
                             {"y", "x"});
  te::Schedule s({C});
  te::Stage st = s[C];
  auto [xc, x1] = st.split(C.axis(1), b.nc, "xc", "x1");
  auto [xr, xi] = st.split(x1, b.nr, "xr", "xi");
  auto [yc, y1] = st.split(C.axis(0), b.mc, "yc", "y1");
  auto [yr, yi] = st.split(y1, b.mr, "yr", "yi");
  auto [ko, ki] = st.split(k, b.kc, "ko", "ki");
  st.reorder({xc, ko, yc, xr, yr, yi, xi, ki});
  te::Tensor BL = s.cache_read(B, st, ko);  // B[ko*KC : +KC][xc*NC : +NC], reused by every yc
  te::Tensor AL = s.cache_read(A, st, yc);  // A[yc*MC : +MC][ko*KC : +KC], reused by every xr
  s[BL].vectorize(s[BL].leaf_axes().back());
  s[AL].vectorize(s[AL].leaf_axes().back());
  st.tensorize(yi, te::gemm_regblock_intrinsic(b.mr, b.nr, b.kc));
  st.parallel(yc);
  return te::lower(s, "codegen_sgemm_" + std::to_string(n));
}

/// The compiled kernel for n (compiled on first use).
const te::JitKernel& generated(long n) {
  static std::map<long, te::JitKernel> kernels;
  auto it = kernels.find(n);
  if (it == kernels.end()) it = kernels.emplace(n, te::compile(sgemm_schedule(n, {}))).first;
  return it->second;
}

/// Ratios printed at the end ("ratio <name> <value>").
std::map<std::string, double>& ratios() {
  static std::map<std::string, double> m;
  return m;
}

struct Problem {
  long n;
  std::vector<float> A, B, C;
  explicit Problem(long n_) : n(n_), A(n_ * n_), B(n_ * n_), C(n_ * n_) {
    mls::Rng rng(42, "bench_codegen");
    for (auto& x : A) x = rng.uniform_float() - 0.5f;
    for (auto& x : B) x = rng.uniform_float() - 0.5f;
  }
};

using Fn = std::function<void(Problem&)>;

Fn generated_fn(long n) {
  const te::JitKernel* k = &generated(n);
  return [k](Problem& p) {
    const std::vector<std::span<float>> args = {p.A, p.B, p.C};
    k->run(args, 1);
  };
}
Fn packed_fn() {
  return [](Problem& p) {
    mls::kernels::sgemm("lab4_packed", false, false, p.n, p.n, p.n, 1.0f, p.A.data(), p.n, p.B.data(), p.n, 0.0f,
                        p.C.data(), p.n);
  };
}
#ifdef MLS_HAVE_OPENBLAS
Fn openblas_fn() {
  return [](Problem& p) {
    const int n = static_cast<int>(p.n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, p.A.data(), n, p.B.data(), n, 0.0f,
                p.C.data(), n);
  };
}
#endif

/// Largest |generated - lab4_packed| over (1 + |lab4_packed|): the generated kernel must be right
/// before its speed means anything.
double check_against_packed(long n) {
  Problem p(n), q(n);
  generated_fn(n)(p);
  packed_fn()(q);
  double worst = 0;
  for (std::size_t i = 0; i < p.C.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(p.C[i]) - q.C[i]) / (1.0 + std::fabs(q.C[i])));
  return worst;
}

void run(benchmark::State& state, const std::string& name, long n, const Fn& fn) {
  mls::ThreadCountGuard guard(1);
  Problem p(n);
  mls::bench::timed_iterations(state, [&] { fn(p); });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(name);
  if (name != "generated") return;
  // Interleaved ratios against each peer, once per n (Google Benchmark calls this several times).
  const std::string tag = "codegen_sgemm_" + std::to_string(n) + "_vs_";
  if (!ratios().count(tag + "packed"))
    ratios()[tag + "packed"] = mls::bench::interleaved_ratio([&] { fn(p); }, [&] { packed_fn()(p); }, 5, 20e-3);
#ifdef MLS_HAVE_OPENBLAS
  if (!ratios().count(tag + "openblas")) {
    openblas_set_num_threads(1);
    ratios()[tag + "openblas"] = mls::bench::interleaved_ratio([&] { fn(p); }, [&] { openblas_fn()(p); }, 5, 20e-3, 30e-3);
  }
  state.counters["vs_openblas"] = ratios()[tag + "openblas"];
#endif
  state.counters["vs_packed"] = ratios()[tag + "packed"];
}

void add(const std::string& name, long n, Fn fn) {
  benchmark::RegisterBenchmark(("codegen_sgemm/" + name + "/n:" + std::to_string(n) + "/t:1").c_str(),
                               [=](benchmark::State& s) { run(s, name, n, fn); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

}  // namespace

int main(int argc, char** argv) {
  for (long n : {512L, 1024L}) {
    const double err = check_against_packed(n);
    std::printf("codegen_sgemm n=%ld: max |generated - lab4_packed| / (1 + |lab4_packed|) = %.2e\n", n, err);
    if (!(err < 1e-4)) {
      std::fprintf(stderr, "bench_codegen: the generated SGEMM is wrong at n=%ld (error %.2e); not timing it\n", n, err);
      return 1;
    }
#ifdef MLS_HAVE_OPENBLAS
    add("openblas", n, openblas_fn());
#endif
    add("lab4_packed", n, packed_fn());
    add("generated", n, generated_fn(n));
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const auto& [name, value] : ratios()) std::printf("ratio %s %.4f\n", name.c_str(), value);
  return 0;
}
