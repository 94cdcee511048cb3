#pragma once
// Lab 4: the SGEMM checks shared by the visible and the hidden tests (test_sgemm.cpp,
// test_hidden.cpp): one problem against the double-precision reference, the whole battery of
// sizes and transposes, degenerate sizes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mls/kernels/sgemm.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"  // MLS_ORACLE
#include "reference.hpp"

namespace kernels_test {

struct Case {
  long M, N, K;
};

// Awkward sizes: 1, primes, one off a power of two or a register tile, non-square, K past one
// cache block (256) of the packed kernel.
inline const Case kCases[] = {{1, 1, 1},     {7, 7, 7},     {1, 33, 7},    {31, 33, 17},
                              {33, 31, 65},  {127, 1, 33},  {1, 127, 257}, {13, 35, 300},
                              {66, 97, 31},  {127, 127, 127}, {257, 257, 257}};

/// Runs kernel `name` on one problem with padded leading dimensions and observes C as the kernel
/// left it (padding included); outside the grading build, also checks every element against the
/// reference (computed after the kernel ran, from C as it was) and that the padding is untouched.
inline void run_case(const std::string& name, bool ta, bool tb, Case c, float alpha, float beta, std::uint64_t seed) {
  const long M = c.M, N = c.N, K = c.K;
  const long lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;  // lda > K etc.
  const auto A = random_vec((ta ? K : M) * lda, seed, "A");
  const auto B = random_vec((tb ? N : K) * ldb, seed, "B");
  auto C = random_vec(M * ldc, seed, "C");
  if (beta == 0.0f) {
    for (auto& x : C) x = std::numeric_limits<float>::quiet_NaN();  // must not be read
  }
  const auto C_before = C;
  mls::kernels::sgemm(name, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const std::string what = name + " C ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K);
  MLS_ORACLE(const auto ref = reference_sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C_before.data(), ldc);)
  double tol = 0;  // within twice the widest bound (the reference's build sets it)
  MLS_ORACLE(for (double b : ref.bound) tol = std::max(tol, b);)
  mls::testing::observe(what, C, {0.0, 2 * tol});
  MLS_ORACLE_CHECK(long bad = 0; for (long i = 0; i < M; ++i) {
    for (long j = 0; j < N; ++j) {
      const double got = C[i * ldc + j];
      const double err = std::fabs(got - ref.value[i * N + j]);
      if (!(err <= ref.bound[i * N + j])) {
        if (bad < 3) {
          UNSCOPED_INFO(what << ": C(" << i << "," << j << ")=" << got << " expected " << ref.value[i * N + j] << " +- "
                             << ref.bound[i * N + j]);
        }
        ++bad;
      }
    }
    for (long j = N; j < ldc; ++j) {  // padding past N must be untouched
      const float before = C_before[i * ldc + j], after = C[i * ldc + j];
      if (!(before == after || (std::isnan(before) && std::isnan(after)))) ++bad;
    }
  } INFO(what); CHECK(bad == 0));
}

/// The whole battery for one kernel: all sizes, all four transposes, alpha/beta != 1/0, and
/// beta == 0 with NaN in C.
inline void check_kernel(const std::string& name) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run_case(name, ta, tb, c, 1.5f, -0.75f, seed++);
      run_case(name, ta, tb, c, -0.5f, 0.0f, seed++);
    }
  }
  run_case(name, false, false, {9, 11, 13}, 1.0f, 1.0f, seed++);
  run_case(name, true, true, {9, 11, 13}, 0.0f, 2.0f, seed++);  // alpha = 0
}

/// Degenerate sizes: M, N or K of 0.
inline void check_degenerate(const std::string& name) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  const float a = 1, b = 1;
  // K == 0: C = beta * C.
  mls::kernels::sgemm(name, false, false, 2, 3, 0, 1.0f, &a, 1, &b, 3, 2.0f, C.data(), 3);
  mls::testing::observe(name + " C after K=0, beta=2", C);
  MLS_ORACLE_CHECK(CHECK(C == std::vector<float>{2, 4, 6, 8, 10, 12}));
  mls::kernels::sgemm(name, true, true, 2, 3, 0, 1.0f, &a, 2, &b, 1, 0.0f, C.data(), 3);
  mls::testing::observe(name + " C after K=0, beta=0", C);
  MLS_ORACLE_CHECK(CHECK(C == std::vector<float>{0, 0, 0, 0, 0, 0}));
  // M == 0 or N == 0: nothing happens, even with null pointers.
  mls::kernels::sgemm(name, false, false, 0, 3, 4, 1.0f, nullptr, 4, &b, 3, 0.0f, nullptr, 3);
  mls::kernels::sgemm(name, false, false, 2, 0, 4, 1.0f, &a, 4, nullptr, 1, 0.0f, nullptr, 1);
  SUCCEED();
}

}  // namespace kernels_test
