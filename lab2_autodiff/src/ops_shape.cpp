// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Shape ops (reshape, permute, slice, expand, squeeze, concat, stack): forward, shape inference
// and gradient rules (student functions: the `*_bwd` bodies).
#include "ops_internal.hpp"

namespace mls::autodiff::ops {

namespace {
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
/// reshape: g reshaped back to the input (reshape_like, the run-time shape).
Grads reshape_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {reshape_like(g, in(out, 0))};
  // END SOLUTION
}
Tensor reshape_like_fwd(Ins in, const Attrs&) { return in[0].reshape(in[1].shape()); }
/// reshape_like: g reshaped back to input 0; input 1 only gives a shape.
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
/// permute: g permuted by the inverse permutation.
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
/// slice: g written into zeros of the input's shape (slice_backward).
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
/// slice_backward's adjoint is the slice of g; input 1 only gives a shape.
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
/// expand: g summed back to the input shape (sum_like).
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
/// unsqueeze: squeeze the same axes of g.
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
/// squeeze: unsqueeze the same axes of g.
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
/// concat: input k gets its slice of g along the axis (offsets from the input sizes).
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
/// stack: input k gets slice k of g along the axis, that axis squeezed.
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

}  // namespace

void register_shape_ops(OpTable& t) {
  t.add(Op::Reshape, {.name = "reshape", .forward = reshape_fwd, .infer = reshape_infer, .backward = reshape_bwd,
                      .doc = "reshape to attribute shape (one -1)", .view = true});
  t.add(Op::ReshapeLike, {.name = "reshape_like", .arity = 2, .forward = reshape_like_fwd, .infer = like_infer,
                          .backward = reshape_like_bwd, .doc = "input 0 reshaped to input 1's shape", .view = true});
  t.add(Op::Permute, {.name = "permute", .forward = permute_fwd, .infer = permute_infer, .backward = permute_bwd,
                      .doc = "permutes the dims (attribute dims)", .view = true});
  t.add(Op::Slice, {.name = "slice", .forward = slice_fwd, .infer = slice_infer, .backward = slice_bwd,
                    .doc = "start:stop:step along dim", .view = true});
  t.add(Op::SliceBackward, {.name = "slice_backward", .arity = 2, .forward = slice_backward_fwd, .infer = like_infer,
                            .backward = slice_backward_bwd, .doc = "zeros of input 1's shape with input 0 in the slice"});
  t.add(Op::Expand, {.name = "expand", .forward = expand_fwd, .infer = expand_infer, .backward = expand_bwd,
                     .doc = "broadcast to attribute shape", .view = true});
  t.add(Op::Unsqueeze, {.name = "unsqueeze", .forward = unsqueeze_fwd, .infer = unsqueeze_infer,
                        .backward = unsqueeze_bwd, .doc = "inserts size-1 dims at axes", .view = true});
  t.add(Op::Squeeze, {.name = "squeeze", .forward = squeeze_fwd, .infer = squeeze_infer, .backward = squeeze_bwd,
                      .doc = "removes size-1 dims at axes", .view = true});
  t.add(Op::Concat, {.name = "concat", .arity = -1, .forward = concat_fwd, .infer = concat_infer,
                     .backward = concat_bwd, .doc = "joins the inputs along axis"});
  t.add(Op::Stack, {.name = "stack", .arity = -1, .forward = stack_fwd, .infer = stack_infer, .backward = stack_bwd,
                    .doc = "stacks the inputs along a new axis"});
}

}  // namespace mls::autodiff::ops
