// The op table: for each op its forward (on lab 1 tensors), its shape inference (graph mode)
// and its gradient rule (written with Var ops, so one rule serves eager and graph mode).
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "mls/autodiff/var.hpp"

namespace mls::ad {

namespace {

using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;
using Grads = std::vector<Var>;
using Needs = std::vector<bool>;

// ---- small helpers ------------------------------------------------------------------------------
bool known(const Shape& s) {
  return std::none_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
}

/// All axes 0..ndim-1 when `axes` is empty, else `axes`.
std::vector<std::int64_t> full_axes(const std::vector<std::int64_t>& axes, std::int64_t ndim) {
  if (!axes.empty()) return axes;
  std::vector<std::int64_t> r(static_cast<std::size_t>(ndim));
  for (std::int64_t i = 0; i < ndim; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

/// Sums `x` down to `target` (the adjoint of broadcasting `target` to x's shape).
Tensor reduce_to(const Tensor& x, const Shape& target) {
  const std::int64_t lead = x.ndim() - static_cast<std::int64_t>(target.size());
  MLS_CHECK(lead >= 0, "sum_like: cannot reduce shape ", shape_str(x.shape()), " to ", shape_str(target));
  std::vector<std::int64_t> axes;
  for (std::int64_t i = 0; i < lead; ++i) axes.push_back(i);
  for (std::size_t i = 0; i < target.size(); ++i) {
    const std::int64_t xd = x.shape()[i + static_cast<std::size_t>(lead)];
    if (target[i] == 1 && xd != 1) axes.push_back(static_cast<std::int64_t>(i) + lead);
    else MLS_CHECK(target[i] == xd, "sum_like: cannot reduce shape ", shape_str(x.shape()), " to ", shape_str(target));
  }
  if (axes.empty()) return x.reshape(target);
  return mls::sum(x, axes, true).reshape(target);
}

DType float_of(DType t) { return is_floating(t) ? t : DType::Float32; }

std::int64_t conv_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad) {
  if (in < 0) return -1;
  return (in + 2 * pad - k) / stride + 1;
}

Tensor leaf_forward(Ins, const Attrs&) { fail("forward: leaves (placeholder, variable, constant) have no forward"); }
void leaf_infer(InNodes, const Attrs&, Shape&, DType&) { fail("infer: leaves are created by the Graph"); }
Grads no_grad_rule(const Var&, const Var&, const Needs& needs) { return Grads(needs.size()); }

// ---- elementwise ------------------------------------------------------------------------------------
template <UnaryOp U>
Tensor unary_fwd(Ins in, const Attrs&) { return mls::unary(U, in[0]); }
void unary_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[0]->shape;
  d = float_of(in[0]->dtype);
}
void same_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[0]->shape;
  d = in[0]->dtype;
}
template <BinaryOp B>
Tensor binary_fwd(Ins in, const Attrs&) { return mls::binary(B, in[0], in[1]); }
void binary_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = broadcast_inferred(in[0]->shape, in[1]->shape, "binary op");
  d = promote(in[0]->dtype, in[1]->dtype);
}
void div_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  binary_infer(in, a, s, d);
  d = float_of(d);
}
void compare_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  binary_infer(in, a, s, d);
  d = DType::Bool;
}

/// cond as 0/1 in g's dtype.
[[maybe_unused]] Var mask(const Var& cond, const Var& like) { return cast(cond, like.dtype()); }
[[maybe_unused]] Var in(const Var& out, std::size_t i) { return Var(out.node()->inputs.at(i)); }

Grads neg_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {-g};
  // END SOLUTION
}
Grads abs_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0);
  const Var zero = scalar_like(x, 0.0);
  return {g * (mask(gt(x, zero), g) - mask(lt(x, zero), g))};
  // END SOLUTION
}
Grads exp_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * out};
  // END SOLUTION
}
Grads log_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g / in(out, 0)};
  // END SOLUTION
}
Grads sqrt_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * 0.5 / out};
  // END SOLUTION
}
Grads rsqrt_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * -0.5 * out * out * out};
  // END SOLUTION
}
Grads sin_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * cos(in(out, 0))};
  // END SOLUTION
}
Grads cos_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {-(g * sin(in(out, 0)))};
  // END SOLUTION
}
Grads tanh_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * (1.0 - out * out)};
  // END SOLUTION
}
Grads sigmoid_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {g * out * (1.0 - out)};
  // END SOLUTION
}
Grads relu_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0);
  return {g * mask(gt(x, scalar_like(x, 0.0)), g)};
  // END SOLUTION
}
Grads gelu_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
  const Var x = in(out, 0);
  const Var x2 = x * x;
  const Var t = tanh((x + x2 * x * c) * k);
  const Var d = (t + 1.0) * 0.5 + x * (1.0 - t * t) * (x2 * (3.0 * c) + 1.0) * (0.5 * k);
  return {g * d};
  // END SOLUTION
}

Grads add_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(g, a) : Var(), needs[1] ? sum_like(g, b) : Var()};
  // END SOLUTION
}
Grads sub_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(g, a) : Var(), needs[1] ? sum_like(-g, b) : Var()};
  // END SOLUTION
}
Grads mul_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(g * b, a) : Var(), needs[1] ? sum_like(g * a, b) : Var()};
  // END SOLUTION
}
Grads div_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(g / b, a) : Var(), needs[1] ? sum_like(-(g * out) / b, b) : Var()};
  // END SOLUTION
}
Grads pow_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(g * b * pow(a, b - 1.0), a) : Var(),
          needs[1] ? sum_like(g * out * log(a), b) : Var()};
  // END SOLUTION
}
Grads maximum_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // Ties split the gradient half and half (the subgradient in the middle).
  const Var a = in(out, 0), b = in(out, 1);
  const Var ma = mask(gt(a, b), g) + mask(eq(a, b), g) * 0.5;
  return {needs[0] ? sum_like(g * ma, a) : Var(), needs[1] ? sum_like(g * (1.0 - ma), b) : Var()};
  // END SOLUTION
}
Grads minimum_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var a = in(out, 0), b = in(out, 1);
  const Var ma = mask(lt(a, b), g) + mask(eq(a, b), g) * 0.5;
  return {needs[0] ? sum_like(g * ma, a) : Var(), needs[1] ? sum_like(g * (1.0 - ma), b) : Var()};
  // END SOLUTION
}

Tensor cast_fwd(Ins in, const Attrs& a) { return in[0].to(static_cast<DType>(a.i("dtype"))); }
void cast_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = in[0]->shape;
  d = static_cast<DType>(a.i("dtype"));
}
Grads cast_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0);
  if (!is_floating(x.dtype())) return {Var()};
  return {cast(g, x.dtype())};
  // END SOLUTION
}

Tensor where_fwd(Ins in, const Attrs&) { return mls::where(in[0], in[1], in[2]); }
void where_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->dtype == DType::Bool, "where: the condition must be bool, got ", in[0]->dtype);
  s = broadcast_inferred(broadcast_inferred(in[0]->shape, in[1]->shape, "where"), in[2]->shape, "where");
  d = promote(in[1]->dtype, in[2]->dtype);
}
Grads where_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var c = in(out, 0), a = in(out, 1), b = in(out, 2);
  const Var zero = scalar_like(g, 0.0);
  return {Var(), needs[1] ? sum_like(where(c, g, zero), a) : Var(),
          needs[2] ? sum_like(where(c, zero, g), b) : Var()};
  // END SOLUTION
}

// ---- reductions -------------------------------------------------------------------------------------
bool keep(const Attrs& a) { return a.i("keepdim") != 0; }
Tensor sum_fwd(Ins in, const Attrs& a) { return mls::sum(in[0], a.ints("axes"), keep(a)); }
Tensor mean_fwd(Ins in, const Attrs& a) { return mls::mean(in[0], a.ints("axes"), keep(a)); }
Tensor max_fwd(Ins in, const Attrs& a) { return mls::max(in[0], a.ints("axes"), keep(a)); }
Tensor min_fwd(Ins in, const Attrs& a) { return mls::min(in[0], a.ints("axes"), keep(a)); }
Shape reduced_shape(const Shape& s, const std::vector<std::int64_t>& axes, bool keepdim) {
  const auto all = full_axes(axes, static_cast<std::int64_t>(s.size()));
  Shape r;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool red = std::find(all.begin(), all.end(), static_cast<std::int64_t>(i)) != all.end();
    if (!red) r.push_back(s[i]);
    else if (keepdim) r.push_back(1);
  }
  return r;
}
void reduce_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = reduced_shape(in[0]->shape, a.ints("axes"), keep(a));
  d = in[0]->dtype == DType::Bool || is_integral(in[0]->dtype) ? DType::Int64 : in[0]->dtype;
}
void mean_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = reduced_shape(in[0]->shape, a.ints("axes"), keep(a));
  d = float_of(in[0]->dtype);
}
void minmax_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = reduced_shape(in[0]->shape, a.ints("axes"), keep(a));
  d = in[0]->dtype;
}
/// g with the reduced axes put back as size 1 (so it broadcasts against the input).
[[maybe_unused]] Var keepdims(const Var& g, const Var& x, const Attrs& a) {
  if (keep(a)) return g;
  return unsqueeze(g, full_axes(a.ints("axes"), x.ndim()));
}
Grads sum_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0);
  return {broadcast_like(keepdims(g, x, out.node()->attrs), x)};
  // END SOLUTION
}
Grads mean_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0);
  return {expand_mean(g, x, full_axes(a.ints("axes"), x.ndim()), keep(a))};
  // END SOLUTION
}
Grads maxmin_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // The gradient goes to the elements equal to the extremum, split equally among ties.
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0);
  const Var m = mask(eq(x, keepdims(out, x, a)), g);
  const Var count = sum(m, full_axes(a.ints("axes"), x.ndim()), true);
  return {m * (keepdims(g, x, a) / count)};
  // END SOLUTION
}

Tensor sum_like_fwd(Ins in, const Attrs&) { return reduce_to(in[0], in[1].shape()); }
void like_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[1]->shape;
  d = in[0]->dtype;
}
Grads sum_like_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {broadcast_like(g, in(out, 0)), Var()};
  // END SOLUTION
}
Tensor broadcast_like_fwd(Ins in, const Attrs&) { return in[0].expand(in[1].shape()); }
Grads broadcast_like_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {sum_like(g, in(out, 0)), Var()};
  // END SOLUTION
}
Tensor expand_mean_fwd(Ins in, const Attrs& a) {
  const Tensor& g = in[0];
  const Shape& target = in[1].shape();
  const auto axes = full_axes(a.ints("axes"), static_cast<std::int64_t>(target.size()));
  std::int64_t count = 1;
  Tensor k = g;
  for (std::int64_t ax : axes) {
    count *= target[static_cast<std::size_t>(ax)];
    if (!keep(a)) k = k.unsqueeze(ax);
  }
  return mls::div(k.expand(target), static_cast<double>(count));
}
void expand_mean_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[1]->shape;
  d = float_of(in[0]->dtype);
}
Grads expand_mean_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {mean(g, a.ints("axes"), keep(a)), Var()};
  // END SOLUTION
}

// ---- shape ops -----------------------------------------------------------------------------------
Tensor reshape_fwd(Ins in, const Attrs& a) { return in[0].reshape(a.ints("shape")); }
void reshape_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = a.ints("shape");
  d = in[0]->dtype;
  const Shape& x = in[0]->shape;
  const auto minus = std::count(s.begin(), s.end(), -1);
  MLS_CHECK(minus <= 1, "reshape: at most one -1 in ", shape_str(s));
  std::int64_t rest = 1;
  for (std::int64_t v : s)
    if (v != -1) rest *= v;
  if (known(x)) {
    const std::int64_t n = checked_numel(x, "reshape");
    if (minus == 1) {
      MLS_CHECK(rest > 0 && n % rest == 0, "reshape: cannot reshape ", shape_str(x), " into ", shape_str(s));
      *std::find(s.begin(), s.end(), -1) = n / rest;
    } else {
      MLS_CHECK(n == rest, "reshape: cannot reshape ", shape_str(x), " (", n, " elements) into ", shape_str(s));
    }
  }
}
Grads reshape_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {reshape_like(g, in(out, 0))};
  // END SOLUTION
}
Tensor reshape_like_fwd(Ins in, const Attrs&) { return in[0].reshape(in[1].shape()); }
Grads reshape_like_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {reshape_like(g, in(out, 0)), Var()};
  // END SOLUTION
}
Tensor permute_fwd(Ins in, const Attrs& a) { return in[0].permute(a.ints("dims")); }
void permute_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const auto& dims = a.ints("dims");
  const Shape& x = in[0]->shape;
  MLS_CHECK(dims.size() == x.size(), "permute: ", dims.size(), " dims given for shape ", shape_str(x));
  std::vector<bool> seen(x.size());
  s.clear();
  for (std::int64_t dd : dims) {
    const auto k = static_cast<std::size_t>(normalize_axis(dd, static_cast<std::int64_t>(x.size()), "permute"));
    MLS_CHECK(!seen[k], "permute: ", shape_str(dims), " is not a permutation");
    seen[k] = true;
    s.push_back(x[k]);
  }
  d = in[0]->dtype;
}
Grads permute_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const auto& dims = out.node()->attrs.ints("dims");
  std::vector<std::int64_t> inv(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto k = static_cast<std::size_t>(normalize_axis(dims[i], static_cast<std::int64_t>(dims.size()), "permute"));
    inv[k] = static_cast<std::int64_t>(i);
  }
  return {permute(g, inv)};
  // END SOLUTION
}
Tensor slice_fwd(Ins in, const Attrs& a) { return in[0].slice(a.i("dim"), a.i("start"), a.i("stop"), a.i("step")); }
std::int64_t slice_len(std::int64_t n, std::int64_t start, std::int64_t stop, std::int64_t step) {
  if (n < 0) return -1;
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  stop = std::clamp<std::int64_t>(stop, 0, n);
  return stop > start ? (stop - start + step - 1) / step : 0;
}
void slice_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  MLS_CHECK(a.i("step") >= 1, "slice: step must be >= 1, got ", a.i("step"));
  s = in[0]->shape;
  auto& n = s[static_cast<std::size_t>(a.i("dim"))];
  n = slice_len(n, a.i("start"), a.i("stop"), a.i("step"));
  d = in[0]->dtype;
}
Grads slice_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {slice_backward(g, in(out, 0), a.i("dim"), a.i("start"), a.i("stop"), a.i("step"))};
  // END SOLUTION
}
Tensor slice_backward_fwd(Ins in, const Attrs& a) {
  Tensor z = Tensor::zeros(in[1].shape(), in[0].dtype());
  z.slice(a.i("dim"), a.i("start"), a.i("stop"), a.i("step")).copy_(in[0]);
  return z;
}
Grads slice_backward_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {slice(g, a.i("dim"), a.i("start"), a.i("stop"), a.i("step")), Var()};
  // END SOLUTION
}
Tensor expand_fwd(Ins in, const Attrs& a) { return in[0].expand(a.ints("shape")); }
void expand_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const Shape& x = in[0]->shape;
  s = a.ints("shape");
  MLS_CHECK(s.size() >= x.size(), "expand: cannot expand ", shape_str(x), " to ", shape_str(s));
  const std::size_t lead = s.size() - x.size();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (s[lead + i] == -1) s[lead + i] = x[i];
    else MLS_CHECK(x[i] == 1 || x[i] == s[lead + i] || x[i] < 0, "expand: cannot expand ", shape_str(x), " to ",
                   shape_str(s));
  }
  d = in[0]->dtype;
}
Grads expand_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {sum_like(g, in(out, 0))};
  // END SOLUTION
}
Tensor unsqueeze_fwd(Ins in, const Attrs& a) {
  Tensor t = in[0];
  for (std::int64_t ax : a.ints("axes")) t = t.unsqueeze(ax);
  return t;
}
void unsqueeze_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = in[0]->shape;
  for (std::int64_t ax : a.ints("axes")) s.insert(s.begin() + ax, 1);
  d = in[0]->dtype;
}
Grads unsqueeze_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {squeeze(g, out.node()->attrs.ints("axes"))};
  // END SOLUTION
}
Tensor squeeze_fwd(Ins in, const Attrs& a) {
  Tensor t = in[0];
  const auto& axes = a.ints("axes");
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) t = t.squeeze(*it);
  return t;
}
void squeeze_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = in[0]->shape;
  const auto& axes = a.ints("axes");
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    MLS_CHECK(s[static_cast<std::size_t>(*it)] == 1 || s[static_cast<std::size_t>(*it)] < 0, "squeeze: dim ", *it,
              " of shape ", shape_str(in[0]->shape), " is not 1");
    s.erase(s.begin() + *it);
  }
  d = in[0]->dtype;
}
Grads squeeze_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {unsqueeze(g, out.node()->attrs.ints("axes"))};
  // END SOLUTION
}
Tensor concat_fwd(Ins in, const Attrs& a) { return mls::concat(std::vector<Tensor>(in.begin(), in.end()), a.i("axis")); }
void concat_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const auto axis = static_cast<std::size_t>(a.i("axis"));
  s = in[0]->shape;
  d = in[0]->dtype;
  for (std::size_t k = 1; k < in.size(); ++k) {
    const Shape& t = in[k]->shape;
    MLS_CHECK(t.size() == s.size(), "concat: input ", k, " has shape ", shape_str(t), ", input 0 has ",
              shape_str(in[0]->shape));
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i == axis) s[i] = (s[i] < 0 || t[i] < 0) ? -1 : s[i] + t[i];
      else MLS_CHECK(s[i] == t[i] || s[i] < 0 || t[i] < 0, "concat: input ", k, " has shape ", shape_str(t),
                     ", input 0 has ", shape_str(in[0]->shape));
    }
    d = promote(d, in[k]->dtype);
  }
}
Grads concat_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const std::int64_t axis = out.node()->attrs.i("axis");
  Grads r(needs.size());
  std::int64_t off = 0;
  for (std::size_t k = 0; k < needs.size(); ++k) {
    const std::int64_t n = out.node()->inputs[k]->shape[static_cast<std::size_t>(axis)];
    MLS_CHECK(n >= 0, "concat: the gradient needs the size of dim ", axis, " of input ", k, " (unknown: -1)");
    if (needs[k]) r[k] = slice(g, axis, off, off + n);
    off += n;
  }
  return r;
  // END SOLUTION
}
Tensor stack_fwd(Ins in, const Attrs& a) { return mls::stack(std::vector<Tensor>(in.begin(), in.end()), a.i("axis")); }
void stack_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = in[0]->shape;
  d = in[0]->dtype;
  for (std::size_t k = 1; k < in.size(); ++k) {
    MLS_CHECK(in[k]->shape == s, "stack: input ", k, " has shape ", shape_str(in[k]->shape), ", input 0 has ",
              shape_str(s));
    d = promote(d, in[k]->dtype);
  }
  s.insert(s.begin() + a.i("axis"), static_cast<std::int64_t>(in.size()));
}
Grads stack_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const std::int64_t axis = out.node()->attrs.i("axis");
  Grads r(needs.size());
  for (std::size_t k = 0; k < needs.size(); ++k) {
    const auto i = static_cast<std::int64_t>(k);
    if (needs[k]) r[k] = squeeze(slice(g, axis, i, i + 1), {axis});
  }
  return r;
  // END SOLUTION
}

// ---- matmul, softmax family ------------------------------------------------------------------------
Tensor matmul_fwd(Ins in, const Attrs&) { return mls::matmul(in[0], in[1]); }
void matmul_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  const Shape& a = in[0]->shape;
  const Shape& b = in[1]->shape;
  MLS_CHECK(a.size() >= 2 && b.size() >= 2, "matmul: node operands must be >= 2-D, got ", shape_str(a), " and ",
            shape_str(b));
  const std::int64_t ka = a[a.size() - 1], kb = b[b.size() - 2];
  MLS_CHECK(ka == kb || ka < 0 || kb < 0, "matmul: inner dimensions differ: ", shape_str(a), " x ", shape_str(b));
  s = broadcast_inferred(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), "matmul");
  s.push_back(a[a.size() - 2]);
  s.push_back(b[b.size() - 1]);
  d = promote(in[0]->dtype, in[1]->dtype);
}
Grads matmul_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // C = A B: dA = dC B^T, dB = A^T dC, each summed over broadcast batch dims.
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(matmul(g, transpose(b)), a) : Var(),
          needs[1] ? sum_like(matmul(transpose(a), g), b) : Var()};
  // END SOLUTION
}
Tensor softmax_fwd(Ins in, const Attrs& a) { return mls::softmax(in[0], a.i("axis")); }
Tensor log_softmax_fwd(Ins in, const Attrs& a) { return mls::log_softmax(in[0], a.i("axis")); }
Tensor logsumexp_fwd(Ins in, const Attrs& a) { return mls::logsumexp(in[0], a.i("axis"), keep(a)); }
void float_same_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[0]->shape;
  d = float_of(in[0]->dtype);
}
void logsumexp_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  s = reduced_shape(in[0]->shape, {a.i("axis")}, keep(a));
  d = float_of(in[0]->dtype);
}
Grads softmax_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // dx = y * (g - sum(g * y, axis))
  const std::int64_t axis = out.node()->attrs.i("axis");
  return {out * (g - sum(g * out, {axis}, true))};
  // END SOLUTION
}
Grads log_softmax_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // dx = g - softmax(x) * sum(g, axis), softmax(x) = exp(y)
  const std::int64_t axis = out.node()->attrs.i("axis");
  return {g - exp(out) * sum(g, {axis}, true)};
  // END SOLUTION
}
Grads logsumexp_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0);
  const Var gk = keep(a) ? g : unsqueeze(g, {a.i("axis")});
  return {gk * softmax(x, a.i("axis"))};
  // END SOLUTION
}

// ---- neural-network ops ------------------------------------------------------------------------------
Tensor softmax_ce_fwd(Ins in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& t = in[1];
  MLS_CHECK(x.ndim() == 2, "softmax_cross_entropy: logits must be [N, C], got ", shape_str(x.shape()));
  const Tensor ls = mls::log_softmax(x, 1);
  if (is_floating(t.dtype())) {
    MLS_CHECK(t.shape() == x.shape(), "softmax_cross_entropy: probability targets must have the logits' shape ",
              shape_str(x.shape()), ", got ", shape_str(t.shape()));
    return mls::neg(mls::sum(mls::mul(t, ls), {1}));
  }
  MLS_CHECK(is_integral(t.dtype()) && t.ndim() == 1 && t.shape()[0] == x.shape()[0],
            "softmax_cross_entropy: class targets must be int32/int64 of shape [", x.shape()[0], "], got ",
            t.dtype(), " ", shape_str(t.shape()));
  const std::int64_t n = x.shape()[0], c = x.shape()[1];
  const auto idx = t.to_vector<std::int64_t>();
  Tensor out = Tensor::empty({n}, ls.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = idx[static_cast<std::size_t>(i)];
    MLS_CHECK(k >= 0 && k < c, "softmax_cross_entropy: target ", k, " at row ", i, " is out of range for ", c,
              " classes");
    out.set({i}, -ls.at({i, k}));
  }
  return out;
}
void softmax_ce_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  const Shape& x = in[0]->shape;
  MLS_CHECK(x.size() == 2, "softmax_cross_entropy: logits must be [N, C], got ", shape_str(x));
  if (is_floating(in[1]->dtype)) {
    (void)broadcast_inferred(x, in[1]->shape, "softmax_cross_entropy");
    MLS_CHECK(in[1]->shape.size() == 2, "softmax_cross_entropy: probability targets must be [N, C], got ",
              shape_str(in[1]->shape));
  } else {
    MLS_CHECK(is_integral(in[1]->dtype) && in[1]->shape.size() == 1,
              "softmax_cross_entropy: class targets must be int32/int64 of shape [N], got ", in[1]->dtype, " ",
              shape_str(in[1]->shape));
  }
  s = {x[0]};
  d = float_of(in[0]->dtype);
}
Grads softmax_ce_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // loss_n = -sum_c t[n,c] log softmax(x)[n,c]  =>  dx = (softmax(x) - t) * g[n]
  const Var x = in(out, 0), t = in(out, 1);
  const Var gk = unsqueeze(g, {1});
  const bool probs = is_floating(t.dtype());
  const Var target = probs ? t : one_hot(t, x.shape()[1], x.dtype());
  return {needs[0] ? (softmax(x, 1) - target) * gk : Var(), (probs && needs[1]) ? -(log_softmax(x, 1) * gk) : Var()};
  // END SOLUTION
}
Tensor one_hot_fwd(Ins in, const Attrs& a) {
  const Tensor& t = in[0];
  MLS_CHECK(is_integral(t.dtype()), "one_hot: indices must be int32/int64, got ", t.dtype());
  const std::int64_t c = a.i("classes");
  const auto idx = t.to_vector<std::int64_t>();
  Shape s = t.shape();
  s.push_back(c);
  Tensor out = Tensor::zeros(s, static_cast<DType>(a.i("dtype")));
  Tensor flat = out.view({static_cast<std::int64_t>(idx.size()), c});
  for (std::size_t i = 0; i < idx.size(); ++i) {
    MLS_CHECK(idx[i] >= 0 && idx[i] < c, "one_hot: index ", idx[i], " is out of range for ", c, " classes");
    flat.set({static_cast<std::int64_t>(i), idx[i]}, 1.0);
  }
  return out;
}
void one_hot_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  MLS_CHECK(is_integral(in[0]->dtype), "one_hot: indices must be int32/int64, got ", in[0]->dtype);
  s = in[0]->shape;
  s.push_back(a.i("classes"));
  d = static_cast<DType>(a.i("dtype"));
}
Tensor mse_fwd(Ins in, const Attrs&) {
  MLS_CHECK(in[0].shape() == in[1].shape(), "mse_loss: shapes differ: ", shape_str(in[0].shape()), " and ",
            shape_str(in[1].shape()));
  const Tensor d = mls::sub(in[0], in[1]);
  return mls::mean(mls::mul(d, d));
}
void mse_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->shape.size() == in[1]->shape.size(), "mse_loss: shapes differ: ", shape_str(in[0]->shape),
            " and ", shape_str(in[1]->shape));
  (void)broadcast_inferred(in[0]->shape, in[1]->shape, "mse_loss");
  s = {};
  d = float_of(promote(in[0]->dtype, in[1]->dtype));
}
Grads mse_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // L = mean(d^2), d = a - b  =>  dL/da = 2 d g / numel, dL/db = -dL/da
  const Var a = in(out, 0), b = in(out, 1);
  const Var d = a - b;
  const Var ga = expand_mean(g, d, {}, false) * d * 2.0;
  return {needs[0] ? ga : Var(), needs[1] ? -ga : Var()};
  // END SOLUTION
}

Tensor layer_norm_fwd(Ins in, const Attrs& a) {
  const Tensor& x = in[0];
  MLS_CHECK(x.ndim() >= 1 && in[1].shape() == Shape{x.shape().back()} && in[2].shape() == Shape{x.shape().back()},
            "layer_norm: gamma and beta must be [", x.ndim() ? x.shape().back() : 0, "], got ",
            shape_str(in[1].shape()), " and ", shape_str(in[2].shape()));
  const Tensor mu = mls::mean(x, {-1}, true);
  const Tensor var = mls::var(x, {-1}, true);
  return mls::add(mls::mul(mls::mul(mls::sub(x, mu), mls::rsqrt(mls::add(var, a.f("eps")))), in[1]), in[2]);
}
void layer_norm_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  const Shape& x = in[0]->shape;
  MLS_CHECK(!x.empty() && in[1]->shape == Shape{x.back()} && in[2]->shape == Shape{x.back()},
            "layer_norm: gamma and beta must be [", x.empty() ? 0 : x.back(), "], got ", shape_str(in[1]->shape),
            " and ", shape_str(in[2]->shape));
  s = x;
  d = float_of(in[0]->dtype);
}
/// xhat and rstd of normalisation over `axes` (keepdim), recomputed with Var ops.
[[maybe_unused]] std::pair<Var, Var> normalize(const Var& x, const std::vector<std::int64_t>& axes, double eps) {
  const Var mu = mean(x, axes, true);
  const Var xc = x - mu;
  const Var rstd = rsqrt(mean(xc * xc, axes, true) + eps);
  return {xc * rstd, rstd};
}
/// dx of y = xhat * gamma' given dxhat (batch statistics over `axes`).
[[maybe_unused]] Var norm_dx(const Var& dxhat, const Var& xhat, const Var& rstd, const std::vector<std::int64_t>& axes) {
  return rstd * (dxhat - mean(dxhat, axes, true) - xhat * mean(dxhat * xhat, axes, true));
}
Grads layer_norm_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0), gamma = in(out, 1), beta = in(out, 2);
  const double eps = out.node()->attrs.f("eps");
  const std::vector<std::int64_t> last{x.ndim() - 1};
  const auto [xhat, rstd] = normalize(x, last, eps);
  return {needs[0] ? norm_dx(g * gamma, xhat, rstd, last) : Var(), needs[1] ? sum_like(g * xhat, gamma) : Var(),
          needs[2] ? sum_like(g, beta) : Var()};
  // END SOLUTION
}

/// Axes of the batch statistics and the broadcast shape of a per-channel vector.
std::vector<std::int64_t> bn_axes(std::int64_t ndim) {
  return ndim == 2 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, 2, 3};
}
Shape bn_channel_shape(std::int64_t ndim, std::int64_t c) { return ndim == 2 ? Shape{1, c} : Shape{1, c, 1, 1}; }
Tensor batch_norm_fwd(Ins in, const Attrs& a) {
  const Tensor& x = in[0];
  MLS_CHECK(x.ndim() == 2 || x.ndim() == 4, "batch_norm: x must be [N, C] or [N, C, H, W], got ", shape_str(x.shape()));
  const std::int64_t c = x.shape()[1];
  for (int i = 1; i < 5; ++i)
    MLS_CHECK(in[static_cast<std::size_t>(i)].shape() == Shape{c}, "batch_norm: gamma, beta, running_mean and running_var must be [",
              c, "], input ", i, " is ", shape_str(in[static_cast<std::size_t>(i)].shape()));
  const Shape cs = bn_channel_shape(x.ndim(), c);
  const auto axes = bn_axes(x.ndim());
  const double eps = a.f("eps");
  Tensor mu, var;
  if (a.i("training")) {
    const std::int64_t n = x.numel() / c;
    MLS_CHECK(n > 1, "batch_norm: training needs more than one value per channel, got shape ", shape_str(x.shape()));
    mu = mls::mean(x, axes, true);
    var = mls::var(x, axes, true);
    const double m = a.f("momentum");
    Tensor rm = in[3], rv = in[4];
    rm.copy_(mls::add(mls::mul(rm, 1.0 - m), mls::mul(mu.reshape({c}), m)));
    rv.copy_(mls::add(mls::mul(rv, 1.0 - m), mls::mul(var.reshape({c}), m * static_cast<double>(n) / (n - 1))));
  } else {
    mu = in[3].reshape(cs);
    var = in[4].reshape(cs);
  }
  const Tensor xhat = mls::mul(mls::sub(x, mu), mls::rsqrt(mls::add(var, eps)));
  return mls::add(mls::mul(xhat, in[1].reshape(cs)), in[2].reshape(cs));
}
void batch_norm_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  const Shape& x = in[0]->shape;
  MLS_CHECK(x.size() == 2 || x.size() == 4, "batch_norm: x must be [N, C] or [N, C, H, W], got ", shape_str(x));
  for (std::size_t i = 1; i < 5; ++i)
    MLS_CHECK(in[i]->shape == Shape{x[1]}, "batch_norm: gamma, beta, running_mean and running_var must be [", x[1],
              "], input ", i, " is ", shape_str(in[i]->shape));
  s = x;
  d = float_of(in[0]->dtype);
}
Grads batch_norm_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0), gamma = in(out, 1), beta = in(out, 2);
  const auto axes = bn_axes(x.ndim());
  const Shape cs = bn_channel_shape(x.ndim(), gamma.shape()[0]);
  const Var gamma_b = reshape(gamma, cs);
  Var xhat, dx;
  if (a.i("training")) {
    const auto [xh, rstd] = normalize(x, axes, a.f("eps"));
    xhat = xh;
    if (needs[0]) dx = norm_dx(g * gamma_b, xhat, rstd, axes);
  } else {
    const Var rstd = rsqrt(reshape(in(out, 4), cs) + a.f("eps"));
    xhat = (x - reshape(in(out, 3), cs)) * rstd;
    if (needs[0]) dx = g * gamma_b * rstd;
  }
  return {dx, needs[1] ? reshape_like(sum(g * xhat, axes, true), gamma) : Var(),
          needs[2] ? reshape_like(sum(g, axes, true), beta) : Var(), Var(), Var()};
  // END SOLUTION
}

Tensor embedding_fwd(Ins in, const Attrs&) {
  const Tensor& w = in[0];
  const Tensor& idx = in[1];
  MLS_CHECK(w.ndim() == 2, "embedding: weight must be [V, D], got ", shape_str(w.shape()));
  MLS_CHECK(is_integral(idx.dtype()), "embedding: indices must be int32/int64, got ", idx.dtype());
  const std::int64_t v = w.shape()[0], dim = w.shape()[1];
  const auto ids = idx.to_vector<std::int64_t>();
  std::vector<Tensor> rows;
  Shape s = idx.shape();
  s.push_back(dim);
  Tensor out = Tensor::empty(s, w.dtype());
  Tensor flat = out.view({static_cast<std::int64_t>(ids.size()), dim});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    MLS_CHECK(ids[i] >= 0 && ids[i] < v, "embedding: index ", ids[i], " is out of range for ", v, " rows");
    flat.select(0, static_cast<std::int64_t>(i)).copy_(w.select(0, ids[i]));
  }
  return out;
}
void embedding_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->shape.size() == 2, "embedding: weight must be [V, D], got ", shape_str(in[0]->shape));
  MLS_CHECK(is_integral(in[1]->dtype), "embedding: indices must be int32/int64, got ", in[1]->dtype);
  s = in[1]->shape;
  s.push_back(in[0]->shape[1]);
  d = in[0]->dtype;
}
Grads embedding_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {embedding_backward(g, in(out, 1), in(out, 0)), Var()};
  // END SOLUTION
}
Tensor embedding_backward_fwd(Ins in, const Attrs&) {
  const Tensor& g = in[0];
  const auto ids = in[1].to_vector<std::int64_t>();
  const Shape& ws = in[2].shape();
  Tensor out = Tensor::zeros(ws, g.dtype());
  const Tensor flat = g.reshape({static_cast<std::int64_t>(ids.size()), ws[1]});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    MLS_CHECK(ids[i] >= 0 && ids[i] < ws[0], "embedding_backward: index ", ids[i], " is out of range for ", ws[0],
              " rows");
    Tensor row = out.select(0, ids[i]);
    row += flat.select(0, static_cast<std::int64_t>(i));
  }
  return out;
}
void embedding_backward_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[2]->shape;
  d = in[0]->dtype;
}
Grads embedding_backward_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {embedding(g, in(out, 1)), Var(), Var()};
  // END SOLUTION
}

struct ConvGeom {
  std::int64_t n, c, h, w, kh, kw, stride, pad, oh, ow;
};
ConvGeom geom(const Shape& x, const Attrs& a) {
  MLS_CHECK(x.size() == 4, "im2col: x must be [N, C, H, W], got ", shape_str(x));
  ConvGeom g{x[0], x[1], x[2], x[3], a.i("kh"), a.i("kw"), a.i("stride"), a.i("pad"), 0, 0};
  MLS_CHECK(g.stride >= 1 && g.pad >= 0 && g.kh >= 1 && g.kw >= 1, "im2col: need kernel >= 1, stride >= 1, pad >= 0, got kernel ",
            g.kh, "x", g.kw, " stride ", g.stride, " pad ", g.pad);
  g.oh = conv_out(g.h, g.kh, g.stride, g.pad);
  g.ow = conv_out(g.w, g.kw, g.stride, g.pad);
  MLS_CHECK((g.h < 0 || g.oh >= 1) && (g.w < 0 || g.ow >= 1), "im2col: kernel ", g.kh, "x", g.kw,
            " is larger than the padded input ", shape_str(x));
  return g;
}
/// cols[n, (c*kh + i)*kw + j, oy*ow + ox] = x[n, c, oy*s - p + i, ox*s - p + j] (0 outside).
/// With `add_back` the loop runs the other way: image[...] += cols[...] (col2im).
template <class T>
void im2col_loop(const ConvGeom& g, T* img, T* cols, bool add_back) {
  const std::int64_t ckk = g.c * g.kh * g.kw, l = g.oh * g.ow;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t i = 0; i < g.kh; ++i)
        for (std::int64_t j = 0; j < g.kw; ++j) {
          T* row = cols + (n * ckk + (c * g.kh + i) * g.kw + j) * l;
          const T* plane = img + (n * g.c + c) * g.h * g.w;
          for (std::int64_t oy = 0; oy < g.oh; ++oy) {
            const std::int64_t y = oy * g.stride - g.pad + i;
            for (std::int64_t ox = 0; ox < g.ow; ++ox) {
              const std::int64_t xx = ox * g.stride - g.pad + j;
              const bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
              if (add_back) {
                if (inside) const_cast<T*>(plane)[y * g.w + xx] += row[oy * g.ow + ox];
              } else {
                row[oy * g.ow + ox] = inside ? plane[y * g.w + xx] : T(0);
              }
            }
          }
        }
}
Tensor im2col_fwd(Ins in, const Attrs& a) {
  const ConvGeom g = geom(in[0].shape(), a);
  MLS_CHECK(is_floating(in[0].dtype()), "im2col: x must be floating, got ", in[0].dtype());
  Tensor x = in[0].compact();
  Tensor cols = Tensor::empty({g.n, g.c * g.kh * g.kw, g.oh * g.ow}, x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) im2col_loop<T>(g, x.data<T>(), cols.data<T>(), false);
  });
  return cols;
}
void im2col_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const ConvGeom g = geom(in[0]->shape, a);
  s = {g.n, g.c < 0 ? -1 : g.c * g.kh * g.kw, (g.oh < 0 || g.ow < 0) ? -1 : g.oh * g.ow};
  d = in[0]->dtype;
}
Grads im2col_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {col2im(g, in(out, 0), a.i("kh"), a.i("kw"), a.i("stride"), a.i("pad"))};
  // END SOLUTION
}
Tensor col2im_fwd(Ins in, const Attrs& a) {
  const ConvGeom g = geom(in[1].shape(), a);
  const Shape want{g.n, g.c * g.kh * g.kw, g.oh * g.ow};
  MLS_CHECK(in[0].shape() == want, "col2im: columns must be ", shape_str(want), ", got ", shape_str(in[0].shape()));
  Tensor cols = in[0].compact();
  Tensor img = Tensor::zeros(in[1].shape(), cols.dtype());
  dispatch(cols.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) im2col_loop<T>(g, img.data<T>(), cols.data<T>(), true);
  });
  return img;
}
Grads col2im_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {im2col(g, a.i("kh"), a.i("kw"), a.i("stride"), a.i("pad")), Var()};
  // END SOLUTION
}
Attrs conv_geom_attrs(const Shape& w, const Attrs& a) {
  return Attrs().set("kh", w[2]).set("kw", w[3]).set("stride", a.i("stride")).set("pad", a.i("pad"));
}
void conv_check(const Shape& x, const Shape& w) {
  MLS_CHECK(x.size() == 4 && w.size() == 4, "conv2d: x must be [N, C, H, W] and w [O, C, kh, kw], got ",
            shape_str(x), " and ", shape_str(w));
  MLS_CHECK(x[1] == w[1] || x[1] < 0, "conv2d: x has ", x[1], " channels, w expects ", w[1], " (w is ", shape_str(w),
            ")");
}
Tensor conv2d_fwd(Ins in, const Attrs& a) {
  conv_check(in[0].shape(), in[1].shape());
  const Shape& ws = in[1].shape();
  const ConvGeom g = geom(in[0].shape(), conv_geom_attrs(ws, a));
  const Tensor cols = im2col_fwd(in.first(1), conv_geom_attrs(ws, a));           // [N, CKK, L]
  const Tensor wm = in[1].reshape({ws[0], ws[1] * ws[2] * ws[3]});                // [O, CKK]
  return mls::matmul(wm, cols).reshape({g.n, ws[0], g.oh, g.ow});                 // [N, O, OH, OW]
}
void conv2d_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  conv_check(in[0]->shape, in[1]->shape);
  const Shape& ws = in[1]->shape;
  MLS_CHECK(known(ws), "conv2d: the weight's shape must be known, got ", shape_str(ws));
  const ConvGeom g = geom(in[0]->shape, conv_geom_attrs(ws, a));
  s = {g.n, ws[0], g.oh, g.ow};
  d = promote(in[0]->dtype, in[1]->dtype);
}
Grads conv2d_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // out[n] = W2 cols[n] with W2 = w as [O, CKK]: dW2 = sum_n g[n] cols[n]^T, dcols = W2^T g[n].
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0), w = in(out, 1);
  const Shape& ws = w.shape();
  const Shape& os = out.shape();
  MLS_CHECK(os[2] >= 0 && os[3] >= 0, "conv2d: the gradient needs a known output size, got ", shape_str(os));
  const std::int64_t ckk = ws[1] * ws[2] * ws[3];
  const Var g3 = reshape(g, {-1, ws[0], os[2] * os[3]});  // [N, O, L]
  Var dx, dw;
  if (needs[1]) {
    const Var cols = im2col(x, ws[2], ws[3], a.i("stride"), a.i("pad"));  // [N, CKK, L]
    dw = reshape(sum(matmul(g3, transpose(cols)), {0}), ws);
  }
  if (needs[0]) {
    const Var w2t = transpose(reshape(w, {ws[0], ckk}));  // [CKK, O]
    dx = col2im(matmul(w2t, g3), x, ws[2], ws[3], a.i("stride"), a.i("pad"));
  }
  return {dx, dw};
  // END SOLUTION
}

Tensor assign_fwd(Ins in, const Attrs&) { return in[1]; }
void assign_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->op == Op::Variable, "assign: the target must be a variable, got ", op_name(in[0]->op));
  MLS_CHECK(in[1]->shape == in[0]->shape && in[1]->dtype == in[0]->dtype, "assign: value ", shape_str(in[1]->shape),
            " ", in[1]->dtype, " does not match variable ", shape_str(in[0]->shape), " ", in[0]->dtype);
  s = in[0]->shape;
  d = in[0]->dtype;
}

// ---- custom ops (eager only; see mls::ad::custom) ----------------------------------------------
Tensor custom_fwd(Ins, const Attrs&) { fail("custom: the forward of a custom op runs only through mls::ad::custom"); }
void custom_infer(InNodes, const Attrs&, Shape&, DType&) {
  fail("custom: custom ops are eager only, they cannot be added to a graph");
}
Grads custom_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Node& n = *out.get();
  MLS_CHECK(n.custom && n.custom->backward, "custom: node ", n.id, " has no backward callback");
  Grads gs = n.custom->backward(g, needs);
  MLS_CHECK(gs.size() == needs.size(), "custom: the backward of '", n.custom->name, "' returned ", gs.size(),
            " gradients for ", needs.size(), " inputs");
  return gs;
}

// ---- the table -------------------------------------------------------------------------------------
constexpr std::size_t kNumOps = static_cast<std::size_t>(Op::Count_);

std::array<OpDef, kNumOps> make_table() {
  std::array<OpDef, kNumOps> t{};
  auto def = [&](Op op, const char* name, int arity, bool diff, auto fwd, auto inf, auto bwd) {
    t[static_cast<std::size_t>(op)] = OpDef{name, arity, diff, fwd, inf, bwd};
  };
  def(Op::Placeholder, "placeholder", 0, true, leaf_forward, leaf_infer, no_grad_rule);
  def(Op::Variable, "variable", 0, true, leaf_forward, leaf_infer, no_grad_rule);
  def(Op::Constant, "constant", 0, false, leaf_forward, leaf_infer, no_grad_rule);
  def(Op::Assign, "assign", 2, false, assign_fwd, assign_infer, no_grad_rule);
  def(Op::Neg, "neg", 1, true, unary_fwd<UnaryOp::Neg>, same_infer, neg_bwd);
  def(Op::Abs, "abs", 1, true, unary_fwd<UnaryOp::Abs>, same_infer, abs_bwd);
  def(Op::Exp, "exp", 1, true, unary_fwd<UnaryOp::Exp>, unary_infer, exp_bwd);
  def(Op::Log, "log", 1, true, unary_fwd<UnaryOp::Log>, unary_infer, log_bwd);
  def(Op::Sqrt, "sqrt", 1, true, unary_fwd<UnaryOp::Sqrt>, unary_infer, sqrt_bwd);
  def(Op::Rsqrt, "rsqrt", 1, true, unary_fwd<UnaryOp::Rsqrt>, unary_infer, rsqrt_bwd);
  def(Op::Sin, "sin", 1, true, unary_fwd<UnaryOp::Sin>, unary_infer, sin_bwd);
  def(Op::Cos, "cos", 1, true, unary_fwd<UnaryOp::Cos>, unary_infer, cos_bwd);
  def(Op::Tanh, "tanh", 1, true, unary_fwd<UnaryOp::Tanh>, unary_infer, tanh_bwd);
  def(Op::Sigmoid, "sigmoid", 1, true, unary_fwd<UnaryOp::Sigmoid>, unary_infer, sigmoid_bwd);
  def(Op::Relu, "relu", 1, true, unary_fwd<UnaryOp::Relu>, same_infer, relu_bwd);
  def(Op::Gelu, "gelu", 1, true, unary_fwd<UnaryOp::Gelu>, unary_infer, gelu_bwd);
  def(Op::Add, "add", 2, true, binary_fwd<BinaryOp::Add>, binary_infer, add_bwd);
  def(Op::Sub, "sub", 2, true, binary_fwd<BinaryOp::Sub>, binary_infer, sub_bwd);
  def(Op::Mul, "mul", 2, true, binary_fwd<BinaryOp::Mul>, binary_infer, mul_bwd);
  def(Op::Div, "div", 2, true, binary_fwd<BinaryOp::Div>, div_infer, div_bwd);
  def(Op::Pow, "pow", 2, true, binary_fwd<BinaryOp::Pow>, binary_infer, pow_bwd);
  def(Op::Maximum, "maximum", 2, true, binary_fwd<BinaryOp::Maximum>, binary_infer, maximum_bwd);
  def(Op::Minimum, "minimum", 2, true, binary_fwd<BinaryOp::Minimum>, binary_infer, minimum_bwd);
  def(Op::Eq, "eq", 2, false, binary_fwd<BinaryOp::Eq>, compare_infer, no_grad_rule);
  def(Op::Ne, "ne", 2, false, binary_fwd<BinaryOp::Ne>, compare_infer, no_grad_rule);
  def(Op::Lt, "lt", 2, false, binary_fwd<BinaryOp::Lt>, compare_infer, no_grad_rule);
  def(Op::Le, "le", 2, false, binary_fwd<BinaryOp::Le>, compare_infer, no_grad_rule);
  def(Op::Gt, "gt", 2, false, binary_fwd<BinaryOp::Gt>, compare_infer, no_grad_rule);
  def(Op::Ge, "ge", 2, false, binary_fwd<BinaryOp::Ge>, compare_infer, no_grad_rule);
  def(Op::Cast, "cast", 1, true, cast_fwd, cast_infer, cast_bwd);
  def(Op::Where, "where", 3, true, where_fwd, where_infer, where_bwd);
  def(Op::Sum, "sum", 1, true, sum_fwd, reduce_infer, sum_bwd);
  def(Op::Mean, "mean", 1, true, mean_fwd, mean_infer, mean_bwd);
  def(Op::Max, "max", 1, true, max_fwd, minmax_infer, maxmin_bwd);
  def(Op::Min, "min", 1, true, min_fwd, minmax_infer, maxmin_bwd);
  def(Op::SumLike, "sum_like", 2, true, sum_like_fwd, like_infer, sum_like_bwd);
  def(Op::BroadcastLike, "broadcast_like", 2, true, broadcast_like_fwd, like_infer, broadcast_like_bwd);
  def(Op::ExpandMean, "expand_mean", 2, true, expand_mean_fwd, expand_mean_infer, expand_mean_bwd);
  def(Op::Reshape, "reshape", 1, true, reshape_fwd, reshape_infer, reshape_bwd);
  def(Op::ReshapeLike, "reshape_like", 2, true, reshape_like_fwd, like_infer, reshape_like_bwd);
  def(Op::Permute, "permute", 1, true, permute_fwd, permute_infer, permute_bwd);
  def(Op::Slice, "slice", 1, true, slice_fwd, slice_infer, slice_bwd);
  def(Op::SliceBackward, "slice_backward", 2, true, slice_backward_fwd, like_infer, slice_backward_bwd);
  def(Op::Expand, "expand", 1, true, expand_fwd, expand_infer, expand_bwd);
  def(Op::Unsqueeze, "unsqueeze", 1, true, unsqueeze_fwd, unsqueeze_infer, unsqueeze_bwd);
  def(Op::Squeeze, "squeeze", 1, true, squeeze_fwd, squeeze_infer, squeeze_bwd);
  def(Op::Concat, "concat", -1, true, concat_fwd, concat_infer, concat_bwd);
  def(Op::Stack, "stack", -1, true, stack_fwd, stack_infer, stack_bwd);
  def(Op::Matmul, "matmul", 2, true, matmul_fwd, matmul_infer, matmul_bwd);
  def(Op::Softmax, "softmax", 1, true, softmax_fwd, float_same_infer, softmax_bwd);
  def(Op::LogSoftmax, "log_softmax", 1, true, log_softmax_fwd, float_same_infer, log_softmax_bwd);
  def(Op::LogSumExp, "logsumexp", 1, true, logsumexp_fwd, logsumexp_infer, logsumexp_bwd);
  def(Op::SoftmaxCrossEntropy, "softmax_cross_entropy", 2, true, softmax_ce_fwd, softmax_ce_infer, softmax_ce_bwd);
  def(Op::OneHot, "one_hot", 1, false, one_hot_fwd, one_hot_infer, no_grad_rule);
  def(Op::Mse, "mse_loss", 2, true, mse_fwd, mse_infer, mse_bwd);
  def(Op::LayerNorm, "layer_norm", 3, true, layer_norm_fwd, layer_norm_infer, layer_norm_bwd);
  def(Op::BatchNorm, "batch_norm", 5, true, batch_norm_fwd, batch_norm_infer, batch_norm_bwd);
  def(Op::Embedding, "embedding", 2, true, embedding_fwd, embedding_infer, embedding_bwd);
  def(Op::EmbeddingBackward, "embedding_backward", 3, true, embedding_backward_fwd, embedding_backward_infer,
      embedding_backward_bwd);
  def(Op::Im2Col, "im2col", 1, true, im2col_fwd, im2col_infer, im2col_bwd);
  def(Op::Col2Im, "col2im", 2, true, col2im_fwd, like_infer, col2im_bwd);
  def(Op::Conv2d, "conv2d", 2, true, conv2d_fwd, conv2d_infer, conv2d_bwd);
  def(Op::Custom, "custom", -1, true, custom_fwd, custom_infer, custom_bwd);
  return t;
}

const std::array<OpDef, kNumOps>& table() {
  static const std::array<OpDef, kNumOps> t = make_table();
  return t;
}

}  // namespace

Shape broadcast_inferred(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x == y) r[i] = x;
    else if (x == 1) r[i] = y;
    else if (y == 1) r[i] = x;
    else if (x < 0) r[i] = y;
    else if (y < 0) r[i] = x;
    else fail(op, ": cannot broadcast shapes ", shape_str(a), " and ", shape_str(b));
  }
  return r;
}


const OpDef& op_def(Op op) {
  const auto i = static_cast<std::size_t>(op);
  MLS_CHECK(i < kNumOps, "op_def: unknown op ", i);
  return table()[i];
}
const char* op_name(Op op) { return op_def(op).name; }
Op op_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kNumOps; ++i)
    if (table()[i].name == name) return static_cast<Op>(i);
  fail("op_from_name: unknown op '", name, "'");
}

}  // namespace mls::ad
