#pragma once
// Workloads shared by the tensor-expression tests and the code-generation tests: the slide's matmul
// (slides 001, "Low-level Program Variants": C[y][x] = sum_k A[k][y] * B[k][x]) and its three
// schedules, plain, tiled 8x8x8, and with local tiles copied by dma_copy2d around a
// fused_gemm8x8_add intrinsic.
#include <cstdint>

#include "mls/kernels/schedule.hpp"

namespace kernels_test {

namespace te = mls::kernels::te;

/// The slide's matmul on n x n matrices (A read transposed).
struct SlideMatmul {
  te::Tensor A, B, C;
  te::IterVar k;
};
inline SlideMatmul slide_matmul(std::int64_t n) {
  SlideMatmul m;
  m.A = te::placeholder("A", {n, n});
  m.B = te::placeholder("B", {n, n});
  m.k = te::reduce_axis(n, "k");
  m.C = te::compute("C", {n, n}, [&](te::Var y, te::Var x) { return te::sum(m.A(m.k, y) * m.B(m.k, x), {m.k}); },
                    {"y", "x"});
  return m;
}

/// The first nest: the default schedule.
inline te::Schedule slide_plain(const SlideMatmul& m) { return te::Schedule({m.C}); }

/// The second nest: y and x tiled by 8, k split by 8, the tile's loops inside ko (n divisible by 8).
inline te::Schedule slide_tiled(const SlideMatmul& m) {
  te::Schedule s({m.C});
  te::TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 8, 8);
  auto [ko, ki] = s[m.C].split(m.k, 8);
  s[m.C].reorder({t.outer0, t.outer1, ko, t.inner0, t.inner1, ki});
  return s;
}

/// The third nest: CL accumulates an 8x8 tile of C; per ko, AL and BL receive 8x8 tiles of A and B
/// by dma_copy2d; fused_gemm8x8_add multiplies them into CL; CL is copied out (n divisible by 8).
inline te::Schedule slide_tensorized(const SlideMatmul& m) {
  te::Schedule s({m.C});
  te::Tensor CL = s.cache_write(m.C);
  te::TileAxes t = s[m.C].tile(m.C.axis(0), m.C.axis(1), 8, 8);
  s[CL].compute_at(s[m.C], t.outer1);
  auto [ko, ki] = s[CL].split(m.k, 8);
  const auto ax = s[CL].root_axes();
  s[CL].reorder({ko, ax[0], ax[1], ki});
  te::Tensor AL = s.cache_read(m.A, s[CL], ko);
  te::Tensor BL = s.cache_read(m.B, s[CL], ko);
  const te::Intrinsic dma = te::copy_intrinsic({8, 8}, "dma_copy2d");
  s[AL].tensorize(s[AL].leaf_axes()[0], dma);
  s[BL].tensorize(s[BL].leaf_axes()[0], dma);
  s[CL].tensorize(ax[0], te::gemm_intrinsic(8, 8, 8, "fused_gemm8x8_add"));
  s[m.C].tensorize(t.inner0, dma);
  return s;
}

/// A row sum R(i) = sum_k A(i, k) of A [3, 29] whose reduction is split by 8 and rfactored: the
/// partial sums R_rf vectorized over the inner part, R parallel over its rows.
struct RfactorRowSum {
  te::Tensor A, R, RF;
  te::IterVar k;
  te::Schedule s;
};
inline RfactorRowSum rfactor_row_sum() {
  te::Tensor A = te::placeholder("A", {3, 29});
  te::IterVar k = te::reduce_axis(29, "k");
  te::Tensor R = te::compute("R", {3}, [&](te::Var i) { return te::sum(A(i, k), {k}); });
  te::Schedule s({R});
  auto split = s[R].split(k, 8);
  te::Tensor RF = s.rfactor(R, split.second);
  s[RF].vectorize(s[RF].leaf_axes()[0]);
  s[R].parallel(R.axis(0));
  return {A, R, RF, k, s};
}

/// Row softmax of X [rows, cols] as three computes: M (row max), S (sum of exp(x - M)), Y = exp(x - M) / S.
struct RowSoftmax {
  te::Tensor X, M, S, Y;
};
inline RowSoftmax row_softmax(std::int64_t rows, std::int64_t cols) {
  RowSoftmax w;
  w.X = te::placeholder("X", {rows, cols});
  te::IterVar j1 = te::reduce_axis(cols, "j1"), j2 = te::reduce_axis(cols, "j2");
  w.M = te::compute("M", {rows}, [&](te::Var i) { return te::max_reduce(w.X(i, j1), {j1}); });
  w.S = te::compute("S", {rows}, [&](te::Var i) { return te::sum(te::exp(w.X(i, j2) - w.M(i)), {j2}); });
  w.Y = te::compute("Y", {rows, cols}, [&](te::Var i, te::Var j) { return te::exp(w.X(i, j) - w.M(i)) / w.S(i); });
  return w;
}

}  // namespace kernels_test
