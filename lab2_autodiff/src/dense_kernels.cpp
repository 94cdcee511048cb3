// Lab 2's dense float32 loops (see dense_kernels.hpp), each compiled three times by target_clones.
#include "dense_kernels.hpp"

#include "mls/common/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_AUTODIFF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLS_AUTODIFF_CLONES
#endif

namespace mls::autodiff::dense {

namespace {
/// Work below this many values runs on the calling thread (a thread hand-off costs more).
constexpr std::int64_t kGrain = 1 << 15;

MLS_AUTODIFF_CLONES void relu_backward_range(const float* __restrict g, const float* __restrict x,
                                             float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? g[i] : 0.0f;
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

void sgd_step_f32(float* p, const float* g, float lr, std::int64_t n) {
  parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { sgd_step_range(p + b, g + b, lr, e - b); });
}

}  // namespace mls::autodiff::dense
