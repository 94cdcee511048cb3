// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4: fused and memory-bound CPU kernels (see mls/kernels/fused.hpp).
//
// Each kernel is a public function that splits its rows (or its elements, in blocks) over the
// threads with mls::parallel_for, and a worker on one range of them. The workers are compiled for
// AVX-512, AVX2/FMA and baseline x86-64 (target_clones; the loader picks the best one for this
// CPU, as the SGEMM picks its micro-kernel), so the build needs no -march flag. A worker must be
// its own cloned function: a lambda inside a cloned function is compiled for baseline x86-64.
//
// Memory speed needs, here (measured on the AMD EPYC Zen 4 the lab is timed on, one thread
// reaching memcpy's bandwidth only if the core's work per 16 floats stays near 10 cycles):
//   - every reduction (max, sum) in 16 or 32 independent lanes, so it vectorises (a single float
//     accumulator is a chain of dependent adds, 4 cycles each);
//   - exp and tanh without libm calls (mls::fast_expf; on AVX-512, exp2_16: 5 multiply-adds and
//     a vscalefps);
//   - 64-byte vectors that do not straddle cache lines (one that does costs two accesses): the
//     AVX-512 loops run a masked head up to a line boundary, then whole vectors (for_each16);
//   - a load that follows a store to an address 4 KiB apart waits for it (4K aliasing): rows of
//     1024 floats put every array at the same offset modulo 4 KiB, so load first, store last;
//   - outputs larger than the caches (16 MiB and more) computed into an L1 scratch row and copied
//     out with streaming (non-temporal) stores (mls::stream_copy): a plain store first reads the
//     line it writes (read-for-ownership), 3 bytes of traffic per byte written. Streaming each
//     vector as it is computed measured slower than the burst copy of a whole row;
//   - no software prefetch of the next row where the hardware prefetcher does better (softmax,
//     layernorm forward); layernorm backward's three row streams gain from one, into L2.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "mls/kernels/fused.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa.hpp"
#include "mls/common/alloc.hpp"
#include "mls/common/error.hpp"
#include "mls/common/fastmath.hpp"
#include "mls/common/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLS_CLONES
#endif

namespace mls::kernels {

// ---- helpers (given) ---------------------------------------------------------------------------

/// exp for the loops below: common's vectorizable Cephes expf (mls/common/fastmath.hpp).
[[gnu::always_inline]] static inline float expf_inline(float x) { return mls::fast_expf(x); }

float fast_expf(float x) { return expf_inline(x); }

namespace {

constexpr float kGeluKf = static_cast<float>(mls::kGeluK);
constexpr float kGeluCf = static_cast<float>(mls::kGeluC);

/// Outputs of at least this many bytes are streamed past the caches (half the 32 MiB L3 of the
/// machines we measure on): smaller ones are likely read again soon, from cache.
constexpr long kStreamMinBytes = 16L << 20;
/// Elementwise kernels work in blocks of this many floats (4 KiB, a multiple of a cache line).
constexpr long kBlock = 1024;
/// Threads are worth waking for at least this many floats (or rows x cols) per thread.
constexpr long kGrainFloats = 1L << 15;

/// `MLS_LAB4_STREAM_MIN_MB` overrides kStreamMinBytes (0: stream every output; large: never).
long stream_min_bytes() {
  static const long v = [] {
    const char* env = std::getenv("MLS_LAB4_STREAM_MIN_MB");
    return env != nullptr && *env ? std::atol(env) << 20 : kStreamMinBytes;
  }();
  return v;
}

bool stream_output(long n) { return n * static_cast<long>(sizeof(float)) >= stream_min_bytes(); }

/// dst[0:n] = src[0:n], with non-temporal stores where dst is 16-byte aligned (src: any).
[[gnu::always_inline]] inline void stream_copy(float* dst, const float* src, long n) {
#if defined(__x86_64__)
  if ((reinterpret_cast<std::uintptr_t>(dst) & 15) == 0) {
    long i = 0;
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; ++i) dst[i] = src[i];
    return;
  }
#endif
  std::copy(src, src + n, dst);
}

/// Orders this thread's streaming stores before whatever follows (call once after them).
inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

/// Rows per parallel chunk so that each chunk has about kGrainFloats floats.
long row_grain(long cols) { return std::max(1L, kGrainFloats / std::max(1L, cols)); }

/// A per-thread scratch row of n floats (for the streamed outputs of the row kernels), at the
/// same offset within a 64-byte cache line as `like` (when given), so that a loop aligned for
/// one is aligned for both.
[[maybe_unused]] float* scratch(long n, const float* like = nullptr) {
  thread_local std::vector<float> buf;
  if (static_cast<long>(buf.size()) < n + 32) buf.resize(static_cast<size_t>(n + 32));
  const auto base = reinterpret_cast<std::uintptr_t>(buf.data());
  const auto want = reinterpret_cast<std::uintptr_t>(like);
  const std::uintptr_t shift = ((0 - base) & 63) + ((want & 3) == 0 ? (want & 63) : 0);
  return buf.data() + shift / sizeof(float);
}

/// exp(d) for d = x - max <= 0 (softmax): fast_expf_core without the overflow and NaN selects,
/// 0 below exp's range (so a -inf logit gives exactly 0).
[[gnu::always_inline]] inline float exp_nonpositive(float d) {
  const float e = mls::fast_expf_core(d > mls::kExpMinF ? d : mls::kExpMinF);
  return d < mls::kExpMinF ? 0.0f : e;
}

/// |x| beyond which GELU's sigmoid(2u) is 0 or 1 to float precision; -2u stays inside exp's range
/// for |x| <= kGeluClamp (u(10) = 43.66, exp(-87.31) > FLT_MIN).
constexpr float kGeluClamp = 10.0f;

/// sigmoid(2u(x)) = 1 / (1 + exp(-2u)), u = k (x + c x^3), with x clamped to +-kGeluClamp
/// (clamping x, not -2u, leaves the compiler one select per bound instead of a blend per step).
[[gnu::always_inline]] inline float gelu_sigmoid(float x) {
  float xc = x < kGeluClamp ? x : kGeluClamp;
  xc = xc > -kGeluClamp ? xc : -kGeluClamp;
  const float u = kGeluKf * (xc + kGeluCf * xc * xc * xc);
  return 1.0f / (1.0f + mls::fast_expf_core(-2.0f * u));
}

/// GELU through the sigmoid: 0.5 x (1 + tanh u) = x sigmoid(2u), u = k (x + c x^3); no
/// cancellation in 1 + tanh u for x << 0, one exp and one division per element.
[[gnu::always_inline]] inline float gelu_inline(float x) { return x * gelu_sigmoid(x); }

}  // namespace

// ---- AVX-512 versions of the row and exp-heavy kernels -------------------------------------------
// GCC does not turn the clamps of the portable loops into vminps/vmaxps (it blends each step of
// exp for the clamped lanes instead), has no masked heads and tails, and cannot be told to load
// before it stores: the portable GELU loop is ~40 instructions per 16 floats, these ~20, which
// is what memory speed needs on one core. Chosen at run time with the SGEMM's micro-kernel
// (detail::use_avx512()).

#if defined(__x86_64__) && defined(__GNUC__)
#define MLS_AVX512 __attribute__((target("avx512f")))
#define MLS_HAVE_AVX512_PATH 1
// GCC 12's AVX-512 intrinsics (_mm512_max_ps, ...) pass _mm512_undefined_ps() as the unused
// merge source, which -Wmaybe-uninitialized reports at -O3: a known false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/// 2^t on 16 lanes: t = n + f with n = round(t) and |f| <= 1/2, 2^f by a degree-5 polynomial
/// (relative error below 2e-7), times 2^n by vscalefps (exact: a power of two). Lanes with
/// n <= -127 (t below about -126.5, -inf included) are exactly 0, NaN stays NaN. exp(x) is
/// 2^(x log2e): the callers fold log2e into a multiply they do anyway. 9 vector operations, 5 of
/// them multiply-adds (a Cody-Waite exp takes 12; 2^n built in the exponent field by hand and a
/// clamp, 11), and the FP pipes are what bounds these loops.
/// The zero lanes are masked off before the scaling, not left to underflow: a result that
/// underflows costs a microcode assist on many Intel cores. kZeroBelow = false skips the mask
/// (GELU: its clamp keeps t >= -126), 5% faster there.
/// The polynomial's coefficients are mls::kExp2Poly (mls/common/fastmath.hpp), highest degree
/// first: the generated code's exp (CodegenOptions::fast_exp2) evaluates the same ones.
/// Hint: _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) is round(t);
/// _mm512_maskz_scalef_ps(k, p, n) is p 2^n in the lanes of k, 0 elsewhere.
template <bool kZeroBelow = true>
MLS_AVX512 static inline __m512 exp2_16(__m512 t) {
  // BEGIN SOLUTION
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  // minimax fit of 2^f on [-1/2, 1/2] (relative error), Horner: mls::kExp2Poly
  __m512 p = _mm512_set1_ps(mls::kExp2Poly[0]);
  for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(mls::kExp2Poly[k]));
  if constexpr (!kZeroBelow) return _mm512_scalef_ps(p, n);
  // lanes with n > -127, or NaN
  const __mmask16 keep = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-127.0f), _CMP_NLE_UQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
  // END SOLUTION
}

/// 1 + exp(-2u(x)) on 16 lanes, x clamped to +-kGeluClamp (see gelu_sigmoid): GELU is
/// x / this, its sigmoid 1 / this. Hint: -2u log2e = xc (a + b xc^2) with log2e folded into a, b.
MLS_AVX512 static inline __m512 gelu_denominator16(__m512 x) {
  // BEGIN SOLUTION
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 xc =
      _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kGeluClamp)), _mm512_set1_ps(-kGeluClamp));
  const __m512 t = _mm512_mul_ps(
      xc, _mm512_fmadd_ps(_mm512_mul_ps(xc, xc), _mm512_set1_ps(-2.0f * kGeluKf * kGeluCf * kLog2e),
                          _mm512_set1_ps(-2.0f * kGeluKf * kLog2e)));
  return _mm512_add_ps(_mm512_set1_ps(1.0f), exp2_16<false>(t));
  // END SOLUTION
}

/// GELU on 16 lanes: x sigmoid(2u) = x / (1 + exp(-2u)), one division.
MLS_AVX512 static inline __m512 gelu16(__m512 x) {
  return _mm512_div_ps(x, gelu_denominator16(x));
}

/// Horizontal max and sum of 16 lanes, in registers (4 shuffle steps; the result in every lane).
/// Once per row and pass, but a row is only 64 vectors: through memory, a 64-byte store read
/// back as 16 floats costs a store-forwarding stall per row.
MLS_AVX512 static inline __m512 hmax16(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // 256-bit halves
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // 128-bit quarters
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));        // pairs within 128 bits
  return _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));     // neighbours
}
MLS_AVX512 static inline __m512 hsum16(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
}

/// Lanes [0, n) of 16 (n < 16: a masked tail).
MLS_AVX512 static inline __mmask16 tail_mask(long n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

/// Calls body(c, m, k) for the 16-float vectors of [0, n): a masked head up to the first
/// 64-byte boundary of `align` (the array whose accesses should not straddle cache lines: a
/// 64-byte access that does costs two), whole vectors two at a time (m all ones, a constant
/// the compiler folds into plain loads and stores; k = 0 and 1, so a reduction can keep two
/// independent accumulators acc[k]), a masked tail. body is a lambda marked MLS_AVX512 (a
/// lambda does not inherit its function's target).
/// A pass that reduces (a sum) passes align = nullptr: no head, vectors at c = 0, 16, ..., so
/// element c lands in lane c % 16 of acc[c / 16 % 2] wherever the row sits in memory. Aligned
/// to the row, the lanes would depend on its address and so would the sum's rounding: the same
/// row in two buffers would give results that differ in the last bit (lab 6 checks its training
/// bit for bit across thread counts and memory plans).
template <class Body>
[[gnu::always_inline]] MLS_AVX512 static inline void for_each16(const float* align, long n,
                                                                Body&& body) {
  const auto addr = reinterpret_cast<std::uintptr_t>(align);
  long c = align != nullptr && (addr & 3) == 0
               ? std::min(n, static_cast<long>(((0 - addr) & 63) / 4))
               : 0;
  if (c > 0) body(0L, tail_mask(c), 0);
  for (; c + 32 <= n; c += 32) {
    body(c, static_cast<__mmask16>(0xFFFF), 0);
    body(c + 16, static_cast<__mmask16>(0xFFFF), 1);
  }
  if (c + 16 <= n) {
    body(c, static_cast<__mmask16>(0xFFFF), 0);
    c += 16;
  }
  if (c < n) body(c, tail_mask(n - c), 1);
}

/// Loads and stores of the lanes in m (the others: 0 / left alone).
MLS_AVX512 static inline __m512 load16(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
MLS_AVX512 static inline void store16(float* p, __mmask16 m, __m512 v) {
  _mm512_mask_storeu_ps(p, m, v);
}
/// Prefetches the cache line at p into L1 / into L2 only. Measured on the AMD EPYC (Zen 4) this
/// lab is timed on: softmax and layernorm forward run faster with the hardware prefetcher alone
/// (a software prefetch of the next row costs load slots and buys nothing), layernorm backward
/// (three row streams) faster with the next rows prefetched into L2 (not L1: rows of 1024 floats
/// sit 4 KiB apart, so x, dy, dx, w, dw and db all map to the same L1 set, 6 of its 8 ways) and
/// this row's dx into L1 while the row means are summed.
MLS_AVX512 static inline void prefetch(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
MLS_AVX512 static inline void prefetch_l2(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}

/// gelu_range with AVX-512: out[i] = x / (1 + exp(-2u)), in blocks of kBlock floats computed
/// into an L1 buffer and streamed out when `stream`.
MLS_AVX512 static void gelu_range_avx512(float* out, const float* inp, long i0, long i1,
                                         bool stream) {
  // BEGIN SOLUTION
  for (long b = i0; b < i1; b += kBlock) {
    const long n = std::min(kBlock, i1 - b);
    const float* x = inp + b;
    float* o = stream ? scratch(kBlock, out + b) : out + b;
    for_each16(o, n, [&](long c, __mmask16 m, int) MLS_AVX512 {
      store16(o + c, m, gelu16(load16(x + c, m)));
    });
    if (stream) mls::stream_copy(out + b, o, static_cast<std::size_t>(n) * sizeof(float), false);
  }
  if (stream) mls::stream_fence();
  // END SOLUTION
}

/// bias_gelu_rows with AVX-512 (rows of `cols`, the bias added before the GELU): each row
/// computed into the output, or into an L1 scratch row streamed out when `stream`.
MLS_AVX512 static void bias_gelu_rows_avx512(float* out, const float* inp, const float* bias,
                                             long r0, long r1, long cols, bool stream) {
  // BEGIN SOLUTION
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;  // (cols,)
    float* y = out + r * cols;        // (cols,)
    float* o = stream ? scratch(cols, y) : y;
    for_each16(o, cols, [&](long c, __mmask16 m, int) MLS_AVX512 {
      store16(o + c, m, gelu16(_mm512_add_ps(load16(x + c, m), load16(bias + c, m))));
    });
    if (stream) mls::stream_copy(y, o, static_cast<std::size_t>(cols) * sizeof(float), false);
  }
  if (stream) mls::stream_fence();
  // END SOLUTION
}

/// gelu_backward_range with AVX-512: dinp += dout * (s + 2 x s (1 - s) u').
MLS_AVX512 static void gelu_backward_range_avx512(float* dinp, const float* inp, const float* dout,
                                                  long i0, long i1) {
  // BEGIN SOLUTION
  const __m512 one = _mm512_set1_ps(1.0f);
  const float* x = inp + i0;
  const float* dy = dout + i0;
  float* dx = dinp + i0;
  for_each16(dx, i1 - i0, [&](long c, __mmask16 m, int) MLS_AVX512 {
    const __m512 xv = load16(x + c, m);
    const __m512 s = _mm512_div_ps(one, gelu_denominator16(xv));
    // du = k (1 + 3c x^2); grad = s + 2 x s (1 - s) du
    const __m512 du = _mm512_fmadd_ps(_mm512_mul_ps(xv, xv), _mm512_set1_ps(3.0f * kGeluKf * kGeluCf),
                                      _mm512_set1_ps(kGeluKf));
    const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(xv, xv), s), _mm512_sub_ps(one, s));
    const __m512 grad = _mm512_fmadd_ps(t, du, s);
    store16(dx + c, m, _mm512_fmadd_ps(grad, load16(dy + c, m), load16(dx + c, m)));
  });
  // END SOLUTION
}

/// softmax_rows with AVX-512, three passes over a row in L1: the max; e = 2^((x - max) log2e)
/// (one fmsub per 16, then exp2_16) stored and summed; e scaled by 1 / sum. `e` is the output
/// row, or an L1 scratch row streamed out when `stream`.
MLS_AVX512 static void softmax_rows_avx512(float* out, const float* inp, long r0, long r1,
                                           long cols, bool stream) {
  // BEGIN SOLUTION
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 l2e = _mm512_set1_ps(kLog2e);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;  // (cols,)
    float* y = out + r * cols;        // (cols,)
    float* e = stream ? scratch(cols) : y;  // (a scratch row is 64-byte aligned)
    __m512 mx[2] = {neg_inf, neg_inf};
    for_each16(nullptr, cols, [&](long c, __mmask16 m, int k) MLS_AVX512 {
      mx[k] = _mm512_max_ps(mx[k], _mm512_mask_loadu_ps(neg_inf, m, x + c));
    });
    // t = x log2e - max log2e in one fmsub (-inf for a -inf logit: exp2_16 gives 0).
    const __m512 shift = _mm512_mul_ps(hmax16(_mm512_max_ps(mx[0], mx[1])), l2e);
    __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for_each16(nullptr, cols, [&](long c, __mmask16 m, int k) MLS_AVX512 {
      const __m512 t = _mm512_fmsub_ps(load16(x + c, m), l2e, shift);
      const __m512 ev = _mm512_maskz_mov_ps(m, exp2_16(t));
      store16(e + c, m, ev);
      sum[k] = _mm512_add_ps(sum[k], ev);
    });
    const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), hsum16(_mm512_add_ps(sum[0], sum[1])));
    for_each16(e, cols, [&](long c, __mmask16 m, int) MLS_AVX512 {
      store16(e + c, m, _mm512_mul_ps(load16(e + c, m), inv));
    });
    if (stream) mls::stream_copy(y, e, static_cast<std::size_t>(cols) * sizeof(float), false);
  }
  if (stream) mls::stream_fence();
  // END SOLUTION
}

/// layernorm_rows with AVX-512: the mean (32 lanes), the variance around it (32 lanes), then
/// y = (x - mean) rstd w + b; three passes over a row in L1, the output streamed when `stream`.
MLS_AVX512 static void layernorm_rows_avx512(float* out, float* mean, float* rstd,
                                             const float* inp, const float* weight,
                                             const float* bias, long r0, long r1, long cols,
                                             float eps, bool stream) {
  // BEGIN SOLUTION
  const __m512 fcols = _mm512_set1_ps(static_cast<float>(cols)), epsv = _mm512_set1_ps(eps);
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;  // (cols,)
    float* y = out + r * cols;        // (cols,)
    float* o = stream ? scratch(cols, y) : y;
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for_each16(nullptr, cols, [&](long c, __mmask16 m, int k) MLS_AVX512 {
      acc[k] = _mm512_add_ps(acc[k], load16(x + c, m));
    });
    const __m512 mv = _mm512_div_ps(hsum16(_mm512_add_ps(acc[0], acc[1])), fcols);
    acc[0] = acc[1] = _mm512_setzero_ps();
    for_each16(nullptr, cols, [&](long c, __mmask16 m, int k) MLS_AVX512 {
      const __m512 d = _mm512_maskz_sub_ps(m, load16(x + c, m), mv);
      acc[k] = _mm512_fmadd_ps(d, d, acc[k]);
    });
    const __m512 var = _mm512_div_ps(hsum16(_mm512_add_ps(acc[0], acc[1])), fcols);
    const __m512 rv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(_mm512_add_ps(var, epsv)));
    for_each16(o, cols, [&](long c, __mmask16 m, int) MLS_AVX512 {
      const __m512 n = _mm512_mul_ps(_mm512_sub_ps(load16(x + c, m), mv), rv);
      store16(o + c, m, _mm512_fmadd_ps(n, load16(weight + c, m), load16(bias + c, m)));
    });
    if (stream) mls::stream_copy(y, o, static_cast<std::size_t>(cols) * sizeof(float), false);
    mean[r] = _mm512_cvtss_f32(mv);
    rstd[r] = _mm512_cvtss_f32(rv);
  }
  if (stream) mls::stream_fence();
  // END SOLUTION
}

/// layernorm_backward_rows with AVX-512: per row, the two row means (32-lane sums; this row's
/// dx prefetched meanwhile), then dx, dw, db elementwise (the next row prefetched).
MLS_AVX512 static void layernorm_backward_rows_avx512(float* dinp, float* dw, float* db,
                                                      const float* dout, const float* inp,
                                                      const float* weight, const float* mean,
                                                      const float* rstd, long r0, long r1,
                                                      long cols) {
  // BEGIN SOLUTION
  const __m512 inv_cols = _mm512_set1_ps(1.0f / static_cast<float>(cols));
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;    // (cols,)
    const float* dy = dout + r * cols;  // (cols,)
    float* dx = dinp + r * cols;        // (cols,)
    const float* xn = r + 1 < r1 ? x + cols : x;  // the rows to prefetch
    const float* dyn = r + 1 < r1 ? dy + cols : dy;
    const __m512 mv = _mm512_set1_ps(mean[r]), rv = _mm512_set1_ps(rstd[r]);
    __m512 g_sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, gn_sum[2] = {g_sum[0], g_sum[0]};
    for_each16(nullptr, cols, [&](long c, __mmask16 m, int k) MLS_AVX512 {
      prefetch(dx + c);  // for the second pass
      const __m512 n = _mm512_mul_ps(_mm512_sub_ps(load16(x + c, m), mv), rv);
      const __m512 g = _mm512_mul_ps(load16(weight + c, m), load16(dy + c, m));  // dnorm
      g_sum[k] = _mm512_add_ps(g_sum[k], g);
      gn_sum[k] = _mm512_fmadd_ps(g, n, gn_sum[k]);
    });
    const __m512 g_mean = _mm512_mul_ps(hsum16(_mm512_add_ps(g_sum[0], g_sum[1])), inv_cols);
    const __m512 gn_mean = _mm512_mul_ps(hsum16(_mm512_add_ps(gn_sum[0], gn_sum[1])), inv_cols);
    for_each16(dx, cols, [&](long c, __mmask16 m, int) MLS_AVX512 {
      prefetch_l2(xn + c);  // (x, dy, dx, w, dw, db already take 6 of the 8 ways of a set)
      prefetch_l2(dyn + c);
      // every load before the first store: dx, dw and db sit at the same offsets modulo 4 KiB
      // as x, dy and w (rows of 1024 floats), so a load issued after a store to another array
      // looks to the CPU like it may depend on it (4K aliasing) and waits for it.
      const __m512 dyv = load16(dy + c, m), xv = load16(x + c, m), wv = load16(weight + c, m);
      const __m512 dbv = load16(db + c, m), dwv = load16(dw + c, m), dxv = load16(dx + c, m);
      const __m512 n = _mm512_mul_ps(_mm512_sub_ps(xv, mv), rv);
      // dx += (dnorm - mean(dnorm) - norm mean(dnorm norm)) rstd
      const __m512 t = _mm512_fnmadd_ps(n, gn_mean, _mm512_sub_ps(_mm512_mul_ps(wv, dyv), g_mean));
      store16(db + c, m, _mm512_add_ps(dbv, dyv));
      store16(dw + c, m, _mm512_fmadd_ps(n, dyv, dwv));
      store16(dx + c, m, _mm512_fmadd_ps(t, rv, dxv));
    });
  }
  // END SOLUTION
}
#pragma GCC diagnostic pop
#else
#define MLS_HAVE_AVX512_PATH 0
#endif

// ---- what students write -----------------------------------------------------------------------

/// Worker of fused_add_mul_add on elements [i0, i1) (i0 a multiple of kBlock): one pass, each
/// block computed into an L1 buffer and streamed out when `stream`, else written in place.
/// Hint: `E[i] = D[i] + (A[i] + B[i]) * C[i]` in a loop the compiler vectorises.
MLS_CLONES static void add_mul_add_range(long i0, long i1, const float* A, const float* B,
                                         const float* C, const float* D, float* E, bool stream) {
  // BEGIN SOLUTION
  alignas(64) float buf[kBlock];
  for (long b = i0; b < i1; b += kBlock) {
    const long m = std::min(kBlock, i1 - b);
    float* out = stream ? buf : E + b;
    const float *a = A + b, *bb = B + b, *c = C + b, *d = D + b;
    for (long i = 0; i < m; ++i) out[i] = d[i] + (a[i] + bb[i]) * c[i];
    if (stream) stream_copy(E + b, buf, m);
  }
  if (stream) stream_fence();
  // END SOLUTION
}

void fused_add_mul_add(long n, const float* A, const float* B, const float* C, const float* D,
                       float* E) {
  const bool stream = stream_output(n);
  const long blocks = (n + kBlock - 1) / kBlock;
  mls::parallel_for(0, blocks, kGrainFloats / kBlock, [&](std::int64_t b0, std::int64_t b1) {
    add_mul_add_range(b0 * kBlock, std::min<long>(n, b1 * kBlock), A, B, C, D, E, stream);
  });
}

/// Worker of softmax_forward on rows [r0, r1). Three passes over a row, which stays in L1/L2:
/// max (32 lanes), exp and sum (32 lanes), scale; the last one streams the row out when `stream`.
/// Hint: keep `float lanes[32]` of partial maxima/sums: `for (l < 32) lanes[l] = ...x[c0 + l]`
/// is one or two SIMD instructions per 32 elements, and the 32 partial sums are independent.
MLS_CLONES static void softmax_rows(float* out, const float* inp, long r0, long r1, long cols,
                                    bool stream) {
  // BEGIN SOLUTION
  constexpr int L = 32;
  float* tmp = stream ? scratch(cols) : nullptr;
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;              // (cols,)
    const float* xn = r + 1 < r1 ? x + cols : x;  // the row to prefetch
    float* y = out + r * cols;                    // (cols,)
    float* e = stream ? tmp : y;                  // exp(x - max), before scaling
    float lanes[L];
    for (float& l : lanes) l = -INFINITY;
    long c0 = 0;
    for (; c0 + L <= cols; c0 += L) {
      for (int l = 0; l < L; ++l) lanes[l] = lanes[l] > x[c0 + l] ? lanes[l] : x[c0 + l];
    }
    float mx = -INFINITY;
    for (float l : lanes) mx = std::max(mx, l);
    for (long c = c0; c < cols; ++c) mx = std::max(mx, x[c]);
    for (float& l : lanes) l = 0.0f;
    c0 = 0;
    for (; c0 + L <= cols; c0 += L) {
      __builtin_prefetch(xn + c0);  // the next row, while this one is in L1
      __builtin_prefetch(xn + c0 + 16);
      for (int l = 0; l < L; ++l) {
        const float v = exp_nonpositive(x[c0 + l] - mx);
        e[c0 + l] = v;
        lanes[l] += v;
      }
    }
    float sum = 0.0f;
    for (long c = c0; c < cols; ++c) {
      e[c] = exp_nonpositive(x[c] - mx);
      sum += e[c];
    }
    for (float l : lanes) sum += l;
    const float inv = 1.0f / sum;
    for (long c = 0; c < cols; ++c) e[c] *= inv;
    if (stream) stream_copy(y, e, cols);
  }
  if (stream) stream_fence();
  // END SOLUTION
}

void softmax_forward(float* out, const float* inp, long rows, long cols) {
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  const bool stream = stream_output(rows * cols);
  mls::parallel_for(0, rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512) return softmax_rows_avx512(out, inp, r0, r1, cols, stream);
#endif
    softmax_rows(out, inp, r0, r1, cols, stream);
  });
}

/// Worker of layernorm_forward on rows [r0, r1): mean, then the variance around it (two passes
/// over the row in cache, 32-lane sums), then the normalised row, streamed out when `stream`.
/// Hint: as softmax_rows; the variance as mean((x - m)^2), which does not cancel.
MLS_CLONES static void layernorm_rows(float* out, float* mean, float* rstd, const float* inp,
                                      const float* weight, const float* bias, long r0, long r1,
                                      long cols, float eps, bool stream) {
  // BEGIN SOLUTION
  constexpr int L = 32;
  float* tmp = stream ? scratch(cols) : nullptr;
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;              // (cols,)
    const float* xn = r + 1 < r1 ? x + cols : x;  // the row to prefetch
    float* y = out + r * cols;                    // (cols,)
    float lanes[L] = {};
    long c0 = 0;
    for (; c0 + L <= cols; c0 += L) {
      for (int l = 0; l < L; ++l) lanes[l] += x[c0 + l];
    }
    float s = 0.0f;
    for (long c = c0; c < cols; ++c) s += x[c];
    for (float l : lanes) s += l;
    const float m = s / static_cast<float>(cols);
    for (float& l : lanes) l = 0.0f;
    c0 = 0;
    for (; c0 + L <= cols; c0 += L) {
      __builtin_prefetch(xn + c0);  // the next row, while this one is in L1
      __builtin_prefetch(xn + c0 + 16);
      for (int l = 0; l < L; ++l) lanes[l] += (x[c0 + l] - m) * (x[c0 + l] - m);
    }
    float v = 0.0f;
    for (long c = c0; c < cols; ++c) v += (x[c] - m) * (x[c] - m);
    for (float l : lanes) v += l;
    const float rs = 1.0f / std::sqrt(v / static_cast<float>(cols) + eps);
    float* o = stream ? tmp : y;
    for (long c = 0; c < cols; ++c) o[c] = (x[c] - m) * rs * weight[c] + bias[c];
    if (stream) stream_copy(y, o, cols);
    mean[r] = m;
    rstd[r] = rs;
  }
  if (stream) stream_fence();
  // END SOLUTION
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long rows, long cols, float eps) {
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  const bool stream = stream_output(rows * cols);
  mls::parallel_for(0, rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512)
      return layernorm_rows_avx512(out, mean, rstd, inp, weight, bias, r0, r1, cols, eps, stream);
#endif
    layernorm_rows(out, mean, rstd, inp, weight, bias, r0, r1, cols, eps, stream);
  });
}

/// Worker of layernorm_backward on rows [r0, r1), accumulating dweight/dbias into dw/db (the
/// caller's, or a per-thread partial the caller adds up). Two passes over a row in cache: the two
/// row means (32-lane sums), then dx, dw, db elementwise.
MLS_CLONES static void layernorm_backward_rows(float* dinp, float* dw, float* db, const float* dout,
                                               const float* inp, const float* weight,
                                               const float* mean, const float* rstd, long r0,
                                               long r1, long cols) {
  // BEGIN SOLUTION
  constexpr int L = 32;
  for (long r = r0; r < r1; ++r) {
    const float* __restrict x = inp + r * cols;    // (cols,)
    const float* __restrict dy = dout + r * cols;  // (cols,)
    float* __restrict dx = dinp + r * cols;        // (cols,)
    const float* xn = r + 1 < r1 ? x + cols : x;   // the rows to prefetch
    const float* dyn = r + 1 < r1 ? dy + cols : dy;
    const float m = mean[r], rs = rstd[r];
    float l_mean[L] = {}, l_norm[L] = {};
    long c0 = 0;
    for (; c0 + L <= cols; c0 += L) {
      __builtin_prefetch(dx + c0);  // this row's dx, for the second pass
      __builtin_prefetch(dx + c0 + 16);
      __builtin_prefetch(xn + c0);  // the next row
      __builtin_prefetch(xn + c0 + 16);
      __builtin_prefetch(dyn + c0);
      __builtin_prefetch(dyn + c0 + 16);
      for (int l = 0; l < L; ++l) {
        const float norm = (x[c0 + l] - m) * rs;
        const float dnorm = weight[c0 + l] * dy[c0 + l];
        l_mean[l] += dnorm;
        l_norm[l] += dnorm * norm;
      }
    }
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (long c = c0; c < cols; ++c) {
      const float norm = (x[c] - m) * rs;
      const float dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    for (int l = 0; l < L; ++l) {
      dnorm_mean += l_mean[l];
      dnorm_norm_mean += l_norm[l];
    }
    dnorm_mean /= static_cast<float>(cols);
    dnorm_norm_mean /= static_cast<float>(cols);
#pragma GCC ivdep  // dx, dw and db never overlap (GCC gives up on checking 5 streams at run time)
    for (long c = 0; c < cols; ++c) {
      // every load before the first store (4K aliasing: see layernorm_backward_rows_avx512)
      const float xc = x[c], dyc = dy[c], wc = weight[c], dbc = db[c], dwc = dw[c], dxc = dx[c];
      const float norm = (xc - m) * rs;
      const float dnorm = wc * dyc;
      db[c] = dbc + dyc;
      dw[c] = dwc + norm * dyc;
      dx[c] = dxc + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
    }
  }
  // END SOLUTION
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        long rows, long cols) {
  // One range of rows per thread; each but the first accumulates dweight/dbias into its own
  // zeroed partial, added to the caller's at the end (the first adds into them directly).
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  const auto rows_worker = [&](float* dw, float* db, long r0, long r1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512)
      return layernorm_backward_rows_avx512(dinp, dw, db, dout, inp, weight, mean, rstd, r0, r1,
                                            cols);
#endif
    layernorm_backward_rows(dinp, dw, db, dout, inp, weight, mean, rstd, r0, r1, cols);
  };
  const long threads = std::min<long>(mls::num_threads(), rows / row_grain(cols));
  if (threads <= 1) {
    rows_worker(dweight, dbias, 0, rows);
    return;
  }
  std::vector<float> partial(static_cast<size_t>(2 * (threads - 1) * cols), 0.0f);
  const long step = (rows + threads - 1) / threads;
  mls::parallel_for(0, threads, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      float* dw = p == 0 ? dweight : partial.data() + 2 * (p - 1) * cols;
      float* db = p == 0 ? dbias : dw + cols;
      rows_worker(dw, db, p * step, std::min(rows, (p + 1) * step));
    }
  });
  for (long p = 1; p < threads; ++p) {
    const float* dw = partial.data() + 2 * (p - 1) * cols;
    for (long c = 0; c < cols; ++c) {
      dweight[c] += dw[c];
      dbias[c] += dw[cols + c];
    }
  }
}

/// Worker of gelu_forward on elements [i0, i1) (i0 a multiple of kBlock), blocks streamed out
/// when `stream`. Hint: x / (1 + exp(-2u)) is 0.5 x (1 + tanh u) with one exp (gelu_inline).
MLS_CLONES static void gelu_range(float* out, const float* inp, long i0, long i1, bool stream) {
  // BEGIN SOLUTION
  alignas(64) float buf[kBlock];
  for (long b = i0; b < i1; b += kBlock) {
    const long m = std::min(kBlock, i1 - b);
    float* o = stream ? buf : out + b;
    const float* x = inp + b;
    for (long i = 0; i < m; ++i) o[i] = gelu_inline(x[i]);
    if (stream) stream_copy(out + b, buf, m);
  }
  if (stream) stream_fence();
  // END SOLUTION
}

void gelu_forward(float* out, const float* inp, long n) {
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  const bool stream = stream_output(n);
  const long blocks = (n + kBlock - 1) / kBlock;
  mls::parallel_for(0, blocks, kGrainFloats / kBlock, [&](std::int64_t b0, std::int64_t b1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512)
      return gelu_range_avx512(out, inp, b0 * kBlock, std::min<long>(n, b1 * kBlock), stream);
#endif
    gelu_range(out, inp, b0 * kBlock, std::min<long>(n, b1 * kBlock), stream);
  });
}

/// Worker of bias_gelu_forward on rows [r0, r1): out = gelu(inp + bias) per row.
MLS_CLONES static void bias_gelu_rows(float* out, const float* inp, const float* bias, long r0,
                                      long r1, long cols, bool stream) {
  // BEGIN SOLUTION
  float* tmp = stream ? scratch(cols) : nullptr;
  for (long r = r0; r < r1; ++r) {
    const float* x = inp + r * cols;  // (cols,)
    float* y = out + r * cols;        // (cols,)
    float* o = stream ? tmp : y;
    for (long c = 0; c < cols; ++c) o[c] = gelu_inline(x[c] + bias[c]);
    if (stream) stream_copy(y, o, cols);
  }
  if (stream) stream_fence();
  // END SOLUTION
}

void bias_gelu_forward(float* out, const float* inp, const float* bias, long rows, long cols) {
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  const bool stream = stream_output(rows * cols);
  mls::parallel_for(0, rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512) return bias_gelu_rows_avx512(out, inp, bias, r0, r1, cols, stream);
#endif
    bias_gelu_rows(out, inp, bias, r0, r1, cols, stream);
  });
}

/// Worker of gelu_backward on elements [i0, i1): dinp += dout * gelu'(x). With s = sigmoid(2u)
/// (gelu = x s): gelu' = s + 2 x s (1 - s) u', u' = k (1 + 3 c x^2).
MLS_CLONES static void gelu_backward_range(float* dinp, const float* inp, const float* dout,
                                           long i0, long i1) {
  // BEGIN SOLUTION
  for (long i = i0; i < i1; ++i) {
    const float x = inp[i];
    const float s = gelu_sigmoid(x);
    const float du = kGeluKf * (1.0f + 3.0f * kGeluCf * x * x);
    dinp[i] += (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
  // END SOLUTION
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long n) {
  [[maybe_unused]] const bool avx512 = detail::use_avx512();
  mls::parallel_for(0, n, kGrainFloats, [&](std::int64_t i0, std::int64_t i1) {
#if MLS_HAVE_AVX512_PATH
    if (avx512) return gelu_backward_range_avx512(dinp, inp, dout, i0, i1);
#endif
    gelu_backward_range(dinp, inp, dout, i0, i1);
  });
}

}  // namespace mls::kernels
