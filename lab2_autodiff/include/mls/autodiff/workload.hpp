#pragma once
/// The rest of lecture 000's workload tour as lab 2 ops: pooling and transposed convolution
/// (CNNs, "How UpConv works?"), LSTM and GRU cells (RNNs), sparse × dense products for a GCN
/// layer (GNNs), and dropout. Each op is one registry entry (forward, shape inference, reverse-
/// mode rule, forward-mode rule), so it runs eagerly, in graphs, under `gradients()`, `jvp` and
/// lab 3's passes alike. All images are NCHW.
#include <cstdint>
#include <vector>

#include "mls/autodiff/var.hpp"

namespace mls::autodiff {

// ---- pooling (ops_pool.cpp) ---------------------------------------------------------------------
/// Max pooling of x [N, C, H, W] over kh x kw windows (stride 0 means stride = kh, as PyTorch's
/// default), padding `pad` on each side (padding never wins: it counts as -inf). The gradient goes
/// to each window's argmax, the first one in row-major window order on ties (PyTorch's CPU rule).
/// Needs pad <= kh/2 and kw/2, and a window that fits the padded input.
Var max_pool2d(const Var& x, std::int64_t kh, std::int64_t kw, std::int64_t stride = 0,
               std::int64_t pad = 0);
/// max_pool2d's adjoint: zeros of x's shape with g [N, C, OH, OW] added at each window's argmax
/// of x. Linear in g; no gradient into x (the argmax is piecewise constant).
Var max_pool2d_backward(const Var& g, const Var& x, std::int64_t kh, std::int64_t kw,
                        std::int64_t stride, std::int64_t pad);
/// The values of t (x's shape) at each window's argmax of x: [N, C, OH, OW]. The adjoint of
/// max_pool2d_backward and max_pool2d's tangent (max_pool2d(x) = max_pool2d_select(x, x)).
Var max_pool2d_select(const Var& t, const Var& x, std::int64_t kh, std::int64_t kw,
                      std::int64_t stride, std::int64_t pad);
/// Average pooling of x [N, C, H, W] (stride 0 means kh). With `count_include_pad` (PyTorch's
/// default) every window divides by kh*kw, padding counting as zeros; without, by the number of
/// input elements the window covers.
Var avg_pool2d(const Var& x, std::int64_t kh, std::int64_t kw, std::int64_t stride = 0,
               std::int64_t pad = 0, bool count_include_pad = true);
/// avg_pool2d's adjoint: each g [N, C, OH, OW] spread over its window (divided as the forward),
/// into zeros of `like`'s shape.
Var avg_pool2d_backward(const Var& g, const Var& like, std::int64_t kh, std::int64_t kw,
                        std::int64_t stride, std::int64_t pad, bool count_include_pad);

// ---- transposed convolution (ops_pool.cpp) ------------------------------------------------------
/// The adjoint of conv2d ("up-conv"): x [N, Cin, H, W] with w [Cin, Cout, kh, kw] (PyTorch's
/// layout) gives [N, Cout, OH, OW], OH = (H - 1) stride - 2 pad + kh + output_padding. Computed
/// with conv2d's own machinery: columns W^T x, then col2im; its input gradient is conv2d(g, w).
/// Needs output_padding < stride.
Var conv_transpose2d(const Var& x, const Var& w, std::int64_t stride = 1, std::int64_t pad = 0,
                     std::int64_t output_padding = 0);

// ---- recurrent cells (ops_rnn.cpp): built from lab 2's ops, so gradients and JVPs come free -----
/// An LSTM's state: hidden h [B, H] and cell c [B, H].
struct LstmState {
  Var h, c;
};
/// One LSTM step with PyTorch's equations and gate order (i, f, g, o):
///   gates = x W_ih^T + b_ih + h W_hh^T + b_hh            [B, 4H]
///   i, f, o = sigmoid(...), g = tanh(...);  c' = f c + i g;  h' = o tanh(c').
/// x [B, I], w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H]. Throws `mls::Error` naming
/// lstm_cell and the shapes when they do not fit.
LstmState lstm_cell(const Var& x, const LstmState& state, const Var& w_ih, const Var& w_hh,
                    const Var& b_ih, const Var& b_hh);
/// One GRU step with PyTorch's equations and gate order (r, z, n):
///   r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr),  z likewise,
///   n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)),  h' = (1 - z) n + z h.
/// x [B, I], h [B, H], w_ih [3H, I], w_hh [3H, H], b_ih and b_hh [3H].
Var gru_cell(const Var& x, const Var& h, const Var& w_ih, const Var& w_hh, const Var& b_ih,
             const Var& b_hh);

// ---- sparse x dense (ops_graph.cpp) -------------------------------------------------------------
/// A sparse matrix in CSR form: row i's entries are col_idx[k], values[k] for k in
/// [row_ptr[i], row_ptr[i + 1]). Checked on construction: row_ptr has rows + 1 entries, starts at
/// 0, never decreases and ends at nnz; every column index is in [0, cols); values are a floating
/// 1-D tensor of nnz entries. Columns within a row need not be sorted; duplicates add up.
class CsrMatrix {
 public:
  CsrMatrix(std::int64_t rows, std::int64_t cols, std::vector<std::int64_t> row_ptr,
            std::vector<std::int64_t> col_idx, Tensor values);
  /// The non-zeros of a 2-D dense tensor, row by row.
  static CsrMatrix from_dense(const Tensor& dense);
  /// Entries (row[k], col[k], value[k]) in any order (duplicates add up when used).
  static CsrMatrix from_coo(std::int64_t rows, std::int64_t cols,
                            const std::vector<std::int64_t>& row,
                            const std::vector<std::int64_t>& col, const std::vector<double>& value,
                            DType dtype = DType::Float32);
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t nnz() const { return static_cast<std::int64_t>(col_idx_.size()); }
  const std::vector<std::int64_t>& row_ptr() const { return row_ptr_; }
  const std::vector<std::int64_t>& col_idx() const { return col_idx_; }
  const Tensor& values() const { return values_; }
  /// The same pattern with other values ([nnz], floating).
  CsrMatrix with_values(Tensor values) const;
  /// The dense [rows, cols] matrix.
  Tensor to_dense() const;
  /// The pattern as op attributes (rows, cols, row_ptr, col_idx): what spmm's nodes carry.
  Attrs pattern_attrs() const;

 private:
  std::int64_t rows_, cols_;
  std::vector<std::int64_t> row_ptr_, col_idx_;
  Tensor values_;
};

/// A x for sparse A [rows, cols] and dense x [cols, F]: [rows, F]. A's values enter as a
/// constant (no gradient); the gradient into x is A^T g.
Var spmm(const CsrMatrix& a, const Var& x);
/// The same product with A's values given as a Var [nnz] (a gradient flows into them too:
/// dvalues[k] = <g[row k], x[col k]>). Only A's pattern is read from `a`.
Var spmm(const CsrMatrix& a, const Var& values, const Var& x);
/// A^T g for A's pattern with `values` [nnz] and g [rows, F]: [cols, F] (spmm's gradient in x).
Var spmm_t(const CsrMatrix& a, const Var& values, const Var& g);
/// The sampled product: s[k] = <u[row k], v[col k]> for u [rows, F], v [cols, F]: [nnz] (spmm's
/// gradient in the values).
Var sddmm(const CsrMatrix& a, const Var& u, const Var& v);
/// Kipf and Welling's renormalisation D^-1/2 (A + I) D^-1/2, D the row sums of A + I (a square A;
/// the diagonal entries added to any A has). Float64 values are kept, others become float32.
CsrMatrix gcn_normalize(const CsrMatrix& a);

// ---- dropout (ops_graph.cpp) --------------------------------------------------------------------
/// The uniform number in [0, 1) dropout draws for element `index` of the call (seed, offset):
/// Philox-4x32-10 with key = seed and counter = (index / 4, offset), word index % 4, times 2^-32.
/// A pure function: the mask is recomputed, never stored.
double dropout_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t index);
/// Inverted dropout: x / (1 - p) where dropout_uniform(seed, offset, i) >= p, else 0 (i the
/// row-major element index). Its backward is dropout of g with the same (p, seed, offset): the
/// same mask, recomputed. Without `training`, x itself. Needs p in [0, 1).
Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset = 0,
            bool training = true);

}  // namespace mls::autodiff
