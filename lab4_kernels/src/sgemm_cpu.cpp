// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4, steps 1-3 of the CPU SGEMM ladder: naive, loop-reordered, cache-blocked.
// Contract of every kernel: see mls/kernels/sgemm.hpp (arguments are already validated).
#include <algorithm>

#include "mls/common/error.hpp"
#include "mls/kernels/sgemm.hpp"

namespace mls::kernels {

/// op(X)(r, c) of a row-major X with leading dimension ld: X[r*ld + c], or X[c*ld + r] when
/// transposed.
[[maybe_unused]] static inline float at(const float* X, long ld, bool trans, long r, long c) {
  return trans ? X[c * ld + r] : X[r * ld + c];
}

/// C = beta * C for an M x N block (beta == 0 writes zeros and never reads C, so NaN in C does
/// not leak into the result).
[[maybe_unused]] static void scale_c(long M, long N, float beta, float* C, long ldc) {
  for (long i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (beta == 0.0f) {
      std::fill(c, c + N, 0.0f);
    } else if (beta != 1.0f) {
      for (long j = 0; j < N; ++j) c[j] *= beta;
    }
  }
}

// 1. Given example: the definition of the product, one dot product per element of C.
void sgemm_naive(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A,
                 long lda, const float* B, long ldb, float beta, float* C, long ldc) {
  for (long i = 0; i < M; ++i) {
    for (long j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (long k = 0; k < K; ++k) acc += at(A, lda, trans_a, i, k) * at(B, ldb, trans_b, k, j);
      float& c = C[i * ldc + j];
      c = beta == 0.0f ? alpha * acc : alpha * acc + beta * c;
    }
  }
}

void sgemm_reordered(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                     const float* A, long lda, const float* B, long ldb, float beta, float* C,
                     long ldc) {
  // BEGIN SOLUTION
  scale_c(M, N, beta, C, ldc);
  // Element (k, j) of op(B) is at B[k*bk + j*bj].
  const long bk = trans_b ? 1 : ldb, bj = trans_b ? ldb : 1;
  for (long i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (long k = 0; k < K; ++k) {
      const float a = alpha * at(A, lda, trans_a, i, k);
      const float* b = B + k * bk;
      if (bj == 1) {
        for (long j = 0; j < N; ++j) c[j] += a * b[j];  // unit stride: vectorised
      } else {
        for (long j = 0; j < N; ++j) c[j] += a * b[j * bj];
      }
    }
  }
  // END SOLUTION
}

void sgemm_blocked(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                   const float* A, long lda, const float* B, long ldb, float beta, float* C,
                   long ldc) {
  // BEGIN SOLUTION
  // Tile sizes: a KB x NB tile of op(B) (256 x 512 floats = 512 KiB) stays in L2 while MB rows
  // of C stream over it; one row of it (2 KiB) and a row of the C tile fit in L1.
  constexpr long MB = 64, KB = 256, NB = 512;
  scale_c(M, N, beta, C, ldc);
  const long bk = trans_b ? 1 : ldb, bj = trans_b ? ldb : 1;
  for (long j0 = 0; j0 < N; j0 += NB) {
    const long j1 = std::min(N, j0 + NB);
    for (long k0 = 0; k0 < K; k0 += KB) {
      const long k1 = std::min(K, k0 + KB);
      for (long i0 = 0; i0 < M; i0 += MB) {
        const long i1 = std::min(M, i0 + MB);
        for (long i = i0; i < i1; ++i) {
          float* c = C + i * ldc;
          for (long k = k0; k < k1; ++k) {
            const float a = alpha * at(A, lda, trans_a, i, k);
            const float* b = B + k * bk;
            if (bj == 1) {
              for (long j = j0; j < j1; ++j) c[j] += a * b[j];
            } else {
              for (long j = j0; j < j1; ++j) c[j] += a * b[j * bj];
            }
          }
        }
      }
    }
  }
  // END SOLUTION
}

}  // namespace mls::kernels
