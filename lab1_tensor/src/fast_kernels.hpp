#pragma once
// Internal: dense float32 kernels compiled for several instruction sets (AVX-512, AVX2, and the
// x86-64 baseline), the best one picked when the program starts (GCC target_clones).
#include <cstdint>

namespace mls::inline tensor::impl {

void exp_f32(const float* x, float* out, std::int64_t n);
void sigmoid_f32(const float* x, float* out, std::int64_t n);
/// NaN-propagating max / min of n >= 1 values.
float max_f32(const float* x, std::int64_t n);
float min_f32(const float* x, std::int64_t n);
/// Sum in 16 float lanes, folded into a double every 4096 values.
double sum_f32(const float* x, std::int64_t n);
/// acc[i] = sum_r x[r * I + i] for i in [i0, i1): column sums of a dense [R, I] block.
void sum_columns_f32(const float* x, float* acc, std::int64_t R, std::int64_t I, std::int64_t i0, std::int64_t i1);
/// out = softmax(x) over one dense row of n >= 1 values.
void softmax_row_f32(const float* x, float* out, std::int64_t n);

}  // namespace mls::tensor::impl
