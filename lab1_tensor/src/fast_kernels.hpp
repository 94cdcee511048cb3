#pragma once
// Internal: dense float32 kernels compiled for several instruction sets (AVX-512, AVX2, and the
// x86-64 baseline), the best one picked when the program starts (GCC target_clones).
#include <cstdint>

namespace mls::inline tensor::impl {

void exp_f32(const float* x, float* out, std::int64_t n);
void sigmoid_f32(const float* x, float* out, std::int64_t n);
void relu_f32(const float* x, float* out, std::int64_t n);
void tanh_f32(const float* x, float* out, std::int64_t n);
void gelu_f32(const float* x, float* out, std::int64_t n);
/// NaN-propagating max / min of n >= 1 values.
float max_f32(const float* x, std::int64_t n);
float min_f32(const float* x, std::int64_t n);
/// Sum in 16 float lanes, folded into a double every 4096 values.
double sum_f32(const float* x, std::int64_t n);
/// acc[i] = sum_r x[r * I + i] for i in [i0, i1): column sums of a dense [R, I] block.
void sum_columns_f32(const float* x, float* acc, std::int64_t R, std::int64_t I, std::int64_t i0, std::int64_t i1);
/// out = softmax(x) over one dense row of n >= 1 values.
void softmax_row_f32(const float* x, float* out, std::int64_t n);

/// The four arithmetic ops (0 add, 1 sub, 2 mul, 3 div: the order of mls::BinaryOp) over dense
/// float32 rows, in AVX-512 or AVX2 registers. Rows of kStreamFrom values and more are written
/// with non-temporal stores: a result that large leaves the caches anyway, and streaming it
/// saves the read-for-ownership of every output line (a third of `c = a + b`'s traffic).
inline constexpr std::int64_t kStreamFrom = 1 << 20;
using DenseBinaryF32 = void (*)(const float* x, const float* y, float* out, std::int64_t n);
/// out[i] = x[i] OP y[i]; nullptr for an op other than the four.
DenseBinaryF32 dense_binary_f32(int op);
/// out[i] = x[i] OP y[0] (y a single value); nullptr for an op other than the four.
DenseBinaryF32 dense_binary_scalar_f32(int op);
/// out[i] = x[0] OP y[i] (x a single value); nullptr for an op other than the four.
DenseBinaryF32 dense_scalar_binary_f32(int op);

}  // namespace mls::tensor::impl
