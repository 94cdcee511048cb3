// Dense float32 kernels, each compiled three times (AVX-512, AVX2, baseline) by target_clones.
#include "fast_kernels.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mls/common/fastmath.hpp"
#include "mls/tensor/scalar.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLS_MULTIVERSION
#endif

namespace mls::inline tensor::impl {

MLS_MULTIVERSION void exp_f32(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = fast_expf(x[i]);
}

MLS_MULTIVERSION void sigmoid_f32(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = scalar::sigmoid(x[i]);
}

MLS_MULTIVERSION void tanh_f32(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = scalar::unary<UnaryOp::Tanh, float>(x[i]);
}

MLS_MULTIVERSION void gelu_f32(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = scalar::gelu(x[i]);
}

MLS_MULTIVERSION void relu_f32(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = scalar::relu(x[i]);
}

namespace {
constexpr int kLanes = 16;
constexpr std::int64_t kBlock = 4096;
}  // namespace

// max and min compare floats as integers: flipping the magnitude bits of negative numbers makes
// the bit patterns order like the values, and integer max/min reductions vectorize without any
// fast-math flag. NaNs are detected separately (exponent all ones, mantissa non-zero).
namespace {
inline float from_key(std::int32_t k) { return std::bit_cast<float>(k ^ ((k >> 31) & 0x7fffffff)); }
}  // namespace

MLS_MULTIVERSION float max_f32(const float* x, std::int64_t n) {
  std::int32_t m = std::numeric_limits<std::int32_t>::min();
  std::int32_t nan = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto b = std::bit_cast<std::int32_t>(x[i]);
    const std::int32_t k = b ^ ((b >> 31) & 0x7fffffff);
    m = k > m ? k : m;
    nan |= (b & 0x7fffffff) > 0x7f800000;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : from_key(m);
}

MLS_MULTIVERSION float min_f32(const float* x, std::int64_t n) {
  std::int32_t m = std::numeric_limits<std::int32_t>::max();
  std::int32_t nan = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto b = std::bit_cast<std::int32_t>(x[i]);
    const std::int32_t k = b ^ ((b >> 31) & 0x7fffffff);
    m = k < m ? k : m;
    nan |= (b & 0x7fffffff) > 0x7f800000;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : from_key(m);
}

MLS_MULTIVERSION double sum_f32(const float* x, std::int64_t n) {
  double total = 0.0;
  for (std::int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::int64_t b1 = b0 + kBlock < n ? b0 + kBlock : n;
    float lanes[kLanes] = {};
    std::int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] += x[i + j];
    }
    for (; i < b1; ++i) lanes[0] += x[i];
    for (float l : lanes) total += l;
  }
  return total;
}

MLS_MULTIVERSION void sum_columns_f32(const float* x, float* acc, std::int64_t R, std::int64_t I, std::int64_t i0,
                                       std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) acc[i] = 0.0f;
  std::int64_t r = 0;
  for (; r + 4 <= R; r += 4) {  // four rows per sweep: a quarter of the accumulator traffic
    const float* r0 = x + r * I;
    const float* r1 = r0 + I;
    const float* r2 = r1 + I;
    const float* r3 = r2 + I;
    for (std::int64_t i = i0; i < i1; ++i) acc[i] += (r0[i] + r1[i]) + (r2[i] + r3[i]);
  }
  for (; r < R; ++r) {
    const float* row = x + r * I;
    for (std::int64_t i = i0; i < i1; ++i) acc[i] += row[i];
  }
}

MLS_MULTIVERSION void softmax_row_f32(const float* x, float* out, std::int64_t n) {
  const float m = max_f32(x, n);
  const float shift = m == -std::numeric_limits<float>::infinity() ? 0.0f : m;  // all -inf: no NaN
  float lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float v = fast_expf(x[i + j] - shift);
      out[i + j] = v;
      lanes[j] += v;
    }
  }
  if (i < n) {  // the n % 16 tail as one padded block (exp(-inf) = 0): a vector, not scalar calls
    float tail[kLanes];
    for (int j = 0; j < kLanes; ++j) tail[j] = i + j < n ? x[i + j] - shift : -std::numeric_limits<float>::infinity();
    for (int j = 0; j < kLanes; ++j) {
      tail[j] = fast_expf(tail[j]);
      lanes[j] += tail[j];
    }
    for (std::int64_t k = i; k < n; ++k) out[k] = tail[k - i];
  }
  double total = 0.0;
  for (float l : lanes) total += l;
  const float inv = static_cast<float>(1.0 / total);
  for (std::int64_t k = 0; k < n; ++k) out[k] *= inv;
}

}  // namespace mls::tensor::impl

// ---- dense binary arithmetic ------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MLS_X86_KERNELS 1
#endif

namespace mls::inline tensor::impl {
namespace {

/// Which operand is a single value: none, the second (x OP c) or the first (c OP y).
enum class Form { Dense, ScalarRight, ScalarLeft };

template <int OP>
inline float apply(float a, float b) {
  if constexpr (OP == 0) return a + b;
  else if constexpr (OP == 1) return a - b;
  else if constexpr (OP == 2) return a * b;
  else return a / b;
}

template <int OP, Form F>
void binary_scalar_loop(const float* x, const float* y, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = F == Form::ScalarLeft ? x[0] : x[i];
    const float b = F == Form::ScalarRight ? y[0] : y[i];
    out[i] = apply<OP>(a, b);
  }
}

#ifdef MLS_X86_KERNELS
template <int OP>
__attribute__((target("avx512f"), always_inline)) inline __m512 apply512(__m512 a, __m512 b) {
  if constexpr (OP == 0) return _mm512_add_ps(a, b);
  else if constexpr (OP == 1) return _mm512_sub_ps(a, b);
  else if constexpr (OP == 2) return _mm512_mul_ps(a, b);
  else return _mm512_div_ps(a, b);
}

template <int OP, Form F>
__attribute__((target("avx512f"))) void binary_avx512(const float* x, const float* y, float* out, std::int64_t n) {
  std::int64_t i = 0;
  const __m512 cx = F == Form::ScalarLeft ? _mm512_set1_ps(x[0]) : _mm512_setzero_ps();
  const __m512 cy = F == Form::ScalarRight ? _mm512_set1_ps(y[0]) : _mm512_setzero_ps();
#define at(k) apply512<OP>(F == Form::ScalarLeft ? cx : _mm512_loadu_ps(x + (k)), \
                         F == Form::ScalarRight ? cy : _mm512_loadu_ps(y + (k)))
  if (n >= kStreamFrom) {
    // Up to the first 64-byte boundary of out with plain stores, then whole lines streamed.
    const auto mis = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(out) & 63) / sizeof(float));
    const std::int64_t head = reinterpret_cast<std::uintptr_t>(out) % sizeof(float) != 0 ? n : (16 - mis) & 15;
    for (; i < head && i < n; ++i) {
      out[i] = apply<OP>(F == Form::ScalarLeft ? x[0] : x[i], F == Form::ScalarRight ? y[0] : y[i]);
    }
    for (; i + 64 <= n; i += 64) {
      const __m512 r0 = at(i), r1 = at(i + 16), r2 = at(i + 32), r3 = at(i + 48);
      _mm512_stream_ps(out + i, r0);
      _mm512_stream_ps(out + i + 16, r1);
      _mm512_stream_ps(out + i + 32, r2);
      _mm512_stream_ps(out + i + 48, r3);
    }
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, at(i));
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = F == Form::ScalarLeft ? cx : _mm512_maskz_loadu_ps(m, x + i);
    // The masked-off lanes of a divisor are 1, not 0: no spurious division by zero.
    const __m512 b = F == Form::ScalarRight ? cy : _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, y + i);
    _mm512_mask_storeu_ps(out + i, m, apply512<OP>(a, b));
  }
#undef at
}

template <int OP>
__attribute__((target("avx2"), always_inline)) inline __m256 apply256(__m256 a, __m256 b) {
  if constexpr (OP == 0) return _mm256_add_ps(a, b);
  else if constexpr (OP == 1) return _mm256_sub_ps(a, b);
  else if constexpr (OP == 2) return _mm256_mul_ps(a, b);
  else return _mm256_div_ps(a, b);
}

template <int OP, Form F>
__attribute__((target("avx2"))) void binary_avx2(const float* x, const float* y, float* out, std::int64_t n) {
  std::int64_t i = 0;
  const __m256 cx = F == Form::ScalarLeft ? _mm256_set1_ps(x[0]) : _mm256_setzero_ps();
  const __m256 cy = F == Form::ScalarRight ? _mm256_set1_ps(y[0]) : _mm256_setzero_ps();
#define at(k) apply256<OP>(F == Form::ScalarLeft ? cx : _mm256_loadu_ps(x + (k)), \
                         F == Form::ScalarRight ? cy : _mm256_loadu_ps(y + (k)))
  if (n >= kStreamFrom && reinterpret_cast<std::uintptr_t>(out) % sizeof(float) == 0) {
    const auto mis = static_cast<std::int64_t>((reinterpret_cast<std::uintptr_t>(out) & 31) / sizeof(float));
    for (const std::int64_t head = (8 - mis) & 7; i < head; ++i) {
      out[i] = apply<OP>(F == Form::ScalarLeft ? x[0] : x[i], F == Form::ScalarRight ? y[0] : y[i]);
    }
    for (; i + 32 <= n; i += 32) {
      const __m256 r0 = at(i), r1 = at(i + 8), r2 = at(i + 16), r3 = at(i + 24);
      _mm256_stream_ps(out + i, r0);
      _mm256_stream_ps(out + i + 8, r1);
      _mm256_stream_ps(out + i + 16, r2);
      _mm256_stream_ps(out + i + 24, r3);
    }
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, at(i));
  for (; i < n; ++i) out[i] = apply<OP>(F == Form::ScalarLeft ? x[0] : x[i], F == Form::ScalarRight ? y[0] : y[i]);
#undef at
}
#endif

template <int OP, Form F>
DenseBinaryF32 pick() {
#ifdef MLS_X86_KERNELS
#ifndef __SANITIZE_ADDRESS__
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return &binary_avx512<OP, F>;
  if (avx2) return &binary_avx2<OP, F>;
#endif
#endif
  return &binary_scalar_loop<OP, F>;
}

template <Form F>
DenseBinaryF32 pick_op(int op) {
  switch (op) {
    case 0: return pick<0, F>();
    case 1: return pick<1, F>();
    case 2: return pick<2, F>();
    case 3: return pick<3, F>();
    default: return nullptr;
  }
}

}  // namespace

DenseBinaryF32 dense_binary_f32(int op) { return pick_op<Form::Dense>(op); }
DenseBinaryF32 dense_binary_scalar_f32(int op) { return pick_op<Form::ScalarRight>(op); }
DenseBinaryF32 dense_scalar_binary_f32(int op) { return pick_op<Form::ScalarLeft>(op); }

}  // namespace mls::tensor::impl
