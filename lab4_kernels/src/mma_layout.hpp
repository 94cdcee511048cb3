#pragma once
// Lab 4, the `mma` rung of the CUDA ladder (src/kernels_cuda.cu): the index maps of the tensor-core
// fragments, as small pure functions shared by the kernel (device) and by a host test that emulates
// ldmatrix and mma.sync with them against a naive product (tests/test_mma_layout.cpp, no GPU).
//
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 multiplies a 16x16 A (row) by a 16x8 B (col)
// into a 16x8 fp32 D = A B + C, the operands spread over a warp's 32 lanes. With g = lane / 4 (the
// "group", 0..7) and t = lane % 4 (the thread in the group), each lane holds (PTX ISA, "Matrix
// fragments for mma.m16n8k16 with floating point type"):
//   A: 4 x .b32 (two bf16 each; reg r, half h): row g + 8 (r % 2), col 2t + h + 8 (r / 2)
//   B: 2 x .b32 (reg r, half h):               row (k) 2t + h + 8 r, col (n) g
//   C, D: 4 x f32 (i):                         row g + 8 (i / 2), col 2t + i % 2
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 loads four 8x8 b16 matrices: lanes 8m .. 8m+7 give the
// addresses of the 8 rows (16 bytes each) of matrix m, and lane l receives in register m the pair
// (row l / 4, cols 2 (l % 4) + h) of matrix m; with .trans, the pair (rows 2 (l % 4) + h, col l / 4).
// So, per lane:
//   A (16x16 at (r0, k0) of a row-major tile): lane l points at row r0 + l % 16, col k0 + 8 (l / 16);
//     matrices 0..3 are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15),
//     exactly a0..a3 above.
//   B (16 k x 16 n at (k0, n0) of a row-major [K][N] tile, .trans): lane l points at row k0 + l % 16,
//     col n0 + 8 (l / 16); matrices 0..3 are (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
//     (k 8-15, n 8-15): registers 0, 1 are b0, b1 of the n8 tile at n0, registers 2, 3 those of n0 + 8.
#if defined(__CUDACC__)
#define MLS_MMA_HD __host__ __device__ __forceinline__
#else
#define MLS_MMA_HD inline
#endif

namespace mls::kernels::cuda::mma_layout {

struct RowCol {
  int row, col;
};

/// The element of the 16x16 A operand in register `reg` (0..3), half `half` (0, 1) of `lane`.
MLS_MMA_HD constexpr RowCol a_element(int lane, int reg, int half) {
  return {lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + half + 8 * (reg / 2)};
}
/// The element (k, n) of the 16x8 B operand in register `reg` (0, 1), half `half` of `lane`.
MLS_MMA_HD constexpr RowCol b_element(int lane, int reg, int half) {
  return {2 * (lane % 4) + half + 8 * reg, lane / 4};
}
/// The element of the 16x8 accumulator in accumulator `i` (0..3) of `lane`.
MLS_MMA_HD constexpr RowCol c_element(int lane, int i) { return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2}; }
/// ldmatrix: the element (row, col) of an 8x8 matrix that `lane` receives in half `half` of the
/// register of that matrix (transposed: .trans).
MLS_MMA_HD constexpr RowCol ldmatrix_element(int lane, int half, bool trans) {
  return trans ? RowCol{2 * (lane % 4) + half, lane / 4} : RowCol{lane / 4, 2 * (lane % 4) + half};
}
/// ldmatrix .x4 over a 16x16 block at (row0, col0) of a row-major tile with `ld` elements per row:
/// the offset (elements) of the 8-element row that `lane` points at. The same map serves A (plain)
/// and B (.trans), see above.
MLS_MMA_HD constexpr int ldmatrix_x4_offset(int lane, int row0, int col0, int ld) {
  return (row0 + lane % 16) * ld + col0 + 8 * (lane / 16);
}

/// Block rasterization for L2 reuse: block `id` of a 1-D grid of tiles_m x tiles_n output tiles is
/// the tile (row, col); consecutive ids walk down a panel of `group` tile rows, column by column, so
/// the blocks running together share A's rows and B's columns.
MLS_MMA_HD constexpr RowCol block_tile(int id, int tiles_m, int tiles_n, int group) {
  const int per_group = group * tiles_n, first = (id / per_group) * group;
  const int rows = tiles_m - first < group ? tiles_m - first : group;
  const int in = id % per_group;
  return {first + in % rows, in / rows};
}

}  // namespace mls::kernels::cuda::mma_layout
