// Sparse x dense products for GCNs (CsrMatrix; spmm, spmm_t, sddmm: each the others' adjoint) and
// dropout with a counter-based mask: forward, shape inference, gradient and forward-mode rules
// (workload.hpp). Not a student file.
#include <bit>
#include <cmath>
#include <type_traits>

#include "mls/autodiff/workload.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "ops_internal.hpp"

namespace mls::autodiff {

namespace {
/// The structural checks of a CSR pattern, naming `op` in the error.
void check_pattern(std::int64_t rows, std::int64_t cols, const std::vector<std::int64_t>& row_ptr,
                   const std::vector<std::int64_t>& col_idx, const char* op) {
  MLS_CHECK(rows >= 0 && cols >= 0, op, ": the matrix must have rows, cols >= 0, got ", rows, "x",
            cols);
  MLS_CHECK(static_cast<std::int64_t>(row_ptr.size()) == rows + 1, op,
            ": row_ptr must have rows + 1 = ", rows + 1, " entries, got ", row_ptr.size());
  MLS_CHECK(row_ptr[0] == 0, op, ": row_ptr must start at 0, got ", row_ptr[0]);
  for (std::int64_t i = 0; i < rows; ++i)
    MLS_CHECK(row_ptr[static_cast<std::size_t>(i + 1)] >= row_ptr[static_cast<std::size_t>(i)], op,
              ": row_ptr decreases at row ", i, " (", row_ptr[static_cast<std::size_t>(i)],
              " then ", row_ptr[static_cast<std::size_t>(i + 1)], ")");
  MLS_CHECK(row_ptr.back() == static_cast<std::int64_t>(col_idx.size()), op, ": row_ptr ends at ",
            row_ptr.back(), " but there are ", col_idx.size(), " column indices (nnz)");
  for (std::size_t k = 0; k < col_idx.size(); ++k)
    MLS_CHECK(col_idx[k] >= 0 && col_idx[k] < cols, op, ": column index ", col_idx[k], " of entry ",
              k, " is out of range for ", cols, " columns");
}
}  // namespace

// ---- CsrMatrix ----------------------------------------------------------------------------------
CsrMatrix::CsrMatrix(std::int64_t rows, std::int64_t cols, std::vector<std::int64_t> row_ptr,
                     std::vector<std::int64_t> col_idx, Tensor values)
    : rows_(rows),
      cols_(cols),
      row_ptr_(std::move(row_ptr)),
      col_idx_(std::move(col_idx)),
      values_(std::move(values)) {
  check_pattern(rows_, cols_, row_ptr_, col_idx_, "CsrMatrix");
  MLS_CHECK(values_.defined() && values_.ndim() == 1 && values_.numel() == nnz() &&
                is_floating(values_.dtype()),
            "CsrMatrix: values must be a floating [", nnz(),
            "] tensor (one per column index), got ",
            values_.defined() ? shape_str(values_.shape()) : std::string("undefined"));
}
CsrMatrix CsrMatrix::from_dense(const Tensor& dense) {
  MLS_CHECK(dense.ndim() == 2, "CsrMatrix::from_dense: need a 2-D tensor, got ",
            shape_str(dense.shape()));
  const std::int64_t r = dense.shape()[0], c = dense.shape()[1];
  const auto v = dense.to(DType::Float64).compact().to_vector<double>();
  std::vector<std::int64_t> ptr{0}, col;
  std::vector<double> val;
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j)
      if (v[static_cast<std::size_t>(i * c + j)] != 0.0) {
        col.push_back(j);
        val.push_back(v[static_cast<std::size_t>(i * c + j)]);
      }
    ptr.push_back(static_cast<std::int64_t>(col.size()));
  }
  const DType d = is_floating(dense.dtype()) ? dense.dtype() : DType::Float32;
  return CsrMatrix(r, c, std::move(ptr), std::move(col), Tensor::from_vector(val).to(d));
}
CsrMatrix CsrMatrix::from_coo(std::int64_t rows, std::int64_t cols,
                              const std::vector<std::int64_t>& row,
                              const std::vector<std::int64_t>& col,
                              const std::vector<double>& value, DType dtype) {
  MLS_CHECK(row.size() == col.size() && col.size() == value.size(),
            "CsrMatrix::from_coo: ", row.size(), " rows, ", col.size(), " columns and ",
            value.size(), " values differ in number");
  MLS_CHECK(rows >= 0, "CsrMatrix::from_coo: rows must be >= 0, got ", rows);
  std::vector<std::int64_t> ptr(static_cast<std::size_t>(rows + 1), 0);
  for (std::int64_t r : row) {
    MLS_CHECK(r >= 0 && r < rows, "CsrMatrix::from_coo: row index ", r, " is out of range for ",
              rows, " rows");
    ++ptr[static_cast<std::size_t>(r + 1)];
  }
  for (std::int64_t i = 0; i < rows; ++i)
    ptr[static_cast<std::size_t>(i + 1)] += ptr[static_cast<std::size_t>(i)];
  std::vector<std::int64_t> next(ptr.begin(), ptr.end() - 1), ci(col.size());
  std::vector<double> vals(col.size());
  for (std::size_t k = 0; k < row.size(); ++k) {  // stable: entries keep their order within a row
    const auto at = static_cast<std::size_t>(next[static_cast<std::size_t>(row[k])]++);
    ci[at] = col[k];
    vals[at] = value[k];
  }
  return CsrMatrix(rows, cols, std::move(ptr), std::move(ci), Tensor::from_vector(vals).to(dtype));
}
CsrMatrix CsrMatrix::with_values(Tensor values) const {
  return CsrMatrix(rows_, cols_, row_ptr_, col_idx_, std::move(values));
}
Tensor CsrMatrix::to_dense() const {
  std::vector<double> d(static_cast<std::size_t>(rows_ * cols_), 0.0);
  const auto v = values_.to(DType::Float64).compact().to_vector<double>();
  for (std::int64_t i = 0; i < rows_; ++i)
    for (auto k = row_ptr_[static_cast<std::size_t>(i)];
         k < row_ptr_[static_cast<std::size_t>(i + 1)]; ++k)
      d[static_cast<std::size_t>(i * cols_ + col_idx_[static_cast<std::size_t>(k)])] +=
          v[static_cast<std::size_t>(k)];
  return Tensor::from_vector(d, {rows_, cols_}).to(values_.dtype());
}
Attrs CsrMatrix::pattern_attrs() const {
  return Attrs()
      .set("rows", rows_)
      .set("cols", cols_)
      .set("row_ptr", row_ptr_)
      .set("col_idx", col_idx_);
}

CsrMatrix gcn_normalize(const CsrMatrix& a) {
  MLS_CHECK(a.rows() == a.cols(), "gcn_normalize: the adjacency must be square, got ", a.rows(),
            "x", a.cols());
  const std::int64_t n = a.rows();
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  const auto av = a.values().to(DType::Float64).compact().to_vector<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (auto k = a.row_ptr()[static_cast<std::size_t>(i)];
         k < a.row_ptr()[static_cast<std::size_t>(i + 1)]; ++k) {
      r.push_back(i);
      c.push_back(a.col_idx()[static_cast<std::size_t>(k)]);
      v.push_back(av[static_cast<std::size_t>(k)]);
    }
    r.push_back(i);  // + I
    c.push_back(i);
    v.push_back(1.0);
  }
  std::vector<double> deg(static_cast<std::size_t>(n), 0.0);
  for (std::size_t k = 0; k < v.size(); ++k) deg[static_cast<std::size_t>(r[k])] += v[k];
  for (std::int64_t i = 0; i < n; ++i)
    MLS_CHECK(deg[static_cast<std::size_t>(i)] > 0, "gcn_normalize: row ", i, " of A + I sums to ",
              deg[static_cast<std::size_t>(i)], ", expected > 0");
  for (std::size_t k = 0; k < v.size(); ++k)
    v[k] /= std::sqrt(deg[static_cast<std::size_t>(r[k])]) *
            std::sqrt(deg[static_cast<std::size_t>(c[k])]);
  const DType d = a.values().dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  return CsrMatrix::from_coo(n, n, r, c, v, d);
}

namespace ops {
namespace {

// ---- spmm family --------------------------------------------------------------------------------
/// The pattern stored in a node's attributes (checked: hand-written graphs and files reach here).
struct Pattern {
  std::int64_t rows, cols;
  const std::vector<std::int64_t>& ptr;
  const std::vector<std::int64_t>& col;
  std::int64_t nnz() const { return static_cast<std::int64_t>(col.size()); }
};
Pattern pattern(const Attrs& a, const char* op) {
  Pattern p{a.i("rows"), a.i("cols"), a.ints("row_ptr"), a.ints("col_idx")};
  check_pattern(p.rows, p.cols, p.ptr, p.col, op);
  return p;
}
/// Checks a dense operand: 2-D with `rows` rows (-1: unknown, skipped).
void check_dense(const Shape& s, std::int64_t rows, const char* op, const char* what) {
  MLS_CHECK(s.size() == 2 && (s[0] == rows || s[0] < 0), op, ": ", what, " must be [", rows,
            ", F], got ", shape_str(s));
}
void check_values(const Shape& s, std::int64_t nnz, const char* op) {
  MLS_CHECK(s.size() == 1 && (s[0] == nnz || s[0] < 0), op, ": values must be [", nnz,
            "] (nnz), got ", shape_str(s));
}
/// `body(T tag)` with both operands converted to their common floating dtype T.
template <class F>
Tensor floating2(const Tensor& a, const Tensor& b, const char* op, Tensor& ac, Tensor& bc,
                 F&& body) {
  const DType d = promote(a.dtype(), b.dtype());
  MLS_CHECK(is_floating(d), op, ": operands must be floating, got ", a.dtype(), " and ", b.dtype());
  ac = a.to(d).compact();
  bc = b.to(d).compact();
  Tensor out;
  dispatch(d, [&](auto tag) {
    if constexpr (std::is_floating_point_v<decltype(tag)>) out = body(tag);
  });
  return out;
}
/// spmm(values, x) = A x: rows in parallel, each a sum of scaled rows of x.
Tensor spmm_fwd(Ins in, const Attrs& a) {
  const Pattern p = pattern(a, "spmm");
  check_values(in[0].shape(), p.nnz(), "spmm");
  check_dense(in[1].shape(), p.cols, "spmm", "x");
  Tensor v, x;
  return floating2(in[0], in[1], "spmm", v, x, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t f = x.shape()[1];
    Tensor y = Tensor::zeros({p.rows, f}, v.dtype());
    const T *vp = v.data<T>(), *xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(0, p.rows, 64, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        for (auto k = p.ptr[static_cast<std::size_t>(i)];
             k < p.ptr[static_cast<std::size_t>(i + 1)]; ++k) {
          const T s = vp[k];
          const T* xr = xp + p.col[static_cast<std::size_t>(k)] * f;
          for (std::int64_t j = 0; j < f; ++j) yp[i * f + j] += s * xr[j];
        }
    });
    return y;
  });
}
/// spmm_t(values, g) = A^T g: a scatter over the entries, one thread.
Tensor spmm_t_fwd(Ins in, const Attrs& a) {
  const Pattern p = pattern(a, "spmm_t");
  check_values(in[0].shape(), p.nnz(), "spmm_t");
  check_dense(in[1].shape(), p.rows, "spmm_t", "g");
  Tensor v, g;
  return floating2(in[0], in[1], "spmm_t", v, g, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t f = g.shape()[1];
    Tensor y = Tensor::zeros({p.cols, f}, v.dtype());
    const T *vp = v.data<T>(), *gp = g.data<T>();
    T* yp = y.data<T>();
    for (std::int64_t i = 0; i < p.rows; ++i)
      for (auto k = p.ptr[static_cast<std::size_t>(i)]; k < p.ptr[static_cast<std::size_t>(i + 1)];
           ++k) {
        T* yr = yp + p.col[static_cast<std::size_t>(k)] * f;
        for (std::int64_t j = 0; j < f; ++j) yr[j] += vp[k] * gp[i * f + j];
      }
    return y;
  });
}
/// sddmm(u, v)[k] = <u[row k], v[col k]>.
Tensor sddmm_fwd(Ins in, const Attrs& a) {
  const Pattern p = pattern(a, "sddmm");
  check_dense(in[0].shape(), p.rows, "sddmm", "u");
  check_dense(in[1].shape(), p.cols, "sddmm", "v");
  MLS_CHECK(in[0].shape()[1] == in[1].shape()[1], "sddmm: u ", shape_str(in[0].shape()), " and v ",
            shape_str(in[1].shape()), " must have the same number of columns");
  Tensor u, v;
  return floating2(in[0], in[1], "sddmm", u, v, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t f = u.shape()[1];
    Tensor s = Tensor::empty({p.nnz()}, u.dtype());
    const T *up = u.data<T>(), *vp = v.data<T>();
    T* sp = s.data<T>();
    for (std::int64_t i = 0; i < p.rows; ++i)
      for (auto k = p.ptr[static_cast<std::size_t>(i)]; k < p.ptr[static_cast<std::size_t>(i + 1)];
           ++k) {
        T acc = T(0);
        const T* vr = vp + p.col[static_cast<std::size_t>(k)] * f;
        for (std::int64_t j = 0; j < f; ++j) acc += up[i * f + j] * vr[j];
        sp[k] = acc;
      }
    return s;
  });
}
void spmm_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Pattern p = pattern(a, "spmm");
  check_values(in[0]->shape, p.nnz(), "spmm");
  check_dense(in[1]->shape, p.cols, "spmm", "x");
  s = {p.rows, in[1]->shape[1]};
  d = promote(in[0]->dtype, in[1]->dtype);
}
void spmm_t_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Pattern p = pattern(a, "spmm_t");
  check_values(in[0]->shape, p.nnz(), "spmm_t");
  check_dense(in[1]->shape, p.rows, "spmm_t", "g");
  s = {p.cols, in[1]->shape[1]};
  d = promote(in[0]->dtype, in[1]->dtype);
}
void sddmm_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Pattern p = pattern(a, "sddmm");
  check_dense(in[0]->shape, p.rows, "sddmm", "u");
  check_dense(in[1]->shape, p.cols, "sddmm", "v");
  s = {p.nnz()};
  d = promote(in[0]->dtype, in[1]->dtype);
}
Var sp(Op op, const Var& a, const Var& b, const Attrs& attrs) { return apply(op, {a, b}, attrs); }
/// Y = A X: dvalues = sddmm(g, X), dX = A^T g.
Grads spmm_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Attrs& a = out.node()->attrs;
  return {needs[0] ? sp(Op::Sddmm, g, in(out, 1), a) : Var(),
          needs[1] ? sp(Op::SpmmT, in(out, 0), g, a) : Var()};
}
/// Z = A^T G: dvalues = sddmm(G, g), dG = A g.
Grads spmm_t_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Attrs& a = out.node()->attrs;
  return {needs[0] ? sp(Op::Sddmm, in(out, 1), g, a) : Var(),
          needs[1] ? sp(Op::Spmm, in(out, 0), g, a) : Var()};
}
/// s = sddmm(U, V): dU = A(g) V, dV = A(g)^T U (A with the values g).
Grads sddmm_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Attrs& a = out.node()->attrs;
  return {needs[0] ? sp(Op::Spmm, g, in(out, 1), a) : Var(),
          needs[1] ? sp(Op::SpmmT, g, in(out, 0), a) : Var()};
}
double spmm_flops(const Node& n) {
  return 2 * static_cast<double>(n.attrs.ints("col_idx").size()) *
         static_cast<double>(std::max<std::int64_t>(1, n.shape[1]));
}
double sddmm_flops(const Node& n) {
  return 2 * shape_numel(n.shape) *
         static_cast<double>(std::max<std::int64_t>(1, n.inputs[0]->shape[1]));
}

// ---- dropout ------------------------------------------------------------------------------------
double dropout_p(const Attrs& a) {
  const double p = a.f("p");
  MLS_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  return p;
}
Tensor dropout_fwd(Ins in, const Attrs& a) {
  const double p = dropout_p(a);
  MLS_CHECK(is_floating(in[0].dtype()), "dropout: x must be floating, got ", in[0].dtype());
  const auto seed = std::bit_cast<std::uint64_t>(a.i("seed"));
  const auto offset = std::bit_cast<std::uint64_t>(a.i("offset"));
  const Tensor x = in[0].compact();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const double scale = 1.0 / (1.0 - p);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      const T s = static_cast<T>(scale);
      // Four elements per Philox block; blocks in parallel (each element's draw is fixed).
      const std::int64_t n = x.numel(), blocks = (n + 3) / 4;
      parallel_for(0, blocks, 4096, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t blk = b; blk < e; ++blk) {
          const auto u = std::uint64_t(blk);
          const auto w = philox4x32(
              {static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(u >> 32),
               static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)},
              {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
          for (std::int64_t j = 0; j < 4 && blk * 4 + j < n; ++j) {
            const std::int64_t i = blk * 4 + j;
            yp[i] = static_cast<double>(w[static_cast<std::size_t>(j)]) * 0x1.0p-32 >= p ? xp[i] * s
                                                                                         : T(0);
          }
        }
      });
    }
  });
  return y;
}
void dropout_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  (void)dropout_p(a);
  s = in[0]->shape;
  d = float_of(in[0]->dtype);
}
/// Linear with a fixed mask: the adjoint is the same dropout (mask recomputed from the attributes).
Grads dropout_bwd(const Var& out, const Var& g, const Needs&) {
  return {apply(Op::Dropout, {g}, out.node()->attrs)};
}
Tensor dropout_jvp(const Node& n, const std::vector<Tensor>&, const std::vector<Tensor>& t,
                   const Tensor&) {
  if (!t[0].defined()) return {};
  return dropout_fwd(std::span<const Tensor>(&t[0], 1), n.attrs);
}

}  // namespace

void register_sparse_ops(OpTable& t) {
  t.add(Op::Spmm, {.name = "spmm",
                   .arity = 2,
                   .forward = spmm_fwd,
                   .infer = spmm_infer,
                   .backward = spmm_bwd,
                   .jvp = bilinear_jvp,
                   .doc = "A x for CSR A (pattern attributes, values input 0), dense x",
                   .flops = spmm_flops});
  t.add(Op::SpmmT, {.name = "spmm_t",
                    .arity = 2,
                    .forward = spmm_t_fwd,
                    .infer = spmm_t_infer,
                    .backward = spmm_t_bwd,
                    .jvp = bilinear_jvp,
                    .doc = "A^T g for CSR A (values input 0), dense g",
                    .flops = spmm_flops});
  t.add(Op::Sddmm, {.name = "sddmm",
                    .arity = 2,
                    .forward = sddmm_fwd,
                    .infer = sddmm_infer,
                    .backward = sddmm_bwd,
                    .jvp = bilinear_jvp,
                    .doc = "<u[row k], v[col k]> for every entry k of a CSR pattern",
                    .flops = sddmm_flops});
  t.add(Op::Dropout,
        {.name = "dropout",
         .arity = 1,
         .forward = dropout_fwd,
         .infer = dropout_infer,
         .backward = dropout_bwd,
         .jvp = dropout_jvp,
         .doc = "inverted dropout with a Philox mask of (seed, offset, index), recomputed"});
}

}  // namespace ops

Var spmm(const CsrMatrix& a, const Var& x) { return spmm(a, constant_like(x, a.values()), x); }
Var spmm(const CsrMatrix& a, const Var& values, const Var& x) {
  return apply(Op::Spmm, {values, x}, a.pattern_attrs());
}
Var spmm_t(const CsrMatrix& a, const Var& values, const Var& g) {
  return apply(Op::SpmmT, {values, g}, a.pattern_attrs());
}
Var sddmm(const CsrMatrix& a, const Var& u, const Var& v) {
  return apply(Op::Sddmm, {u, v}, a.pattern_attrs());
}

double dropout_uniform(std::uint64_t seed, std::uint64_t offset, std::uint64_t index) {
  const std::uint64_t b = index / 4;
  const auto w =
      philox4x32({static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
                  static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)},
                 {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return static_cast<double>(w[index % 4]) * 0x1.0p-32;
}
Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset, bool training) {
  MLS_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p, " (x is ",
            shape_str(x.shape()), ")");
  if (!training) return x;
  return apply(Op::Dropout, {x},
               Attrs()
                   .set("p", p)
                   .set("seed", std::bit_cast<std::int64_t>(seed))
                   .set("offset", std::bit_cast<std::int64_t>(offset)));
}

}  // namespace mls::autodiff
