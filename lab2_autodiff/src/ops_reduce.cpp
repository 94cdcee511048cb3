// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Reductions, their adjoint pairs (sum_like/broadcast_like, expand_mean) and the softmax family:
// forward, shape inference and gradient rules (student functions: the `*_bwd` bodies).
#include "ops_internal.hpp"

namespace mls::autodiff::ops {

namespace {
// ---- reductions -------------------------------------------------------------------------------------
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
/// sum: g broadcast back to x (reduced axes put back first unless keepdim).
Grads sum_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Var x = in(out, 0);
  return {broadcast_like(keepdims(g, x, out.node()->attrs), x)};
  // END SOLUTION
}
/// mean: g spread over the reduced axes and divided by their size: expand_mean.
Grads mean_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0);
  return {expand_mean(g, x, full_axes(a.ints("axes"), x.ndim()), keep(a))};
  // END SOLUTION
}
/// max/min over axes: g goes to the elements equal to the extremum, split among ties.
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
/// sum_like's adjoint is broadcast_like (and back): g broadcast to the input.
Grads sum_like_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {broadcast_like(g, in(out, 0)), Var()};
  // END SOLUTION
}
Tensor broadcast_like_fwd(Ins in, const Attrs&) { return in[0].expand(in[1].shape()); }
/// broadcast_like's adjoint is sum_like: g summed down to the input's shape.
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
/// expand_mean's adjoint is mean over the same axes.
Grads expand_mean_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  return {mean(g, a.ints("axes"), keep(a)), Var()};
  // END SOLUTION
}

// ---- softmax family --------------------------------------------------------------------------------
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
/// softmax: dx = y (g - sum(g y, axis)), y the output.
Grads softmax_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // dx = y * (g - sum(g * y, axis))
  const std::int64_t axis = out.node()->attrs.i("axis");
  return {out * (g - sum(g * out, {axis}, true))};
  // END SOLUTION
}
/// log_softmax: dx = g - softmax(x) sum(g, axis), softmax(x) = exp(out).
Grads log_softmax_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // dx = g - softmax(x) * sum(g, axis), softmax(x) = exp(y)
  const std::int64_t axis = out.node()->attrs.i("axis");
  return {g - exp(out) * sum(g, {axis}, true)};
  // END SOLUTION
}
/// logsumexp: dx = g softmax(x) (g unsqueezed on the axis unless keepdim).
Grads logsumexp_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0);
  const Var gk = keep(a) ? g : unsqueeze(g, {a.i("axis")});
  return {gk * softmax(x, a.i("axis"))};
  // END SOLUTION
}

}  // namespace

void register_reduce_ops(OpTable& t) {
  t.add(Op::Sum, {.name = "sum", .forward = sum_fwd, .infer = reduce_infer, .backward = sum_bwd,
                  .doc = "sum over attribute axes (empty: all), keepdim"});
  t.add(Op::Mean, {.name = "mean", .forward = mean_fwd, .infer = mean_infer, .backward = mean_bwd,
                   .doc = "mean over axes, keepdim"});
  t.add(Op::Max, {.name = "max", .forward = max_fwd, .infer = minmax_infer, .backward = maxmin_bwd,
                  .doc = "max over axes (ties share the gradient)"});
  t.add(Op::Min, {.name = "min", .forward = min_fwd, .infer = minmax_infer, .backward = maxmin_bwd,
                  .doc = "min over axes (ties share the gradient)"});
  t.add(Op::SumLike, {.name = "sum_like", .arity = 2, .forward = sum_like_fwd, .infer = like_infer,
                      .backward = sum_like_bwd, .doc = "input 0 summed down to the shape of input 1"});
  t.add(Op::BroadcastLike, {.name = "broadcast_like", .arity = 2, .forward = broadcast_like_fwd, .infer = like_infer,
                            .backward = broadcast_like_bwd, .doc = "input 0 broadcast to the shape of input 1"});
  t.add(Op::ExpandMean, {.name = "expand_mean", .arity = 2, .forward = expand_mean_fwd, .infer = expand_mean_infer,
                         .backward = expand_mean_bwd, .doc = "the adjoint of mean: g spread over input 1's shape / count"});
  t.add(Op::Softmax, {.name = "softmax", .forward = softmax_fwd, .infer = float_same_infer, .backward = softmax_bwd,
                      .doc = "softmax along attribute axis"});
  t.add(Op::LogSoftmax, {.name = "log_softmax", .forward = log_softmax_fwd, .infer = float_same_infer,
                         .backward = log_softmax_bwd, .doc = "log softmax along axis"});
  t.add(Op::LogSumExp, {.name = "logsumexp", .forward = logsumexp_fwd, .infer = logsumexp_infer,
                        .backward = logsumexp_bwd, .doc = "log sum exp along axis, keepdim"});
}

}  // namespace mls::autodiff::ops
