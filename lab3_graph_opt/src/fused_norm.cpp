// Layer norm as fused row kernels (issue 29: compile's GPT step). Not a student file.
//   fused_layer_norm: layer_norm's forward in one pass per row, with a gradient rule made of
//     layer_norm_dx (dx in one pass per row) and layer_norm_dgamma (sum over rows of g xhat);
//     lab 2's rule recomputes xhat with five Var ops and makes dx with six more.
//   "fused-layernorm": layer_norm -> fused_layer_norm, run by compile() on the traced forward
//     graph before it builds the backward (the backward then uses the fused rule).
//   layer_norm itself (lab 2's op) is computed in its planned buffer by the same forward kernel.
#include <cmath>
#include <vector>

#include "mls/graph_opt/passes.hpp"
#include "simd.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;

/// sum_j f(j) over j < c in double, in 16 independent lanes (so the loop vectorizes and the
/// order of the additions is fixed), then the lanes and the remainder.
template <class F>
inline double row_sum(std::int64_t c, F f) {
  constexpr int L = 16;
  double acc[L] = {};
  std::int64_t j = 0;
  for (; j + L <= c; j += L)
    for (int l = 0; l < L; ++l) acc[l] += f(j + l);
  double s = 0;
  for (; j < c; ++j) s += f(j);
  for (int l = 0; l < L; ++l) s += acc[l];
  return s;
}
/// Mean and 1/sqrt(var + eps) of one row of c values (two passes).
template <class T>
inline void row_stats(const T* __restrict x, std::int64_t c, double eps, double& mu, double& rstd) {
  mu = row_sum(c, [&](std::int64_t j) { return static_cast<double>(x[j]); }) / static_cast<double>(c);
  const double m = mu;
  const double v = row_sum(c, [&](std::int64_t j) {
    const double d = static_cast<double>(x[j]) - m;
    return d * d;
  });
  rstd = 1.0 / std::sqrt(v / static_cast<double>(c) + eps);
}

/// y = (x - mean) rstd gamma + beta over the last dim, row by row.
template <class T>
void ln_forward(const T* x, const T* gamma, const T* beta, T* y, std::int64_t rows, std::int64_t c, double eps) {
  for (std::int64_t r = 0; r < rows; ++r, x += c, y += c) {
    double mu, rstd;
    row_stats(x, c, eps, mu, rstd);
    const T m = static_cast<T>(mu), rs = static_cast<T>(rstd);
    const T* __restrict xr = x;
    T* __restrict yr = y;
    for (std::int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
  }
}
/// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g gamma, row by row.
template <class T>
void ln_dx(const T* x, const T* gamma, const T* g, T* dx, std::int64_t rows, std::int64_t c, double eps) {
  for (std::int64_t r = 0; r < rows; ++r, x += c, g += c, dx += c) {
    double mu, rstd;
    row_stats(x, c, eps, mu, rstd);
    const T* __restrict xr = x;
    const T* __restrict gr = g;
    const double s1 = row_sum(c, [&](std::int64_t j) { return static_cast<double>(gr[j]) * gamma[j]; });
    const double s2 = row_sum(c, [&](std::int64_t j) { return static_cast<double>(gr[j]) * gamma[j] * ((xr[j] - mu) * rstd); });
    const T m = static_cast<T>(mu), rs = static_cast<T>(rstd), a = static_cast<T>(s1 / static_cast<double>(c)),
            b = static_cast<T>(s2 / static_cast<double>(c));
    T* __restrict d = dx;
    for (std::int64_t j = 0; j < c; ++j) d[j] = rs * (gr[j] * gamma[j] - a - (xr[j] - m) * rs * b);
  }
}
/// dgamma = sum over rows of g xhat.
template <class T>
void ln_dgamma(const T* x, const T* g, T* dgamma, std::int64_t rows, std::int64_t c, double eps) {
  std::vector<double> acc(static_cast<std::size_t>(c), 0.0);
  double* __restrict a = acc.data();
  for (std::int64_t r = 0; r < rows; ++r, x += c, g += c) {
    double mu, rstd;
    row_stats(x, c, eps, mu, rstd);
    const T* __restrict xr = x;
    const T* __restrict gr = g;
    for (std::int64_t j = 0; j < c; ++j) a[j] += static_cast<double>(gr[j]) * ((xr[j] - mu) * rstd);
  }
  for (std::int64_t j = 0; j < c; ++j) dgamma[j] = static_cast<T>(a[j]);
}

/// The float dtype all of `in` and `out` share, or false.
bool same_float(Ins in, const Tensor& out) {
  if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return false;
  for (const Tensor& t : in)
    if (t.dtype() != out.dtype()) return false;
  return true;
}
bool ln_forward_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if (in.size() != 3 || out.ndim() < 1 || !same_float(in, out)) return false;
  const std::int64_t c = out.shape().back(), rows = c > 0 ? out.numel() / c : 0;
  const Tensor x = in[0].compact(), g = in[1].compact(), b = in[2].compact();
  if (out.dtype() == DType::Float32)
    simd::Isa<ln_forward<float>>::run(x.data<float>(), g.data<float>(), b.data<float>(), out.data<float>(), rows, c, a.f("eps"));
  else
    simd::Isa<ln_forward<double>>::run(x.data<double>(), g.data<double>(), b.data<double>(), out.data<double>(), rows, c, a.f("eps"));
  return true;
}
bool ln_dx_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if (in.size() != 3 || out.ndim() < 1 || !same_float(in, out)) return false;
  const std::int64_t c = out.shape().back(), rows = c > 0 ? out.numel() / c : 0;
  const Tensor x = in[0].compact(), gm = in[1].compact(), g = in[2].compact();
  if (out.dtype() == DType::Float32)
    simd::Isa<ln_dx<float>>::run(x.data<float>(), gm.data<float>(), g.data<float>(), out.data<float>(), rows, c, a.f("eps"));
  else
    simd::Isa<ln_dx<double>>::run(x.data<double>(), gm.data<double>(), g.data<double>(), out.data<double>(), rows, c, a.f("eps"));
  return true;
}
bool ln_dgamma_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if (in.size() != 2 || out.ndim() != 1 || !same_float(in, out)) return false;
  const std::int64_t c = out.shape()[0], rows = c > 0 ? in[0].numel() / c : 0;
  const Tensor x = in[0].compact(), g = in[1].compact();
  if (out.dtype() == DType::Float32)
    simd::Isa<ln_dgamma<float>>::run(x.data<float>(), g.data<float>(), out.data<float>(), rows, c, a.f("eps"));
  else
    simd::Isa<ln_dgamma<double>>::run(x.data<double>(), g.data<double>(), out.data<double>(), rows, c, a.f("eps"));
  return true;
}

/// x [..., C], then `vectors` inputs [C] (gamma, beta), then inputs of x's shape (g), all of x's
/// floating dtype: the checks every op here makes, on nodes (infer) and on tensors (forward).
void check_rows(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes, const char* op, std::size_t vectors) {
  const Shape& x = shapes[0];
  MLS_CHECK(!x.empty(), op, ": x must have at least one dim, got ", shape_str(x));
  MLS_CHECK(is_floating(dtypes[0]), op, ": x must be floating, got ", dtypes[0]);
  for (std::size_t k = 1; k < shapes.size(); ++k) {
    const Shape want = k <= vectors ? Shape{x.back()} : x;
    MLS_CHECK(shapes[k] == want, op, ": input ", k, " must be ", shape_str(want), " for x ", shape_str(x), ", got ",
              shape_str(shapes[k]));
    MLS_CHECK(dtypes[k] == dtypes[0], op, ": input ", k, " is ", dtypes[k], ", x is ", dtypes[0]);
  }
}
void check_rows(InNodes in, const char* op, std::size_t vectors) {
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const Node* n : in) s.push_back(n->shape), d.push_back(n->dtype);
  check_rows(s, d, op, vectors);
}
/// The ordinary forward of an op with a forward into a buffer: checks, then a new tensor.
template <bool (*Into)(Ins, const autodiff::Attrs&, Tensor&)>
Tensor forward_of(Ins in, const autodiff::Attrs& a, const char* op, std::size_t vectors) {
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const Tensor& t : in) s.push_back(t.shape()), d.push_back(t.dtype());
  check_rows(s, d, op, vectors);
  Tensor out = Tensor::empty(vectors == 0 ? Shape{in[0].shape().back()} : in[0].shape(), in[0].dtype());
  MLS_CHECK(Into(in, a, out), op, ": expected float32 or float64, got ", in[0].dtype());
  return out;
}
void fused_ln_infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_rows(in, "fused_layer_norm", 2);
  s = in[0]->shape;
  d = in[0]->dtype;
}
void ln_dx_infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_rows(in, "layer_norm_dx", 1);
  s = in[0]->shape;
  d = in[0]->dtype;
}
void ln_dgamma_infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_rows(in, "layer_norm_dgamma", 0);
  s = Shape{in[0]->shape.back()};
  d = in[0]->dtype;
}
Tensor fused_ln_fwd(Ins in, const autodiff::Attrs& a) { return forward_of<ln_forward_into>(in, a, "fused_layer_norm", 2); }
Tensor ln_dx_fwd(Ins in, const autodiff::Attrs& a) { return forward_of<ln_dx_into>(in, a, "layer_norm_dx", 1); }
Tensor ln_dgamma_fwd(Ins in, const autodiff::Attrs& a) { return forward_of<ln_dgamma_into>(in, a, "layer_norm_dgamma", 0); }
std::vector<Var> fused_ln_bwd(const Var& out, const Var& g, const std::vector<bool>& needs);
double ln_flops(const Node& n) { return 8.0 * autodiff::shape_numel(n.inputs[0]->shape); }
}  // namespace

const Op kLayerNormDx = [] {
  const Op op = autodiff::register_op({.name = "layer_norm_dx", .arity = 3, .differentiable = false, .forward = ln_dx_fwd,
                                       .infer = ln_dx_infer, .doc = "layer_norm's dx from x, gamma and g, one pass per row",
                                       .flops = ln_flops});
  register_forward_into(op, ln_dx_into);
  return op;
}();
const Op kLayerNormDgamma = [] {
  const Op op = autodiff::register_op({.name = "layer_norm_dgamma", .arity = 2, .differentiable = false,
                                       .forward = ln_dgamma_fwd, .infer = ln_dgamma_infer,
                                       .doc = "layer_norm's dgamma = sum over rows of g xhat", .flops = ln_flops});
  register_forward_into(op, ln_dgamma_into);
  return op;
}();
const Op kFusedLayerNorm = [] {
  const Op op = autodiff::register_op({.name = "fused_layer_norm", .arity = 3, .forward = fused_ln_fwd,
                                       .infer = fused_ln_infer, .backward = fused_ln_bwd,
                                       .doc = "layer_norm in one pass per row; gradient: layer_norm_dx, layer_norm_dgamma",
                                       .flops = ln_flops});
  register_forward_into(op, ln_forward_into);
  register_forward_into(Op::LayerNorm, ln_forward_into);
  return op;
}();

namespace {
std::vector<Var> fused_ln_bwd(const Var& out, const Var& g, const std::vector<bool>& needs) {
  const Node& n = *out.node();
  const Var x(n.inputs[0]), gamma(n.inputs[1]), beta(n.inputs[2]);
  const autodiff::Attrs eps = autodiff::Attrs().set("eps", n.attrs.f("eps"));
  return {needs[0] ? autodiff::apply(kLayerNormDx, {x, gamma, g}, eps) : Var(),
          needs[1] ? autodiff::apply(kLayerNormDgamma, {x, g}, eps) : Var(),
          needs[2] ? autodiff::sum_like(g, beta) : Var()};
}
}  // namespace

int fuse_layer_norm(Program& p) {
  int rewrites = 0;
  auto own = detail::owners(p);
  for (Node* n : p.schedule()) {
    if (n->op != Op::LayerNorm || (n->dtype != DType::Float32 && n->dtype != DType::Float64)) continue;
    bool same = true;
    for (const NodePtr& in : n->inputs) same = same && in->dtype == n->dtype;
    if (!same) continue;
    std::vector<Var> ins;
    for (const NodePtr& in : n->inputs) ins.emplace_back(in);
    p.replace(Var(own.at(n)), p.make(kFusedLayerNorm, ins, n->attrs));
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

}  // namespace mls::graph_opt
