#pragma once
// Internal: the strided loop every elementwise op, copy and reduction is built on.
//
// Given an iteration shape and, for each of N operands, a base pointer and strides (in
// elements, already broadcast to the iteration shape), `for_each_row` calls
//   f(std::array<char*, N> ptrs, std::array<int64_t, N> inner_strides_in_bytes, int64_t n)
// once per innermost row. Dimensions of size 1 are dropped and dimensions that are contiguous
// with each other in every operand are merged first, so a dense tensor is one long row.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/common/shape.hpp"

namespace mls::inline tensor::impl {

/// Elements per parallel task: below this a loop runs on one thread.
inline constexpr std::int64_t kParallelGrain = 1 << 15;

template <std::size_t N>
struct LoopPlan {
  Shape shape;                                  // collapsed iteration shape
  std::array<std::vector<std::int64_t>, N> strides;  // in bytes, per operand per dim
};

/// Drops size-1 dims and merges dims that are contiguous in every operand.
template <std::size_t N>
LoopPlan<N> plan_loop(const Shape& shape, const std::array<const std::int64_t*, N>& strides,
                      const std::array<std::int64_t, N>& itemsizes) {
  LoopPlan<N> plan;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    plan.shape.push_back(shape[d]);
    for (std::size_t k = 0; k < N; ++k) plan.strides[k].push_back(strides[k][d] * itemsizes[k]);
  }
  // Merge from the right: dim i-1 folds into dim i when stride[i-1] == stride[i] * shape[i].
  for (std::size_t i = plan.shape.size(); i-- > 1;) {
    bool ok = true;
    for (std::size_t k = 0; k < N; ++k) {
      ok = ok && plan.strides[k][i - 1] == plan.strides[k][i] * plan.shape[i];
    }
    if (!ok) continue;
    plan.shape[i - 1] *= plan.shape[i];
    for (std::size_t k = 0; k < N; ++k) plan.strides[k][i - 1] = plan.strides[k][i];
    plan.shape.erase(plan.shape.begin() + static_cast<std::ptrdiff_t>(i));
    for (std::size_t k = 0; k < N; ++k) {
      plan.strides[k].erase(plan.strides[k].begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return plan;
}

/// Runs `f` over rows [row_begin, row_end) of a plan whose outer dims are all but the last.
template <std::size_t N, class F>
void run_rows(const LoopPlan<N>& plan, std::array<char*, N> base, std::int64_t row_begin,
              std::int64_t row_end, std::int64_t col_begin, std::int64_t col_end, F& f) {
  const std::size_t nd = plan.shape.size();
  const std::size_t outer_nd = nd - 1;
  std::array<std::int64_t, N> inner{};
  for (std::size_t k = 0; k < N; ++k) inner[k] = plan.strides[k][nd - 1];
  // Multi-index of row_begin over the outer dims.
  std::vector<std::int64_t> idx(outer_nd, 0);
  std::int64_t r = row_begin;
  for (std::size_t d = outer_nd; d-- > 0;) {
    idx[d] = r % plan.shape[d];
    r /= plan.shape[d];
  }
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    std::array<char*, N> p = base;
    for (std::size_t k = 0; k < N; ++k) {
      std::int64_t off = col_begin * inner[k];
      for (std::size_t d = 0; d < outer_nd; ++d) off += idx[d] * plan.strides[k][d];
      p[k] += off;
    }
    f(p, inner, col_end - col_begin);
    for (std::size_t d = outer_nd; d-- > 0;) {  // advance the odometer
      if (++idx[d] < plan.shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <std::size_t N, class F>
void for_each_row(const Shape& shape, const std::array<const std::int64_t*, N>& strides,
                  const std::array<std::int64_t, N>& itemsizes, std::array<char*, N> base, F&& f,
                  bool parallel = true) {
  for (std::int64_t d : shape) {
    if (d == 0) return;
  }
  LoopPlan<N> plan = plan_loop<N>(shape, strides, itemsizes);
  if (plan.shape.empty()) {  // a single element
    plan.shape.push_back(1);
    for (std::size_t k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  const std::int64_t cols = plan.shape.back();
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < plan.shape.size(); ++d) rows *= plan.shape[d];
  const std::int64_t total = rows * cols;
  if (!parallel || total < 2 * kParallelGrain || num_threads() == 1) {
    run_rows<N>(plan, base, 0, rows, 0, cols, f);
  } else if (rows >= num_threads()) {
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / cols);
    parallel_for(0, rows, grain, [&](std::int64_t b, std::int64_t e) { run_rows<N>(plan, base, b, e, 0, cols, f); });
  } else {
    for (std::int64_t row = 0; row < rows; ++row) {  // few long rows: split each row
      parallel_for(0, cols, kParallelGrain, [&](std::int64_t b, std::int64_t e) {
        run_rows<N>(plan, base, row, row + 1, b, e, f);
      });
    }
  }
}

}  // namespace mls::tensor::impl
