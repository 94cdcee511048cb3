// Lab 2's dense float32 loops (see dense_kernels.hpp), each compiled three times by target_clones.
#include "dense_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mls/common/fastmath.hpp"
#include "mls/common/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_AUTODIFF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLS_AUTODIFF_CLONES
#endif

namespace mls::autodiff::dense {

using ::mls::fast_expf;

namespace {
/// Work below this many values runs on the calling thread (a thread hand-off costs more).
constexpr std::int64_t kGrain = 1 << 15;

MLS_AUTODIFF_CLONES void relu_backward_range(const float* __restrict g, const float* __restrict x,
                                             float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? g[i] : 0.0f;
}

MLS_AUTODIFF_CLONES void softmax_ce_range(const float* x, const std::int64_t* t, float* loss, std::int64_t r0,
                                          std::int64_t r1, std::int64_t c) {
  constexpr int kLanes = 16;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t full = c / kLanes * kLanes;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * c;
    // The c % 16 tail, padded with -inf (exp(-inf) = 0): every loop below is whole vectors.
    float tail[kLanes];
    std::fill(tail, tail + kLanes, kNegInf);
    std::copy(row + full, row + c, tail);
    float mx[kLanes];
    std::copy(tail, tail + kLanes, mx);
    for (std::int64_t j = 0; j < full; j += kLanes)
      for (int l = 0; l < kLanes; ++l) mx[l] = row[j + l] > mx[l] ? row[j + l] : mx[l];  // a NaN reaches the sum
    float m = kNegInf;
    for (float v : mx) m = v > m ? v : m;
    const float shift = std::isinf(m) ? 0.0f : m;  // a row of -inf, or a +inf: no inf - inf
    float lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) lanes[l] = fast_expf(tail[l] - shift);
    for (std::int64_t j = 0; j < full; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += fast_expf(row[j + l] - shift);
    double fold[kLanes];  // a tree, not a chain of 16 dependent adds (double sums of 16 floats barely round)
    for (int l = 0; l < kLanes; ++l) fold[l] = lanes[l];
    for (int w = kLanes / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) fold[l] += fold[l + w];
    const double total = fold[0];
    const float lse = std::log(static_cast<float>(total)) + shift;
    loss[r] = lse - row[t[r]];
  }
}

MLS_AUTODIFF_CLONES void sgd_step_range(float* __restrict p, const float* __restrict g, float lr, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float step = lr * g[i];
    p[i] -= step;
  }
}
}  // namespace

void relu_backward_f32(const float* g, const float* x, float* out, std::int64_t n) {
  parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { relu_backward_range(g + b, x + b, out + b, e - b); });
}

void softmax_ce_rows_f32(const float* x, const std::int64_t* t, float* loss, std::int64_t rows, std::int64_t c) {
  parallel_for(0, rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, c)),
               [&](std::int64_t b, std::int64_t e) { softmax_ce_range(x, t, loss, b, e, c); });
}

void sgd_step_f32(float* p, const float* g, float lr, std::int64_t n) {
  parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { sgd_step_range(p + b, g + b, lr, e - b); });
}

}  // namespace mls::autodiff::dense
