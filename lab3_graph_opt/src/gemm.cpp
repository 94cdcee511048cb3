// Lab 3's gemm op, registered with lab 2's op registry like any other op: matmul with transpose
// flags, an optional bias and an activation epilogue in one pass over the product.
#include <algorithm>
#include <cmath>

#include "mls/common/parallel.hpp"
#include "mls/graph_opt/ir.hpp"
#include "mls/tensor/scalar.hpp"

namespace mls::graph_opt {

namespace {

using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;

Shape broadcast(const Shape& a, const Shape& b) { return autodiff::broadcast_inferred(a, b, "gemm"); }

Shape gemm_shape(const Shape& a0, const Shape& b0, bool ta, bool tb) {
  MLS_CHECK(a0.size() >= 2 && b0.size() >= 2, "gemm: operands must be >= 2-D, got ", shape_str(a0), " and ",
            shape_str(b0));
  Shape a = a0, b = b0;
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const std::int64_t ka = a[a.size() - 1], kb = b[b.size() - 2];
  MLS_CHECK(ka == kb || ka < 0 || kb < 0, "gemm: inner dimensions differ: ", shape_str(a), " x ", shape_str(b));
  Shape s = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  s.push_back(a[a.size() - 2]);
  s.push_back(b[b.size() - 1]);
  return s;
}

void gemm_infer(InNodes in, const autodiff::Attrs& attrs, Shape& shape, DType& dtype) {
  MLS_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  shape = gemm_shape(in[0]->shape, in[1]->shape, attrs.i("trans_a") != 0, attrs.i("trans_b") != 0);
  dtype = promote(in[0]->dtype, in[1]->dtype);
  const std::int64_t act = attrs.i("act");
  MLS_CHECK(act >= 0 && act <= 2, "gemm: act must be 0 (none), 1 (relu) or 2 (gelu), got ", act);
  if (in.size() == 3) {
    const Shape& bs = in[2]->shape;
    std::int64_t numel = 1;
    for (std::int64_t d : bs) numel *= d;
    MLS_CHECK(numel == shape.back() && (bs.empty() || bs.back() == shape.back()), "gemm: bias ", shape_str(bs),
              " must broadcast along the last dim of ", shape_str(shape));
    MLS_CHECK(bs.size() <= shape.size(), "gemm: bias ", shape_str(bs), " has more dims than the output ", shape_str(shape));
  }
}

template <class T>
void epilogue(T* c, const T* bias, std::int64_t rows, std::int64_t n, std::int64_t act) {
  parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, n)), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      T* row = c + r * n;
      if (bias)
        for (std::int64_t j = 0; j < n; ++j) row[j] += bias[j];
      if (act == 1)
        for (std::int64_t j = 0; j < n; ++j) row[j] = row[j] > T(0) ? row[j] : T(0);
      else if (act == 2)
        for (std::int64_t j = 0; j < n; ++j) row[j] = scalar::gelu(row[j]);
    }
  });
}

Tensor gemm_forward(Ins in, const autodiff::Attrs& attrs) {
  MLS_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  Tensor a = in[0], b = in[1];
  if (attrs.i("trans_a")) a = a.transpose(-2, -1);
  if (attrs.i("trans_b")) b = b.transpose(-2, -1);
  Tensor c = mls::matmul(a, b);
  if (!c.is_contiguous()) c = c.compact();
  const std::int64_t act = attrs.i("act");
  if (in.size() < 3 && act == 0) return c;
  const std::int64_t cols = c.shape().back(), rows = c.numel() / std::max<std::int64_t>(1, cols);
  Tensor bias;
  if (in.size() == 3) bias = in[2].to(c.dtype()).reshape({cols}).compact();
  dispatch(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      epilogue<T>(c.data<T>(), bias.defined() ? bias.data<T>() : nullptr, rows, cols, act);
    else
      fail("gemm: the epilogue needs a floating dtype, got ", c.dtype());
  });
  return c;
}

double gemm_flops(const Node& n) {
  const Shape& a = n.inputs[0]->shape;
  const double k = static_cast<double>(std::max<std::int64_t>(1, n.attrs.i("trans_a") ? a[a.size() - 2] : a.back()));
  const double out = autodiff::shape_numel(n.shape);
  return 2 * out * k + out * static_cast<double>((n.inputs.size() == 3) + (n.attrs.i("act") != 0));
}

}  // namespace

const Op kGemm = autodiff::register_op(
    {.name = "gemm", .arity = -1, .differentiable = false, .forward = gemm_forward, .infer = gemm_infer,
     .doc = "matmul(op_a(A), op_b(B)) [+ bias] [then relu/gelu] in one pass", .flops = gemm_flops});

}  // namespace mls::graph_opt
