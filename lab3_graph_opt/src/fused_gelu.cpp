// Bias + GELU as fused row kernels (issue 29: compile's GPT step). Not a student file.
//   bias_gelu(x [, b]): gelu(x + b) in one pass (b [N] along x's last dim, or no bias), with a
//     gradient rule made of one bias_gelu_backward node: g gelu'(x + b) in one pass (x + b
//     recomputed, the tanh in registers), where lab 2's gelu rule makes a tanh node and a chain
//     of seven Var ops (two fused loops after fuse-elementwise, the tanh stored between them).
//   "fuse-gelu": gelu(x + b) (the add used once) -> bias_gelu(x, b), any other gelu(x) ->
//     bias_gelu(x), run by compile() on the traced forward graph before it builds the backward.
#include <cmath>
#include <type_traits>
#include <vector>

#include "mls/graph_opt/passes.hpp"
#include "mls/tensor/scalar.hpp"
#include "simd.hpp"
#include "pass_util.hpp"

namespace mls::graph_opt {

namespace {
using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;

/// y = gelu(x + b) row by row (b null: no bias); y may be x.
template <class T>
void bias_gelu_rows(const T* x, const T* b, T* y, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r, x += n, y += n) {
    if (b)
      for (std::int64_t j = 0; j < n; ++j) y[j] = scalar::gelu(x[j] + b[j]);
    else
      for (std::int64_t j = 0; j < n; ++j) y[j] = scalar::gelu(x[j]);
  }
}
/// dx = g gelu'(x + b) row by row (b null: no bias); dx may be x or g.
template <class T>
void bias_gelu_grad_rows(const T* x, const T* b, const T* g, T* dx, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r, x += n, g += n, dx += n) {
    if (b)
      for (std::int64_t j = 0; j < n; ++j) dx[j] = g[j] * scalar::gelu_grad(x[j] + b[j]);
    else
      for (std::int64_t j = 0; j < n; ++j) dx[j] = g[j] * scalar::gelu_grad(x[j]);
  }
}

/// The shapes and dtypes every op here checks: x [..., N] floating, then (with a bias) b [N],
/// then `grads` inputs of x's shape, all of x's dtype.
void check(const std::vector<Shape>& s, const std::vector<DType>& d, const char* op, bool bias) {
  MLS_CHECK(!s[0].empty(), op, ": x must have at least one dim, got ", shape_str(s[0]));
  MLS_CHECK(d[0] == DType::Float32 || d[0] == DType::Float64, op, ": x must be float32 or float64, got ", d[0]);
  for (std::size_t k = 1; k < s.size(); ++k) {
    const Shape want = bias && k == 1 ? Shape{s[0].back()} : s[0];
    MLS_CHECK(s[k] == want, op, ": input ", k, " must be ", shape_str(want), " for x ", shape_str(s[0]), ", got ",
              shape_str(s[k]));
    MLS_CHECK(d[k] == d[0], op, ": input ", k, " is ", d[k], ", x is ", d[0]);
  }
}
template <class In>
void check_inputs(In in, const char* op, bool grad) {
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const auto& t : in) {
    if constexpr (std::is_pointer_v<std::remove_cvref_t<decltype(t)>>) s.push_back(t->shape), d.push_back(t->dtype);
    else s.push_back(t.shape()), d.push_back(t.dtype());
  }
  const std::size_t lo = grad ? 2 : 1;
  MLS_CHECK(in.size() == lo || in.size() == lo + 1, op, ": expected ", lo, " or ", lo + 1, " inputs (x, [bias, ]",
            grad ? "g" : "", "), got ", in.size());
  check(s, d, op, in.size() == lo + 1);
}

bool same_float(Ins in, const Tensor& out) {
  if (out.dtype() != DType::Float32 && out.dtype() != DType::Float64) return false;
  for (const Tensor& t : in)
    if (t.dtype() != out.dtype()) return false;
  return out.ndim() >= 1;
}
bool bias_gelu_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if ((in.size() != 1 && in.size() != 2) || !same_float(in, out) || in[0].shape() != out.shape()) return false;
  const std::int64_t n = out.shape().back(), rows = n > 0 ? out.numel() / n : 0;
  const Tensor x = in[0].compact(), b = in.size() == 2 ? in[1].compact() : Tensor();
  if (out.dtype() == DType::Float32)
    simd::Isa<bias_gelu_rows<float>>::run(x.data<float>(), b.defined() ? b.data<float>() : nullptr, out.data<float>(), rows, n);
  else
    simd::Isa<bias_gelu_rows<double>>::run(x.data<double>(), b.defined() ? b.data<double>() : nullptr, out.data<double>(), rows, n);
  return true;
}
bool bias_gelu_grad_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if ((in.size() != 2 && in.size() != 3) || !same_float(in, out) || in[0].shape() != out.shape()) return false;
  const std::int64_t n = out.shape().back(), rows = n > 0 ? out.numel() / n : 0;
  const Tensor x = in[0].compact(), b = in.size() == 3 ? in[1].compact() : Tensor(), g = in.back().compact();
  if (out.dtype() == DType::Float32)
    simd::Isa<bias_gelu_grad_rows<float>>::run(x.data<float>(), b.defined() ? b.data<float>() : nullptr, g.data<float>(),
                                               out.data<float>(), rows, n);
  else
    simd::Isa<bias_gelu_grad_rows<double>>::run(x.data<double>(), b.defined() ? b.data<double>() : nullptr,
                                                g.data<double>(), out.data<double>(), rows, n);
  return true;
}
template <bool (*Into)(Ins, const autodiff::Attrs&, Tensor&), bool Grad>
Tensor forward_of(Ins in, const autodiff::Attrs& a, const char* op) {
  check_inputs(in, op, Grad);
  Tensor out = Tensor::empty(in[0].shape(), in[0].dtype());
  MLS_CHECK(Into(in, a, out), op, ": internal error: the kernel refused checked inputs");
  return out;
}
template <bool Grad>
void infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_inputs(in, Grad ? "bias_gelu_backward" : "bias_gelu", Grad);
  s = in[0]->shape;
  d = in[0]->dtype;
}
Tensor bias_gelu_fwd(Ins in, const autodiff::Attrs& a) { return forward_of<bias_gelu_into, false>(in, a, "bias_gelu"); }
Tensor bias_gelu_grad_fwd(Ins in, const autodiff::Attrs& a) {
  return forward_of<bias_gelu_grad_into, true>(in, a, "bias_gelu_backward");
}
std::vector<Var> bias_gelu_bwd(const Var& out, const Var& g, const std::vector<bool>& needs);
double gelu_flops(const Node& n) { return 20.0 * autodiff::shape_numel(n.shape); }
}  // namespace

const Op kBiasGeluBackward = [] {
  const Op op = autodiff::register_op({.name = "bias_gelu_backward", .arity = -1, .differentiable = false,
                                       .forward = bias_gelu_grad_fwd, .infer = infer<true>,
                                       .doc = "g gelu'(x + bias) in one pass (x, [bias,] g)", .flops = gelu_flops});
  register_forward_into(op, bias_gelu_grad_into);
  return op;
}();
const Op kBiasGelu = [] {
  const Op op = autodiff::register_op({.name = "bias_gelu", .arity = -1, .forward = bias_gelu_fwd, .infer = infer<false>,
                                       .backward = bias_gelu_bwd,
                                       .doc = "gelu(x + bias) in one pass (x, [bias]); gradient: bias_gelu_backward",
                                       .flops = gelu_flops});
  register_forward_into(op, bias_gelu_into);
  return op;
}();

namespace {
std::vector<Var> bias_gelu_bwd(const Var& out, const Var& g, const std::vector<bool>& needs) {
  const Node& n = *out.node();
  std::vector<Var> ins;
  for (const NodePtr& in : n.inputs) ins.emplace_back(in);
  ins.push_back(g);
  const Var d = autodiff::apply(kBiasGeluBackward, ins);  // d(out)/d(x + b) g, x's shape
  std::vector<Var> grads{needs[0] ? d : Var()};
  if (n.inputs.size() == 2) grads.push_back(needs[1] ? autodiff::sum_like(d, Var(n.inputs[1])) : Var());
  return grads;
}
}  // namespace

int fuse_gelu(Program& p) {
  int rewrites = 0;
  const auto uses = use_counts(p);
  auto own = detail::owners(p);
  for (Node* n : p.schedule()) {
    if (n->op != Op::Gelu || (n->dtype != DType::Float32 && n->dtype != DType::Float64) || n->shape.empty()) continue;
    const Node* in = n->inputs[0].get();
    if (in->dtype != n->dtype || in->shape != n->shape) continue;
    std::vector<Var> ins{Var(own.at(in))};
    // gelu(x + b): b [N] or [1, ..., 1, N] along the last dim, the add read by this gelu alone.
    if (in->op == Op::Add && uses.at(in) == 1) {
      for (int side = 0; side < 2; ++side) {
        const Node* x = in->inputs[side].get();
        const Node* b = in->inputs[1 - side].get();
        bool row = !b->shape.empty() && b->shape.back() == n->shape.back() && b->shape.size() <= n->shape.size();
        for (std::size_t d = 0; row && d + 1 < b->shape.size(); ++d) row = b->shape[d] == 1;
        if (x->shape == n->shape && x->dtype == n->dtype && b->dtype == n->dtype && row) {
          Var bias(own.at(b));
          if (b->shape.size() != 1) bias = autodiff::reshape(bias, {n->shape.back()});
          ins = {Var(own.at(x)), bias};
          break;
        }
      }
    }
    p.replace(Var(own.at(n)), p.make(kBiasGelu, ins));
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

}  // namespace mls::graph_opt
