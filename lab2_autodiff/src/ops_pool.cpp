// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Pooling (max with its argmax adjoints, average) and transposed convolution: forward, shape
// inference, gradient and forward-mode rules (workload.hpp). The student functions: the two
// pooling adjoints' kernels, max_backward_fwd and avg_backward_fwd.
#include <cmath>
#include <type_traits>

#include "mls/autodiff/workload.hpp"
#include "mls/common/parallel.hpp"
#include "ops_internal.hpp"

namespace mls::autodiff {

namespace ops {
namespace {

// ---- pooling geometry ---------------------------------------------------------------------------
struct PoolGeom {
  std::int64_t n, c, h, w, kh, kw, stride, pad, oh, ow;
};
/// Checks a pooling window against x's shape (-1 sizes are skipped) and derives the output size.
PoolGeom pool_geom(const Shape& x, const Attrs& a, const char* op) {
  MLS_CHECK(x.size() == 4, op, ": x must be [N, C, H, W], got ", shape_str(x));
  PoolGeom g{x[0], x[1], x[2], x[3], a.i("kh"), a.i("kw"), a.i("stride"), a.i("pad"), -1, -1};
  MLS_CHECK(g.kh >= 1 && g.kw >= 1 && g.stride >= 1 && g.pad >= 0, op,
            ": need kernel >= 1, stride >= 1, pad >= 0, got kernel ", g.kh, "x", g.kw, " stride ",
            g.stride, " pad ", g.pad);
  MLS_CHECK(2 * g.pad <= g.kh && 2 * g.pad <= g.kw, op, ": padding ", g.pad,
            " must be at most half the kernel ", g.kh, "x", g.kw);
  MLS_CHECK((g.h < 0 || g.h + 2 * g.pad >= g.kh) && (g.w < 0 || g.w + 2 * g.pad >= g.kw), op,
            ": the window ", g.kh, "x", g.kw, " is larger than the padded input ", shape_str(x),
            " (padding ", g.pad, ")");
  g.oh = conv_out(g.h, g.kh, g.stride, g.pad);
  g.ow = conv_out(g.w, g.kw, g.stride, g.pad);
  return g;
}
Attrs pool_attrs(std::int64_t kh, std::int64_t kw, std::int64_t stride, std::int64_t pad) {
  return Attrs()
      .set("kh", kh)
      .set("kw", kw)
      .set("stride", stride == 0 ? kh : stride)
      .set("pad", pad);
}
/// Checks that input `i` (g of the adjoints) is the pooled shape of x.
void check_pooled(const Shape& g, const PoolGeom& p, const char* op) {
  const Shape want{p.n, p.c, p.oh, p.ow};
  MLS_CHECK(shape_matches(want, g) || (g.size() == 4 && shape_matches(g, want)), op, ": g must be ",
            shape_str(want), " (the pooled shape), got ", shape_str(g));
}
/// Runs `f(plane, oy, ox, y0, y1, x0, x1)` for every output position, [y0, y1) x [x0, x1) the
/// window clipped to the input; planes (n, c) in parallel.
template <class F>
void for_windows(const PoolGeom& g, F&& f) {
  const std::int64_t per = std::max<std::int64_t>(1, g.oh * g.ow * g.kh * g.kw);
  parallel_for(0, g.n * g.c, std::max<std::int64_t>(1, (1 << 15) / per),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t pl = b; pl < e; ++pl)
                   for (std::int64_t oy = 0; oy < g.oh; ++oy)
                     for (std::int64_t ox = 0; ox < g.ow; ++ox) {
                       const std::int64_t ys = oy * g.stride - g.pad, xs = ox * g.stride - g.pad;
                       f(pl, oy, ox, std::max<std::int64_t>(ys, 0), std::min(ys + g.kh, g.h),
                         std::max<std::int64_t>(xs, 0), std::min(xs + g.kw, g.w));
                     }
               });
}
/// Each window's argmax as a flat index into its plane: the first maximum in row-major window
/// order, a NaN winning (PyTorch's CPU kernel).
template <class T>
std::vector<std::int64_t> argmax_windows(const PoolGeom& g, const T* x) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(g.n * g.c * g.oh * g.ow));
  for_windows(g, [&](std::int64_t pl, std::int64_t oy, std::int64_t ox, std::int64_t y0,
                     std::int64_t y1, std::int64_t x0, std::int64_t x1) {
    const T* p = x + pl * g.h * g.w;
    std::int64_t best = -1;
    T bv = T(0);
    for (std::int64_t y = y0; y < y1; ++y)
      for (std::int64_t xx = x0; xx < x1; ++xx) {
        const T v = p[y * g.w + xx];
        if (best < 0 || v > bv || std::isnan(v)) {
          best = y * g.w + xx;
          bv = v;
        }
      }
    idx[static_cast<std::size_t>((pl * g.oh + oy) * g.ow + ox)] = best;
  });
  return idx;
}
/// `body(T tag)` for a floating dtype; an mls::Error naming `op` otherwise.
template <class F>
void floating(DType d, const char* op, F&& body) {
  MLS_CHECK(is_floating(d), op, ": x must be floating, got ", d);
  dispatch(d, [&](auto tag) {
    if constexpr (std::is_floating_point_v<decltype(tag)>) body(tag);
  });
}

// ---- max pooling: max_pool2d(x), its adjoint max_pool2d_backward(g, x), and the gather
// max_pool2d_select(t, x); the last two are each other's adjoints, linear in their first input.
Tensor max_select_fwd(const Tensor& t_in, const Tensor& x_in, const Attrs& a, const char* op) {
  const PoolGeom g = pool_geom(x_in.shape(), a, op);
  MLS_CHECK(t_in.shape() == x_in.shape(), op, ": t must have x's shape ", shape_str(x_in.shape()),
            ", got ", shape_str(t_in.shape()));
  const Tensor x = x_in.compact();
  const DType d = promote(t_in.dtype(), x.dtype());
  const Tensor t = t_in.to(d).compact();
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow}, d);
  floating(x.dtype(), op, [&](auto xtag) {
    const auto idx = argmax_windows(g, x.data<decltype(xtag)>());
    floating(d, op, [&](auto tag) {
      using T = decltype(tag);
      const T* tp = t.data<T>();
      T* yp = y.data<T>();
      const std::int64_t l = g.oh * g.ow, hw = g.h * g.w;
      for (std::int64_t o = 0; o < static_cast<std::int64_t>(idx.size()); ++o)
        yp[o] = tp[(o / l) * hw + idx[static_cast<std::size_t>(o)]];
    });
  });
  return y;
}
Tensor max_pool_fwd(Ins in, const Attrs& a) {
  return max_select_fwd(in[0], in[0], a, "max_pool2d");
}
Tensor max_select_op_fwd(Ins in, const Attrs& a) {
  return max_select_fwd(in[0], in[1], a, "max_pool2d_select");
}
/// [lab 2 task] max_pool2d's adjoint: dx = zeros of x's shape [N, C, H, W], then each g [N, C,
/// OH, OW] added at its window's argmax (the first maximum in row-major window order, a NaN
/// winning: `argmax_windows`), so overlapping windows that pick the same element add up. The
/// inputs are g and x (in that order); the result's dtype is promote(g, x). Hint: argmax_windows
/// gives each window's argmax as a flat index into its (n, c) plane.
Tensor max_backward_fwd(Ins in, const Attrs& a) {
  const PoolGeom g = pool_geom(in[1].shape(), a, "max_pool2d_backward");
  check_pooled(in[0].shape(), g, "max_pool2d_backward");
  // BEGIN SOLUTION
  const Tensor x = in[1].compact();
  const DType d = promote(in[0].dtype(), x.dtype());
  const Tensor gr = in[0].to(d).compact();
  Tensor dx = Tensor::zeros(x.shape(), d);
  floating(x.dtype(), "max_pool2d_backward", [&](auto xtag) {
    const auto idx = argmax_windows(g, x.data<decltype(xtag)>());
    floating(d, "max_pool2d_backward", [&](auto tag) {
      using T = decltype(tag);
      const T* gp = gr.data<T>();
      T* dp = dx.data<T>();
      const std::int64_t l = g.oh * g.ow, hw = g.h * g.w;
      for (std::int64_t o = 0; o < static_cast<std::int64_t>(idx.size()); ++o)
        dp[(o / l) * hw + idx[static_cast<std::size_t>(o)]] += gp[o];
    });
  });
  return dx;
  // END SOLUTION
}
void max_pool_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const PoolGeom g = pool_geom(in[0]->shape, a, "max_pool2d");
  s = {g.n, g.c, g.oh, g.ow};
  d = float_of(in[0]->dtype);
}
void max_select_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const PoolGeom g = pool_geom(in[1]->shape, a, "max_pool2d_select");
  MLS_CHECK(shape_matches(in[1]->shape, in[0]->shape) || shape_matches(in[0]->shape, in[1]->shape),
            "max_pool2d_select: t must have x's shape ", shape_str(in[1]->shape), ", got ",
            shape_str(in[0]->shape));
  s = {g.n, g.c, g.oh, g.ow};
  d = promote(in[0]->dtype, in[1]->dtype);
}
void max_backward_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const PoolGeom g = pool_geom(in[1]->shape, a, "max_pool2d_backward");
  check_pooled(in[0]->shape, g, "max_pool2d_backward");
  s = in[1]->shape;
  d = promote(in[0]->dtype, in[1]->dtype);
}
Var pool_op(Op op, const Var& a, const Var& b, const Attrs& attrs) {
  return apply(op, {a, b}, attrs);
}
Grads max_pool_bwd(const Var& out, const Var& g, const Needs&) {
  return {pool_op(Op::MaxPool2dBackward, g, in(out, 0), out.node()->attrs)};
}
Grads max_backward_bwd(const Var& out, const Var& g, const Needs& needs) {
  return {needs[0] ? pool_op(Op::MaxPool2dSelect, g, in(out, 1), out.node()->attrs) : Var(), Var()};
}
Grads max_select_bwd(const Var& out, const Var& g, const Needs& needs) {
  return {needs[0] ? pool_op(Op::MaxPool2dBackward, g, in(out, 1), out.node()->attrs) : Var(),
          Var()};
}
/// Tangents: max_pool2d's is t at the argmax (select); the other two are linear in input 0.
Tensor max_pool_jvp(const Node& n, const std::vector<Tensor>& x, const std::vector<Tensor>& t,
                    const Tensor&) {
  return t[0].defined() ? max_select_fwd(t[0], x[0], n.attrs, "max_pool2d") : Tensor();
}
Tensor linear0_jvp(const Node& n, const std::vector<Tensor>& x, const std::vector<Tensor>& t,
                   const Tensor&) {
  if (!t[0].defined()) return {};
  std::vector<Tensor> v = x;
  v[0] = t[0];
  return op_def(n.op).forward(v, n.attrs);
}

// ---- average pooling: avg_pool2d(x) and its adjoint avg_pool2d_backward(g, like) ----------------
/// Runs `f(in_offset, out_index, divisor)` for every (input element, window) pair.
template <class F>
[[maybe_unused]] void avg_windows(const PoolGeom& g, bool include_pad, F&& f) {
  for_windows(g, [&](std::int64_t pl, std::int64_t oy, std::int64_t ox, std::int64_t y0,
                     std::int64_t y1, std::int64_t x0, std::int64_t x1) {
    const double div =
        include_pad ? static_cast<double>(g.kh * g.kw) : static_cast<double>((y1 - y0) * (x1 - x0));
    const std::int64_t o = (pl * g.oh + oy) * g.ow + ox;
    for (std::int64_t y = y0; y < y1; ++y)
      for (std::int64_t xx = x0; xx < x1; ++xx) f(pl * g.h * g.w + y * g.w + xx, o, div);
  });
}
Tensor avg_pool_fwd(Ins in, const Attrs& a) {
  const PoolGeom g = pool_geom(in[0].shape(), a, "avg_pool2d");
  const Tensor x = in[0].compact();
  Tensor y = Tensor::zeros({g.n, g.c, g.oh, g.ow}, x.dtype());
  floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const bool include = a.i("count_include_pad") != 0;
    // The window's sum, then one division (as PyTorch).
    for_windows(g, [&](std::int64_t pl, std::int64_t oy, std::int64_t ox, std::int64_t y0,
                       std::int64_t y1, std::int64_t x0, std::int64_t x1) {
      const T* p = xp + pl * g.h * g.w;
      T acc = T(0);
      for (std::int64_t y = y0; y < y1; ++y)
        for (std::int64_t xx = x0; xx < x1; ++xx) acc += p[y * g.w + xx];
      const std::int64_t div = include ? g.kh * g.kw : (y1 - y0) * (x1 - x0);
      yp[(pl * g.oh + oy) * g.ow + ox] = acc / static_cast<T>(div);
    });
  });
  return y;
}
/// [lab 2 task] avg_pool2d's adjoint: dx = zeros of like's shape [N, C, H, W], then each g [N, C,
/// OH, OW] divided by its window's divisor (kh kw with count_include_pad, else the number of
/// input elements the window covers, as the forward) and added to every input element of its
/// window. The inputs are g and like; the result has g's dtype. Hint: avg_windows calls f(input
/// offset, output index, divisor) for every (element, window) pair.
Tensor avg_backward_fwd(Ins in, const Attrs& a) {
  const PoolGeom g = pool_geom(in[1].shape(), a, "avg_pool2d_backward");
  check_pooled(in[0].shape(), g, "avg_pool2d_backward");
  // BEGIN SOLUTION
  const Tensor gr = in[0].compact();
  Tensor dx = Tensor::zeros(in[1].shape(), gr.dtype());
  floating(gr.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = gr.data<T>();
    T* dp = dx.data<T>();
    avg_windows(g, a.i("count_include_pad") != 0, [&](std::int64_t i, std::int64_t o, double div) {
      dp[i] += gp[o] / static_cast<T>(div);
    });
  });
  return dx;
  // END SOLUTION
}
void avg_pool_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const PoolGeom g = pool_geom(in[0]->shape, a, "avg_pool2d");
  s = {g.n, g.c, g.oh, g.ow};
  d = float_of(in[0]->dtype);
}
void avg_backward_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const PoolGeom g = pool_geom(in[1]->shape, a, "avg_pool2d_backward");
  check_pooled(in[0]->shape, g, "avg_pool2d_backward");
  s = in[1]->shape;
  d = in[0]->dtype;
}
Grads avg_pool_bwd(const Var& out, const Var& g, const Needs&) {
  return {apply(Op::AvgPool2dBackward, {g, in(out, 0)}, out.node()->attrs)};
}
Grads avg_backward_bwd(const Var& out, const Var& g, const Needs& needs) {
  return {needs[0] ? apply(Op::AvgPool2d, {g}, out.node()->attrs) : Var(), Var()};
}

// ---- conv_transpose2d(x, w): columns W^T x, then col2im (conv2d's machinery) --------------------
struct UpGeom {
  std::int64_t n, cin, h, w, cout, kh, kw, stride, pad, opad, oh, ow;
};
UpGeom up_geom(const Shape& x, const Shape& w, const Attrs& a) {
  MLS_CHECK(x.size() == 4 && w.size() == 4,
            "conv_transpose2d: x must be [N, Cin, H, W] and w [Cin, Cout, kh, kw], got ",
            shape_str(x), " and ", shape_str(w));
  MLS_CHECK(known(w), "conv_transpose2d: the weight's shape must be known, got ", shape_str(w));
  MLS_CHECK(x[1] == w[0] || x[1] < 0, "conv_transpose2d: x has ", x[1], " channels, w expects ",
            w[0], " (w is ", shape_str(w), ", [Cin, Cout, kh, kw])");
  UpGeom g{x[0], w[0], x[2],          x[3],       w[1],
           w[2], w[3], a.i("stride"), a.i("pad"), a.i("output_padding"),
           -1,   -1};
  MLS_CHECK(g.kh >= 1 && g.kw >= 1 && g.stride >= 1 && g.pad >= 0 && g.opad >= 0,
            "conv_transpose2d: need kernel >= 1, ",
            "stride >= 1, pad >= 0, output_padding >= 0, got kernel ", g.kh, "x", g.kw, " stride ",
            g.stride, " pad ", g.pad, " output_padding ", g.opad);
  MLS_CHECK(g.opad < g.stride, "conv_transpose2d: output_padding ", g.opad,
            " must be smaller than the stride ", g.stride);
  auto out = [&](std::int64_t in, std::int64_t k) {
    return in < 0 ? -1 : (in - 1) * g.stride - 2 * g.pad + k + g.opad;
  };
  g.oh = out(g.h, g.kh);
  g.ow = out(g.w, g.kw);
  MLS_CHECK((g.h < 0 || g.oh >= 1) && (g.w < 0 || g.ow >= 1), "conv_transpose2d: padding ", g.pad,
            " leaves no output for input ", shape_str(x), " and kernel ", g.kh, "x", g.kw);
  return g;
}
Attrs col_attrs(const UpGeom& g) {
  return Attrs().set("kh", g.kh).set("kw", g.kw).set("stride", g.stride).set("pad", g.pad);
}
Tensor conv_t_fwd(Ins in, const Attrs& a) {
  const UpGeom g = up_geom(in[0].shape(), in[1].shape(), a);
  const std::int64_t ckk = g.cout * g.kh * g.kw;
  const Tensor w2t = in[1].reshape({g.cin, ckk}).transpose();  // [Cout*kk, Cin]
  const Tensor cols =
      mls::matmul(w2t, in[0].reshape({g.n, g.cin, g.h * g.w}));  // [N, Cout*kk, H*W]
  const Tensor like = Tensor::empty({g.n, g.cout, g.oh, g.ow}, cols.dtype());
  const Tensor args[2] = {cols, like};
  return op_def(Op::Col2Im)
      .forward(std::span<const Tensor>(args), col_attrs(g));  // [N, Cout, OH, OW]
}
void conv_t_infer(InNodes in, const Attrs& a, Shape& s, DType& d) {
  const UpGeom g = up_geom(in[0]->shape, in[1]->shape, a);
  s = {g.n, g.cout, g.oh, g.ow};
  d = promote(in[0]->dtype, in[1]->dtype);
}
/// out[n] = col2im(W2^T x[n]): dx = W2 im2col(g) = conv2d(g, w) (w read as [O = Cin, C = Cout,
/// kh, kw]); dW2 = sum_n x[n] im2col(g)[n]^T.
Grads conv_t_bwd(const Var& out, const Var& g, const Needs& needs) {
  const Attrs& a = out.node()->attrs;
  const Var x = in(out, 0), w = in(out, 1);
  const Shape& ws = w.shape();
  const Shape& xs = x.shape();
  MLS_CHECK(xs[2] >= 0 && xs[3] >= 0,
            "conv_transpose2d: the gradient needs a known input size, got ", shape_str(xs));
  Var dx, dw;
  if (needs[0]) dx = conv2d(g, w, a.i("stride"), a.i("pad"));
  if (needs[1]) {
    const Var cols = im2col(g, ws[2], ws[3], a.i("stride"), a.i("pad"));  // [N, Cout*kk, H*W]
    const Var x3 = reshape(x, {-1, ws[0], xs[2] * xs[3]});                // [N, Cin, H*W]
    dw = reshape(sum(matmul(x3, transpose(cols)), {0}), ws);
  }
  return {dx, dw};
}
double conv_t_flops(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  return 2 * shape_numel(n.inputs[0]->shape) * static_cast<double>(w[1] * w[2] * w[3]);
}

}  // namespace

void register_pool_ops(OpTable& t) {
  t.add(Op::MaxPool2d,
        {.name = "max_pool2d",
         .arity = 1,
         .forward = max_pool_fwd,
         .infer = max_pool_infer,
         .backward = max_pool_bwd,
         .jvp = max_pool_jvp,
         .doc = "max over kh x kw windows of [N, C, H, W] (gradient to the first argmax)"});
  t.add(Op::MaxPool2dBackward,
        {.name = "max_pool2d_backward",
         .arity = 2,
         .forward = max_backward_fwd,
         .infer = max_backward_infer,
         .backward = max_backward_bwd,
         .jvp = linear0_jvp,
         .doc = "g added at each window's argmax of input 1, into zeros of its shape"});
  t.add(Op::MaxPool2dSelect, {.name = "max_pool2d_select",
                              .arity = 2,
                              .forward = max_select_op_fwd,
                              .infer = max_select_infer,
                              .backward = max_select_bwd,
                              .jvp = linear0_jvp,
                              .doc = "input 0 at each window's argmax of input 1"});
  t.add(Op::AvgPool2d,
        {.name = "avg_pool2d",
         .arity = 1,
         .forward = avg_pool_fwd,
         .infer = avg_pool_infer,
         .backward = avg_pool_bwd,
         .jvp = linear0_jvp,
         .doc = "mean over kh x kw windows of [N, C, H, W] (count_include_pad attribute)"});
  t.add(Op::AvgPool2dBackward, {.name = "avg_pool2d_backward",
                                .arity = 2,
                                .forward = avg_backward_fwd,
                                .infer = avg_backward_infer,
                                .backward = avg_backward_bwd,
                                .jvp = linear0_jvp,
                                .doc = "g spread over its windows into zeros of input 1's shape"});
  t.add(Op::ConvTranspose2d, {.name = "conv_transpose2d",
                              .arity = 2,
                              .forward = conv_t_fwd,
                              .infer = conv_t_infer,
                              .backward = conv_t_bwd,
                              .jvp = bilinear_jvp,
                              .doc = "transposed convolution (up-conv): col2im of W^T x",
                              .flops = conv_t_flops});
}

}  // namespace ops

Var max_pool2d(const Var& x, std::int64_t kh, std::int64_t kw, std::int64_t stride,
               std::int64_t pad) {
  return apply(Op::MaxPool2d, {x}, ops::pool_attrs(kh, kw, stride, pad));
}
Var max_pool2d_backward(const Var& g, const Var& x, std::int64_t kh, std::int64_t kw,
                        std::int64_t stride, std::int64_t pad) {
  return apply(Op::MaxPool2dBackward, {g, x}, ops::pool_attrs(kh, kw, stride, pad));
}
Var max_pool2d_select(const Var& t, const Var& x, std::int64_t kh, std::int64_t kw,
                      std::int64_t stride, std::int64_t pad) {
  return apply(Op::MaxPool2dSelect, {t, x}, ops::pool_attrs(kh, kw, stride, pad));
}
Var avg_pool2d(const Var& x, std::int64_t kh, std::int64_t kw, std::int64_t stride,
               std::int64_t pad, bool count_include_pad) {
  return apply(Op::AvgPool2d, {x},
               ops::pool_attrs(kh, kw, stride, pad)
                   .set("count_include_pad", std::int64_t{count_include_pad}));
}
Var avg_pool2d_backward(const Var& g, const Var& like, std::int64_t kh, std::int64_t kw,
                        std::int64_t stride, std::int64_t pad, bool count_include_pad) {
  return apply(Op::AvgPool2dBackward, {g, like},
               ops::pool_attrs(kh, kw, stride, pad)
                   .set("count_include_pad", std::int64_t{count_include_pad}));
}
Var conv_transpose2d(const Var& x, const Var& w, std::int64_t stride, std::int64_t pad,
                     std::int64_t output_padding) {
  return apply(Op::ConvTranspose2d, {x, w},
               Attrs().set("stride", stride).set("pad", pad).set("output_padding", output_padding));
}

}  // namespace mls::autodiff
