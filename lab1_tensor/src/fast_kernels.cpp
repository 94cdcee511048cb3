// Dense float32 kernels, each compiled three times (AVX-512, AVX2, baseline) by target_clones.
#include "fast_kernels.hpp"

#include <bit>
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
  float tail = 0.0f;
  for (; i < n; ++i) {
    out[i] = fast_expf(x[i] - shift);
    tail += out[i];
  }
  double total = tail;
  for (float l : lanes) total += l;
  const float inv = static_cast<float>(1.0 / total);
  for (std::int64_t k = 0; k < n; ++k) out[k] *= inv;
}

}  // namespace mls::tensor::impl
