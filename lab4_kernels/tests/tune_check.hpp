#pragma once
// Helpers of the autotuner's tests: a private tuning database and JIT cache per test, the naive
// product, and checks of a template instance (interpreted or compiled) against it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "error_check.hpp"
#include "jit_test_util.hpp"
#include "mls/kernels/tune.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"
#include "reference.hpp"

namespace kernels_test {

namespace tune = mls::kernels::tune;

/// MLS_TUNING_DB and MLS_JIT_CACHE in a temporary folder of the test's own for its scope (never the
/// user's cache), and the `tuned` kernel's state forgotten before and after.
struct TuneEnv {
  mls::testing::TempDir dir{"tune"};
  EnvGuard db{"MLS_TUNING_DB", dir.file("tuning.jsonl")};
  EnvGuard cache{"MLS_JIT_CACHE", dir.file("jit")};
  EnvGuard tune{"MLS_TUNE", std::nullopt};
  TuneEnv() { tune::reset_tuned_state(); }
  ~TuneEnv() { tune::reset_tuned_state(); }
  std::string db_path() const { return dir.file("tuning.jsonl"); }
};

/// Compile options for the tests: the process's cache folder (MLS_JIT_CACHE), -O1 (quick compiles).
inline mls::kernels::jit::CompileOptions quick_jit() {
  mls::kernels::jit::CompileOptions o;
  o.opt_level = "-O1";
  return o;
}

/// Random operands of a problem in [-1, 1), in its layout: A m x k (k x m with trans_a), B k x n
/// (n x k with trans_b), each with its leading dimension, and a starting C (m x n, ldc: the value
/// a beta-1 problem adds to).
struct Operands {
  std::vector<float> a, b, c0;
  Operands(const tune::SgemmShape& s, std::uint64_t seed)
      : a(random_vec(static_cast<std::size_t>(((s.trans_a ? s.k : s.m) - 1) * s.a_ld() + (s.trans_a ? s.m : s.k)), seed, "A")),
        b(random_vec(static_cast<std::size_t>(((s.trans_b ? s.n : s.k) - 1) * s.b_ld() + (s.trans_b ? s.k : s.n)), seed, "B")),
        c0(random_vec(static_cast<std::size_t>((s.m - 1) * s.c_ld() + s.n), seed, "C")) {}
};

/// The starting C of a run of problem `s`: c0 for beta 1, NaN for beta 0 (every element must be written).
inline std::vector<float> starting_c(const tune::SgemmShape& s, const Operands& in) {
  return s.beta ? in.c0 : std::vector<float>(in.c0.size(), std::numeric_limits<float>::quiet_NaN());
}

#ifndef MLS_GRADED_BUILD
/// The naive C (+)= op(A) op(B) of problem `s` on `in`.
inline Reference reference_of(const tune::SgemmShape& s, const Operands& in) {
  return reference_sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, in.a.data(), s.a_ld(), in.b.data(), s.b_ld(),
                         static_cast<float>(s.beta), in.c0.data(), s.c_ld());
}
#endif

/// `v` (rows x cols) zero-padded to prows x pcols.
inline std::vector<float> padded(const std::vector<float>& v, long rows, long cols, long prows, long pcols) {
  std::vector<float> out(static_cast<std::size_t>(prows * pcols), 0.0f);
  for (long i = 0; i < rows; ++i)
    for (long j = 0; j < cols; ++j) out[i * pcols + j] = v[i * cols + j];
  return out;
}

/// The rounding bound of C = A·B for operands in [-1, 1) (reference.hpp's bound with |a b| <= 1):
/// 2 (k + 4) eps k.
inline double product_tol(long k) {
  return 2.0 * static_cast<double>(k + 4) * std::numeric_limits<float>::epsilon() * static_cast<double>(k);
}

/// Observes C (the m x n corner of `got`, leading dimension ld) as `what`, equal to the reference
/// build's within product_tol(k).
inline void observe_product(const std::string& what, const std::vector<float>& got, long ld, long m, long n, long k) {
  std::vector<float> c;
  c.reserve(static_cast<std::size_t>(m * n));
  for (long i = 0; i < m; ++i)
    for (long j = 0; j < n; ++j) c.push_back(got[i * ld + j]);
  mls::testing::observe(what, c, {0.0, product_tol(k)});
}

#ifndef MLS_GRADED_BUILD
/// The oracle check: |got - want| within the reference's bound, element by element (got: m x n
/// with leading dimension ld).
inline void require_matches(const std::vector<float>& got, long ld, const Reference& want, long m, long n,
                            const std::string& what) {
  for (long i = 0; i < m; ++i) {
    for (long j = 0; j < n; ++j) {
      const double g = got[i * ld + j], w = want.value[i * n + j];
      if (std::fabs(g - w) <= want.bound[i * n + j]) continue;
      INFO(what << ": C[" << i << "][" << j << "] = " << g << ", want " << w << " (bound " << want.bound[i * n + j] << ")");
      REQUIRE(std::fabs(g - w) <= want.bound[i * n + j]);
    }
  }
}
#endif

/// The interpreted loop nests of every piece of the plan of `knobs` on problem `s` (each piece on
/// its corner of the operands, where they lie), observed, and checked against the naive product.
inline void check_interpreted(const tune::SgemmKnobs& knobs, const tune::SgemmShape& s, std::uint64_t seed) {
  namespace te = mls::kernels::te;
  const Operands in(s, seed);
  std::vector<float> a = in.a, b = in.b, c = starting_c(s, in);
  const long lda = s.a_ld(), ldb = s.b_ld(), ldc = s.c_ld();
  for (const tune::SgemmInstance& inst : tune::instantiate_all(knobs, s)) {
    const tune::SgemmPiece& p = inst.piece;
    auto window = [](std::vector<float>& v, long offset, const te::Tensor& t) {
      return std::span<float>(v).subspan(static_cast<std::size_t>(offset),
                                         static_cast<std::size_t>(te::buffer_span(*t.buffer())));
    };
    te::Bindings bind;
    bind.bind(inst.A, window(a, s.trans_a ? p.k0 * lda + p.row0 : p.row0 * lda + p.k0, inst.A))
        .bind(inst.B, window(b, s.trans_b ? p.col0 * ldb + p.k0 : p.k0 * ldb + p.col0, inst.B))
        .bind(inst.C, window(c, p.row0 * ldc + p.col0, inst.C));
    te::interpret(inst.func, bind);
  }
  const std::string what = tune::to_string(s) + " " + tune::to_string(knobs) + ", interpreted";
  observe_product(what, c, ldc, s.m, s.n, s.k + s.beta);
  MLS_ORACLE(const Reference want = reference_of(s, in);)
  MLS_ORACLE_CHECK(require_matches(c, ldc, want, s.m, s.n, what));
}

/// The loops of a loop nest, outermost first, each as name(extent) with its kind when not serial
/// ("yc(2, parallel)"), a nest in [...]: the structure the template's knobs make, without the
/// index expressions.
inline std::string loop_structure(const mls::kernels::te::Stmt& s) {
  namespace te = mls::kernels::te;
  if (!s.defined()) return "";
  if (const auto* f = s.as<te::For>()) {
    static const char* kinds[] = {"", ", parallel", ", vectorized", ", unrolled"};
    const std::string inner = loop_structure(f->body);
    return f->var.name() + "(" + te::to_string(f->extent) + kinds[static_cast<int>(f->kind)] + ")" +
           (inner.empty() ? "" : " [" + inner + "]");
  }
  if (const auto* q = s.as<te::Seq>()) {
    std::string out;
    for (const auto& c : q->stmts) {
      const std::string one = loop_structure(c);
      if (!one.empty()) out += (out.empty() ? "" : " ") + one;
    }
    return out;
  }
  if (const auto* a = s.as<te::Allocate>()) return loop_structure(a->body);
  if (const auto* i = s.as<te::IfThenElse>()) return loop_structure(i->then_case) + loop_structure(i->else_case);
  return "";
}

}  // namespace kernels_test
