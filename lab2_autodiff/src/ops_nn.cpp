// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Neural-network ops (matmul, layer norm, batch norm, embedding, im2col/col2im, conv2d): forward,
// shape inference and gradient rules (student functions: the `*_bwd` bodies).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "ops_internal.hpp"

namespace mls::autodiff::ops {

namespace {
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
/// C = A B: dA = g B^T, dB = A^T g, each summed over broadcast batch dims (sum_like).
Grads matmul_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  // C = A B: dA = dC B^T, dB = A^T dC, each summed over broadcast batch dims.
  const Var a = in(out, 0), b = in(out, 1);
  return {needs[0] ? sum_like(matmul(g, transpose(b)), a) : Var(),
          needs[1] ? sum_like(matmul(transpose(a), g), b) : Var()};
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
/// layer_norm: dx from the normalisation over the last dim (norm_dx), dgamma = sum(g xhat), dbeta = sum(g).
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
/// batch_norm: training uses batch statistics (norm_dx), inference the running ones (dx = g gamma rstd).
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
  Shape s = idx.shape();
  s.push_back(w.shape()[1]);
  Tensor out = Tensor::empty(s, w.dtype());
  embedding_into(w, idx, out);
  return out;
}
void embedding_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  MLS_CHECK(in[0]->shape.size() == 2, "embedding: weight must be [V, D], got ", shape_str(in[0]->shape));
  MLS_CHECK(is_integral(in[1]->dtype), "embedding: indices must be int32/int64, got ", in[1]->dtype);
  s = in[1]->shape;
  s.push_back(in[0]->shape[1]);
  d = in[0]->dtype;
}
/// embedding: the weight gets g's rows added at the indices (embedding_backward); none for indices.
Grads embedding_bwd(const Var& out, const Var& g, const Needs& needs) {
  // BEGIN SOLUTION
  return {embedding_backward(g, in(out, 1), in(out, 0)), Var()};
  // END SOLUTION
}
Tensor embedding_backward_fwd(Ins in, const Attrs&) {
  Tensor out = Tensor::empty(in[2].shape(), in[0].dtype());
  embedding_backward_into(in[0], in[1], out);
  return out;
}
void embedding_backward_infer(InNodes in, const Attrs&, Shape& s, DType& d) {
  s = in[2]->shape;
  d = in[0]->dtype;
}
/// embedding_backward's adjoint is embedding: the rows of g picked by the indices.
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
/// Each output row segment is split into its padding (zeros / skipped) and its inside part,
/// which for stride 1 is one contiguous copy; planes run in parallel over (n, c).
template <class T>
void im2col_loop(const ConvGeom& g, T* img, T* cols, bool add_back) {
  const std::int64_t ckk = g.c * g.kh * g.kw, l = g.oh * g.ow;
  auto plane_rows = [&](std::int64_t n, std::int64_t c) {
    for (std::int64_t i = 0; i < g.kh; ++i)
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + (n * ckk + (c * g.kh + i) * g.kw + j) * l;
        T* plane = img + (n * g.c + c) * g.h * g.w;
        // ox with 0 <= ox*s - p + j < w: [lo, hi).
        const std::int64_t lo = std::min(g.ow, std::max<std::int64_t>(0, (g.pad - j + g.stride - 1) / g.stride));
        const std::int64_t hi =
            std::max(lo, std::min(g.ow, g.w + g.pad - j <= 0 ? 0 : (g.w + g.pad - j - 1) / g.stride + 1));
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t y = oy * g.stride - g.pad + i;
          T* r = row + oy * g.ow;
          if (y < 0 || y >= g.h) {
            if (!add_back) std::fill(r, r + g.ow, T(0));
            continue;
          }
          T* src = plane + y * g.w + (lo * g.stride - g.pad + j);
          if (add_back) {
            for (std::int64_t ox = lo; ox < hi; ++ox) src[(ox - lo) * g.stride] += r[ox];
            continue;
          }
          std::fill(r, r + lo, T(0));
          if (g.stride == 1) {
            std::copy(src, src + (hi - lo), r + lo);
          } else {
            for (std::int64_t ox = lo; ox < hi; ++ox) r[ox] = src[(ox - lo) * g.stride];
          }
          std::fill(r + hi, r + g.ow, T(0));
        }
      }
  };
  // One (n, c) plane per task: the kernel offsets of a channel (which add into the same pixels
  // in col2im) stay on one thread.
  const std::int64_t per = g.kh * g.kw * l;
  parallel_for(0, g.n * g.c, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(1, per)),
               [&](std::int64_t b, std::int64_t e) {
                 for (std::int64_t k = b; k < e; ++k) plane_rows(k / g.c, k % g.c);
               });
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
/// im2col's adjoint is col2im: add the columns of g back into an image of x's shape.
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
/// col2im's adjoint is im2col of g with the same geometry.
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
/// A float32 conv2d on the kernel registered in common's conv2d registry (mls/common/kernels.hpp:
/// lab 3's, in programs linked with it), or an undefined tensor when there is none, it is forced
/// off (MLS_CONV2D=im2col), the inputs are not both float32 or the problem is empty.
Tensor conv2d_registered(const Tensor& x, const Tensor& w, const ConvGeom& g) {
  if (x.dtype() != DType::Float32 || w.dtype() != DType::Float32) return Tensor();
  const std::int64_t o = w.shape()[0];
  if (g.n <= 0 || o <= 0 || g.c <= 0 || g.oh <= 0 || g.ow <= 0) return Tensor();
  const Conv2dKernel k = conv2d_kernel();
  if (!k.fn) return Tensor();
  const Tensor xc = x.compact(), wc = w.compact();
  Tensor y = Tensor::empty({g.n, o, g.oh, g.ow}, DType::Float32);
  k.fn({g.n, g.c, g.h, g.w, o, g.kh, g.kw, g.stride, g.pad, g.oh, g.ow}, xc.data<float>(), wc.data<float>(), nullptr,
       y.data<float>());
  return y;
}
Tensor conv2d_fwd(Ins in, const Attrs& a) {
  conv_check(in[0].shape(), in[1].shape());
  const Shape& ws = in[1].shape();
  const ConvGeom g = geom(in[0].shape(), conv_geom_attrs(ws, a));
  if (Tensor y = conv2d_registered(in[0], in[1], g); y.defined()) return y;
  // Lab 2's own path: im2col columns times the weights as a matrix.
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
/// conv2d as W2 [O, CKK] times im2col columns: dW = sum_n g cols^T, dx = col2im(W2^T g).
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

double matmul_flops(const Node& n) {
  const Shape& a = n.inputs[0]->shape;
  return 2 * shape_numel(n.shape) * static_cast<double>(std::max<std::int64_t>(1, a.back()));
}
double conv2d_flops(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  return 2 * shape_numel(n.shape) * static_cast<double>(w[1] * w[2] * w[3]);
}

}  // namespace

void register_nn_ops(OpTable& t) {
  t.add(Op::Matmul, {.name = "matmul", .arity = 2, .forward = matmul_fwd, .infer = matmul_infer,
                     .backward = matmul_bwd, .doc = "[..., M, K] x [..., K, N], broadcast batch dims",
                     .flops = matmul_flops});
  t.add(Op::LayerNorm, {.name = "layer_norm", .arity = 3, .forward = layer_norm_fwd, .infer = layer_norm_infer,
                        .backward = layer_norm_bwd, .doc = "normalise the last dim, then * gamma + beta"});
  t.add(Op::BatchNorm, {.name = "batch_norm", .arity = 5, .forward = batch_norm_fwd, .infer = batch_norm_infer,
                        .backward = batch_norm_bwd, .doc = "per-channel normalisation (batch or running statistics)"});
  t.add(Op::Embedding, {.name = "embedding", .arity = 2, .forward = embedding_fwd, .infer = embedding_infer,
                        .backward = embedding_bwd, .doc = "rows of weight [V, D] picked by integer indices"});
  t.add(Op::EmbeddingBackward, {.name = "embedding_backward", .arity = 3, .forward = embedding_backward_fwd,
                                .infer = embedding_backward_infer, .backward = embedding_backward_bwd,
                                .doc = "rows of g added at indices into zeros of input 2's shape"});
  t.add(Op::Im2Col, {.name = "im2col", .forward = im2col_fwd, .infer = im2col_infer, .backward = im2col_bwd,
                     .doc = "unfolds [N, C, H, W] into columns [N, C*kh*kw, OH*OW]"});
  t.add(Op::Col2Im, {.name = "col2im", .arity = 2, .forward = col2im_fwd, .infer = like_infer, .backward = col2im_bwd,
                     .doc = "adds columns back into an image of input 1's shape"});
  t.add(Op::Conv2d, {.name = "conv2d", .arity = 2, .forward = conv2d_fwd, .infer = conv2d_infer,
                     .backward = conv2d_bwd,
                     .doc = "2-D cross-correlation via im2col and matmul (float32: a registered conv kernel if any)",
                     .flops = conv2d_flops});
}

}  // namespace mls::autodiff::ops

namespace mls::autodiff {

namespace {
/// The indices as int64, each checked against [0, rows) in order (the first bad one named).
std::vector<std::int64_t> checked_indices(const Tensor& idx, std::int64_t rows, const char* op) {
  MLS_CHECK(is_integral(idx.dtype()), op, ": indices must be int32/int64, got ", idx.dtype());
  auto ids = idx.to_vector<std::int64_t>();
  for (std::int64_t i : ids) MLS_CHECK(i >= 0 && i < rows, op, ": index ", i, " is out of range for ", rows, " rows");
  return ids;
}
template <class T>
void add_rows(const T* g, const std::vector<std::int64_t>& ids, std::int64_t dim, T* out) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    T* __restrict o = out + ids[i] * dim;
    const T* __restrict r = g + static_cast<std::int64_t>(i) * dim;
    for (std::int64_t j = 0; j < dim; ++j) o[j] += r[j];
  }
}
}  // namespace

void embedding_into(const Tensor& w, const Tensor& idx, Tensor& out) {
  MLS_CHECK(w.ndim() == 2, "embedding: weight must be [V, D], got ", shape_str(w.shape()));
  const std::int64_t dim = w.shape()[1];
  const auto ids = checked_indices(idx, w.shape()[0], "embedding");
  MLS_CHECK(out.is_contiguous() && out.dtype() == w.dtype() && out.numel() == static_cast<std::int64_t>(ids.size()) * dim,
            "embedding: the output must be a contiguous ", w.dtype(), " tensor of ", ids.size(), " x ", dim,
            " elements, got ", shape_str(out.shape()), " ", out.dtype());
  const Tensor wc = w.compact();
  const std::size_t row = w.itemsize() * static_cast<std::size_t>(dim);
  const auto* src = static_cast<const std::byte*>(wc.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (row) std::memcpy(dst + i * row, src + static_cast<std::size_t>(ids[i]) * row, row);
}

void embedding_backward_into(const Tensor& g, const Tensor& idx, Tensor& out) {
  MLS_CHECK(out.ndim() == 2, "embedding_backward: the weight's shape must be [V, D], got ", shape_str(out.shape()));
  const std::int64_t dim = out.shape()[1];
  const auto ids = checked_indices(idx, out.shape()[0], "embedding_backward");
  MLS_CHECK(out.is_contiguous() && out.dtype() == g.dtype() && g.numel() == static_cast<std::int64_t>(ids.size()) * dim,
            "embedding_backward: g ", shape_str(g.shape()), " ", g.dtype(), " must hold ", ids.size(), " rows of ", dim,
            " and the output a contiguous ", g.dtype(), " tensor, got ", shape_str(out.shape()), " ", out.dtype());
  const Tensor gc = g.compact();
  MLS_CHECK(gc.storage() != out.storage(), "embedding_backward: the output must not share g's storage");
  out.fill_(0.0);
  // g's rows added in index order (the same additions in the same order for every dtype).
  if (out.dtype() == DType::Float32) return add_rows(gc.data<float>(), ids, dim, out.data<float>());
  if (out.dtype() == DType::Float64) return add_rows(gc.data<double>(), ids, dim, out.data<double>());
  const Tensor flat = gc.reshape({static_cast<std::int64_t>(ids.size()), dim});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Tensor r = out.select(0, ids[i]);
    r += flat.select(0, static_cast<std::int64_t>(i));
  }
}

}  // namespace mls::autodiff
