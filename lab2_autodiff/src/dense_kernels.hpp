#pragma once
// Internal: lab 2's dense float32 loops (fused gradient rules and optimizer updates), each
// compiled for AVX-512, AVX2 and the x86-64 baseline (GCC target_clones), the best one picked
// when the program starts. They split the range over `parallel_for` threads.
#include <cstdint>

namespace mls::autodiff::dense {

/// out[i] = x[i] > 0 ? g[i] : 0 over n values: relu's adjoint in one pass.
void relu_backward_f32(const float* g, const float* x, float* out, std::int64_t n);
/// loss[r] = logsumexp(x[r, :]) - x[r, t[r]] over `rows` dense rows of `c` values: softmax
/// cross-entropy with class targets in one pass per row (the targets are already checked to be
/// in [0, c)). The max shift, the float32 exp and the float sum folded into a double are those
/// of lab 1's log_softmax, so the value agrees with -log_softmax(x)[r, t[r]] to rounding.
void softmax_ce_rows_f32(const float* x, const std::int64_t* t, float* loss, std::int64_t rows, std::int64_t c);
/// p[i] -= lr * g[i] over n values (the product rounded to float, then the difference: the
/// roundings of `p -= mul(g, lr)`).
void sgd_step_f32(float* p, const float* g, float lr, std::int64_t n);

}  // namespace mls::autodiff::dense
