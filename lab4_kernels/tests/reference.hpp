#pragma once
// Independent references and helpers for the lab 4 tests (double precision, no lab code).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "mls/common/rng.hpp"

namespace kernels_test {

/// Uniform floats in [-1, 1) from a named stream.
inline std::vector<float> random_vec(std::size_t n, std::uint64_t seed, const char* stream) {
  mls::Rng rng(seed, stream);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform(-1.0, 1.0));
  return v;
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// Double-precision C = alpha op(A) op(B) + beta C0, plus the error bound of each element:
/// a float32 dot product of length K has |error| <= gamma_K * sum_k |a_k b_k| with
/// gamma_K ~ K * eps (Higham, Accuracy and Stability, 3.1); scaling and the beta term add a
/// few roundings more, hence (K + 4) * eps; the factor 2 leaves room for FMA-vs-mul+add and
/// blocked summation orders.
struct Reference {
  std::vector<double> value, bound;
};

inline Reference reference_sgemm(bool ta, bool tb, long M, long N, long K, float alpha,
                                 const float* A, long lda, const float* B, long ldb, float beta,
                                 const float* C0, long ldc) {
  const double eps = std::numeric_limits<float>::epsilon();
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (long i = 0; i < M; ++i) {
    for (long j = 0; j < N; ++j) {
      double dot = 0, absdot = 0;
      for (long k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        dot += a * b;
        absdot += std::fabs(a * b);
      }
      const double c0 = beta == 0.0f ? 0.0 : static_cast<double>(beta) * C0[i * ldc + j];
      r.value[i * N + j] = alpha * dot + c0;
      r.bound[i * N + j] =
          2.0 * (K + 4) * eps * (std::fabs(alpha) * absdot + std::fabs(c0)) + 1e-30;
    }
  }
  return r;
}

#endif  // MLS_GRADED_BUILD

}  // namespace kernels_test
