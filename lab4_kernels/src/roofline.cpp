// Lab 4: the compute roof (peak FMA throughput), measured with register-resident FMA chains.
#include "mls/kernels/roofline.hpp"

#include <immintrin.h>

#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"

namespace mls::kernels {

namespace {

// 12 independent accumulator chains hide the FMA latency (4 cycles x 2 or 3 pipes).
__attribute__((target("avx512f"))) float fma_loop_avx512(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

/// GFLOP/s of `threads` threads each running the FMA loop (flops = 2 * lanes * 12 per iter).
}  // namespace

double peak_gflops(bool avx512, int threads, long iters) {
  mls::ThreadCountGuard guard(threads);
  const double lanes = avx512 ? 16 : 8;
  volatile float sink = 0;
  const double s = mls::time_min(
      [&] {
        mls::parallel_for(0, threads, 1, [&](std::int64_t b, std::int64_t e) {
          for (auto t = b; t < e; ++t)
            sink = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
        });
      },
      3);
  (void)sink;
  return threads * 2.0 * lanes * 12 * iters / s * 1e-9;
}

double peak_gflops_best(int threads, long iters) {
  return peak_gflops(__builtin_cpu_supports("avx512f"), threads, iters);
}

}  // namespace mls::kernels
