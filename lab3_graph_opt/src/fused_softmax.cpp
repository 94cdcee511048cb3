// Scale + mask + softmax as fused row kernels (issue 29: compile's GPT step). Not a student file.
//   scaled_softmax(x [, mask]; scale): softmax(scale x + mask) along the last dim, one pass per
//     row computed in its planned buffer (mask: x's trailing dims, e.g. [T, T] for the scores
//     [B, H, T, T], repeating over the leading ones), with a gradient rule made of one
//     scaled_softmax_backward node: scale y (g - sum(g y)) per row, where lab 2's rules make a
//     mul, a sum and a fused loop of three broadcast inputs (and the forward a fused scale + mask
//     loop before the softmax, which is computed elsewhere and copied into its buffer).
//   "fuse-softmax": softmax(x * s + mask) (s a one-element constant, mask a constant of x's
//     trailing dims, the mul and the add used once; either may be missing) along the last dim ->
//     scaled_softmax, run by compile() on the traced forward graph before it builds the backward.
#include <cmath>
#include <limits>
#include <vector>

#include "mls/graph_opt/passes.hpp"
#include "mls/tensor/scalar.hpp"
#include "simd.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;

/// Row reductions in 64-byte lanes (one vector of partial results, then the lanes in order), so
/// that they vectorize: a loop carrying one scalar sum or max does not (no reassociation).
template <class T>
inline T lanes_max(const T* x, std::int64_t n) {
  constexpr int L = 64 / sizeof(T);
  T acc[L];
  for (int l = 0; l < L; ++l) acc[l] = -std::numeric_limits<T>::infinity();
  std::int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  T m = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < L; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
/// sum_j x_j y_j (y null: sum_j x_j), in lanes as lanes_max.
template <class T>
inline T lanes_dot(const T* x, const T* y, std::int64_t n) {
  constexpr int L = 64 / sizeof(T);
  T acc[L] = {};
  std::int64_t j = 0;
  if (y)
    for (; j + L <= n; j += L)
      for (int l = 0; l < L; ++l) acc[l] += x[j + l] * y[j + l];
  else
    for (; j + L <= n; j += L)
      for (int l = 0; l < L; ++l) acc[l] += x[j + l];
  T s = 0;
  for (int l = 0; l < L; ++l) s += acc[l];
  for (; j < n; ++j) s += y ? x[j] * y[j] : x[j];
  return s;
}

/// y = softmax(s x + m) row by row; m (null: none) has `mrows` rows that repeat over x's rows.
template <class T>
void softmax_rows(const T* x, const T* m, T* y, std::int64_t rows, std::int64_t n, std::int64_t mrows, double scale) {
  const T s = static_cast<T>(scale);
  for (std::int64_t r = 0; r < rows; ++r, x += n, y += n) {
    // Separate loops, each vectorized: the affine map, the max, the exp, the sum, the normalisation.
    if (m) {
      const T* mr = m + (r % mrows) * n;
      for (std::int64_t j = 0; j < n; ++j) y[j] = x[j] * s + mr[j];
    } else {
      for (std::int64_t j = 0; j < n; ++j) y[j] = x[j] * s;
    }
    const T mx = lanes_max(y, n);
    for (std::int64_t j = 0; j < n; ++j) y[j] = scalar::exp(y[j] - mx);
    const T inv = T(1) / lanes_dot<T>(y, nullptr, n);
    for (std::int64_t j = 0; j < n; ++j) y[j] *= inv;
  }
}
/// dx = s y (g - sum(g y)) row by row; dx may be y or g.
template <class T>
void softmax_grad_rows(const T* y, const T* g, T* dx, std::int64_t rows, std::int64_t n, double scale) {
  const T s = static_cast<T>(scale);
  for (std::int64_t r = 0; r < rows; ++r, y += n, g += n, dx += n) {
    const T dot = lanes_dot(g, y, n);
    for (std::int64_t j = 0; j < n; ++j) dx[j] = s * (y[j] * (g[j] - dot));
  }
}

/// scaled_softmax's inputs: x [..., N] float32/float64 (at least one dim), optionally a mask of
/// x's dtype whose shape is x's trailing dims (at least the last).
void check_forward(const std::vector<Shape>& s, const std::vector<DType>& d) {
  MLS_CHECK(s.size() == 1 || s.size() == 2, "scaled_softmax: expected 1 or 2 inputs (x, [mask]), got ", s.size());
  MLS_CHECK(!s[0].empty(), "scaled_softmax: x must have at least one dim, got ", shape_str(s[0]));
  MLS_CHECK(d[0] == DType::Float32 || d[0] == DType::Float64, "scaled_softmax: x must be float32 or float64, got ", d[0]);
  if (s.size() == 2) {
    const Shape& m = s[1];
    bool suffix = !m.empty() && m.size() <= s[0].size();
    for (std::size_t k = 0; suffix && k < m.size(); ++k) suffix = m[m.size() - 1 - k] == s[0][s[0].size() - 1 - k];
    MLS_CHECK(suffix, "scaled_softmax: the mask ", shape_str(m), " must be trailing dims of x ", shape_str(s[0]),
              " (at least its last)");
    MLS_CHECK(d[1] == d[0], "scaled_softmax: the mask is ", d[1], ", x is ", d[0]);
  }
}
/// scaled_softmax_backward's inputs: y and g of one shape and one float dtype.
void check_backward(const std::vector<Shape>& s, const std::vector<DType>& d) {
  MLS_CHECK(s.size() == 2, "scaled_softmax_backward: expected 2 inputs (y, g), got ", s.size());
  MLS_CHECK(!s[0].empty(), "scaled_softmax_backward: y must have at least one dim, got ", shape_str(s[0]));
  MLS_CHECK(d[0] == DType::Float32 || d[0] == DType::Float64, "scaled_softmax_backward: y must be float32 or float64, got ",
            d[0]);
  MLS_CHECK(s[1] == s[0], "scaled_softmax_backward: g ", shape_str(s[1]), " must have y's shape ", shape_str(s[0]));
  MLS_CHECK(d[1] == d[0], "scaled_softmax_backward: g is ", d[1], ", y is ", d[0]);
}
template <class In>
void check_inputs(In in, bool grad) {
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const auto& t : in) {
    if constexpr (std::is_pointer_v<std::remove_cvref_t<decltype(t)>>) s.push_back(t->shape), d.push_back(t->dtype);
    else s.push_back(t.shape()), d.push_back(t.dtype());
  }
  if (grad) check_backward(s, d);
  else check_forward(s, d);
}

bool same_float(Ins in, const Tensor& out) {
  if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return false;
  for (const Tensor& t : in)
    if (t.dtype() != out.dtype()) return false;
  return out.ndim() >= 1;
}
bool softmax_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if ((in.size() != 1 && in.size() != 2) || !same_float(in, out) || in[0].shape() != out.shape()) return false;
  const std::int64_t n = out.shape().back(), rows = n > 0 ? out.numel() / n : 0;
  if (rows == 0) return true;
  const Tensor x = in[0].compact(), m = in.size() == 2 ? in[1].compact() : Tensor();
  const std::int64_t mrows = m.defined() ? std::max<std::int64_t>(m.numel() / n, 1) : 1;
  const double s = a.f("scale");
  if (out.dtype() == DType::Float32)
    simd::Isa<softmax_rows<float>>::run(x.data<float>(), m.defined() ? m.data<float>() : nullptr, out.data<float>(), rows, n,
                                        mrows, s);
  else
    simd::Isa<softmax_rows<double>>::run(x.data<double>(), m.defined() ? m.data<double>() : nullptr, out.data<double>(), rows,
                                         n, mrows, s);
  return true;
}
bool softmax_grad_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if (in.size() != 2 || !same_float(in, out) || in[0].shape() != out.shape() || in[1].shape() != out.shape()) return false;
  const std::int64_t n = out.shape().back(), rows = n > 0 ? out.numel() / n : 0;
  if (rows == 0) return true;
  const Tensor y = in[0].compact(), g = in[1].compact();
  const double s = a.f("scale");
  if (out.dtype() == DType::Float32)
    simd::Isa<softmax_grad_rows<float>>::run(y.data<float>(), g.data<float>(), out.data<float>(), rows, n, s);
  else
    simd::Isa<softmax_grad_rows<double>>::run(y.data<double>(), g.data<double>(), out.data<double>(), rows, n, s);
  return true;
}
template <bool (*Into)(Ins, const autodiff::Attrs&, Tensor&), bool Grad>
Tensor forward_of(Ins in, const autodiff::Attrs& a) {
  check_inputs(in, Grad);
  Tensor out = Tensor::empty(in[0].shape(), in[0].dtype());
  MLS_CHECK(Into(in, a, out), Grad ? "scaled_softmax_backward" : "scaled_softmax",
            ": internal error: the kernel refused checked inputs");
  return out;
}
template <bool Grad>
void infer(InNodes in, const autodiff::Attrs& a, Shape& s, DType& d) {
  check_inputs(in, Grad);
  (void)a.f("scale");  // required: a missing attribute is an error here, not at run time
  s = in[0]->shape;
  d = in[0]->dtype;
}
std::vector<Var> softmax_bwd(const Var& out, const Var& g, const std::vector<bool>& needs);
double softmax_flops(const Node& n) { return 6.0 * autodiff::shape_numel(n.shape); }
}  // namespace

const Op kScaledSoftmaxBackward = [] {
  const Op op = autodiff::register_op({.name = "scaled_softmax_backward", .arity = -1, .differentiable = false,
                                       .forward = forward_of<softmax_grad_into, true>, .infer = infer<true>,
                                       .doc = "scale y (g - sum(g y, last dim)) in one pass per row (y, g; scale)",
                                       .flops = softmax_flops});
  register_forward_into(op, softmax_grad_into);
  return op;
}();
const Op kScaledSoftmax = [] {
  const Op op = autodiff::register_op({.name = "scaled_softmax", .arity = -1, .forward = forward_of<softmax_into, false>,
                                       .infer = infer<false>, .backward = softmax_bwd,
                                       .doc = "softmax(scale x + mask, last dim) in one pass per row (x, [mask]; scale); "
                                              "gradient: scaled_softmax_backward",
                                       .flops = softmax_flops});
  register_forward_into(op, softmax_into);
  return op;
}();

namespace {
std::vector<Var> softmax_bwd(const Var& out, const Var& g, const std::vector<bool>& needs) {
  const Node& n = *out.node();
  const double s = n.attrs.f("scale");
  std::vector<Var> grads{needs[0] ? autodiff::apply(kScaledSoftmaxBackward, {out, g}, autodiff::Attrs().set("scale", s))
                                  : Var()};
  if (n.inputs.size() == 2) {
    // d/dmask: the softmax's Jacobian applied to g (scale 1), summed over the rows the mask repeats over.
    grads.push_back(needs[1] ? autodiff::sum_like(autodiff::apply(kScaledSoftmaxBackward, {out, g},
                                                                  autodiff::Attrs().set("scale", 1.0)),
                                                  Var(n.inputs[1]))
                             : Var());
  }
  return grads;
}

/// The value of a one-element float constant, or NaN.
double scalar_constant(const Node& n) {
  if (n.op != Op::Constant || !n.value.defined() || n.value.numel() != 1) return std::nan("");
  return n.value.to(DType::Float64).compact().to_vector<double>()[0];
}
}  // namespace

int fuse_softmax(Program& p) {
  int rewrites = 0;
  const auto uses = use_counts(p);
  auto own = detail::owners(p);
  auto used_once = [&](const Node* n) { return uses.count(n) && uses.at(n) == 1; };
  for (Node* n : p.schedule()) {
    if (n->op != Op::Softmax || (n->dtype != DType::Float32 && n->dtype != DType::Float64) || n->shape.empty()) continue;
    const auto r = static_cast<std::int64_t>(n->shape.size());
    const std::int64_t axis = n->attrs.i("axis");
    if (axis != r - 1 && axis != -1) continue;
    const Node* x = n->inputs[0].get();
    if (x->dtype != n->dtype || x->shape != n->shape) continue;
    Var mask;
    // softmax(u + mask): a constant mask of x's trailing dims (either side of the add), the add read here alone.
    if (x->op == Op::Add && used_once(x)) {
      for (int side = 0; side < 2; ++side) {
        const Node* u = x->inputs[side].get();
        const Node* m = x->inputs[1 - side].get();
        if (m->op != Op::Constant || u->shape != n->shape || u->dtype != n->dtype || m->dtype != n->dtype) continue;
        bool suffix = !m->shape.empty() && m->shape.size() <= n->shape.size();
        for (std::size_t k = 0; suffix && k < m->shape.size(); ++k)
          suffix = m->shape[m->shape.size() - 1 - k] == n->shape[n->shape.size() - 1 - k];
        if (!suffix) continue;
        mask = Var(own.at(m));
        x = u;
        break;
      }
    }
    // softmax(x * s [+ mask]): s a one-element constant (either side), the mul read here alone.
    double scale = 1.0;
    if (x->op == Op::Mul && used_once(x)) {
      for (int side = 0; side < 2; ++side) {
        const Node* u = x->inputs[side].get();
        const double s = scalar_constant(*x->inputs[1 - side]);
        if (std::isnan(s) || u->shape != n->shape || u->dtype != n->dtype) continue;
        scale = s;
        x = u;
        break;
      }
    }
    std::vector<Var> ins{Var(own.at(x))};
    if (mask.defined()) ins.push_back(mask);
    p.replace(Var(own.at(n)), p.make(kScaledSoftmax, ins, autodiff::Attrs().set("scale", scale)));
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

}  // namespace mls::graph_opt
