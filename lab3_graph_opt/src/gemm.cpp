// Lab 3's gemm op, registered with lab 2's op registry like any other op: matmul with transpose
// flags, an optional bias and an activation epilogue in one pass over the product.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/graph_opt/ir.hpp"
#include "mls/tensor/scalar.hpp"
#include "pass_util.hpp"

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

/// How an SGEMM reads one matrix of `x` (its last two dims): row-major with leading dimension
/// `ld`, or transposed (column-major); ok false when neither of the two strides is 1.
struct Layout {
  bool ok = false, trans = false;
  long ld = 0;
};
Layout layout_of(const Tensor& x) {
  const auto nd = x.shape().size();
  const std::int64_t r = x.shape()[nd - 2], c = x.shape()[nd - 1], sr = x.strides()[nd - 2], sc = x.strides()[nd - 1];
  if ((sc == 1 || c == 1) && sr >= std::max<std::int64_t>(1, c)) return {true, false, static_cast<long>(std::max<std::int64_t>(sr, 1))};
  if ((sr == 1 || r == 1) && sc >= std::max<std::int64_t>(1, r)) return {true, true, static_cast<long>(std::max<std::int64_t>(sc, 1))};
  return {};
}

/// True when `x` shares memory with `out` but not as the very same elements (the same offset,
/// shape and compact strides): writing out would change what x still has to give.
bool overlaps(const Tensor& x, const Tensor& out) {
  if (x.storage() != out.storage()) return false;
  return !(x.offset() == out.offset() && x.shape() == out.shape() && x.is_contiguous());
}

/// gemm (and matmul: no flags, no bias, no epilogue) into `out`, float32: the registry's SGEMM
/// reads A and B where they lie (transposes are layouts, not copies) and writes C straight into
/// out. When B is one matrix shared by every batch (a weight), the batch dims of a row-major A
/// are folded into M: one SGEMM of M = batch x M instead of one per batch.
bool gemm_into_impl(Ins in, bool ta, bool tb, const Tensor* bias_in, std::int64_t act, Tensor& out) {
  if (out.dtype() != DType::Float32 || !out.is_contiguous()) return false;
  for (const Tensor& t : in)
    if (t.dtype() != DType::Float32 || t.ndim() < 2 || overlaps(t, out)) return false;
  Tensor a = in[0], b = in[1];
  if (ta) a = a.transpose(-2, -1);
  if (tb) b = b.transpose(-2, -1);
  const std::int64_t M = a.shape()[a.ndim() - 2], K = a.shape().back(), N = b.shape().back();
  if (b.shape()[b.ndim() - 2] != K || out.ndim() < 2 || out.shape()[out.ndim() - 2] != M || out.shape().back() != N)
    return false;
  if (!layout_of(a).ok) a = a.compact();
  if (!layout_of(b).ok) b = b.compact();
  float* c = out.data<float>();
  const std::int64_t nbatch = out.numel() / std::max<std::int64_t>(1, M * N);
  register_matmul_kernels();  // as lab 1's matmul: the registry is filled on first use
  const SgemmFn sgemm = sgemm_kernel().fn;
  if (M * N > 0) {
    if (K == 0) {
      std::fill(c, c + out.numel(), 0.0f);
    } else {
      // Batch dims of A that fold into its rows: A row-major and each batch dim's stride the
      // next one's stride times its size (the rows of all batches evenly spaced by lda).
      bool fold = b.ndim() == 2 && a.ndim() == out.ndim() && nbatch > 1;
      const Layout la = layout_of(a), lb = layout_of(b);
      if (fold) {
        fold = !la.trans;
        for (std::size_t d = 0; fold && d + 2 < a.shape().size(); ++d)
          fold = a.shape()[d] == out.shape()[d] &&
                 (a.shape()[d] == 1 || a.strides()[d] == a.strides()[d + 1] * a.shape()[d + 1]);
      }
      if (fold || nbatch == 1) {
        const float* pa = a.data<float>();
        const float* pb = b.data<float>();
        sgemm(la.trans, lb.trans, static_cast<long>(fold ? nbatch * M : M), static_cast<long>(N), static_cast<long>(K), 1.0f,
              pa, la.ld, pb, lb.ld, 0.0f, c, static_cast<long>(N));
      } else {
        Shape batch(out.shape().begin(), out.shape().end() - 2), ea = batch, eb = batch;
        ea.insert(ea.end(), {M, K});
        eb.insert(eb.end(), {K, N});
        Tensor A, B;
        try {
          A = a.expand(ea);
          B = b.expand(eb);
        } catch (const Error&) {
          return false;
        }
        const float* pa0 = A.data<float>();
        const float* pb0 = B.data<float>();
        std::vector<std::int64_t> idx(batch.size(), 0);
        for (std::int64_t bi = 0; bi < nbatch; ++bi) {
          std::int64_t aoff = 0, boff = 0, rem = bi;
          for (std::size_t d = batch.size(); d-- > 0;) {
            const std::int64_t i = rem % batch[d];
            rem /= batch[d];
            aoff += i * A.strides()[d];
            boff += i * B.strides()[d];
          }
          sgemm(la.trans, lb.trans, static_cast<long>(M), static_cast<long>(N), static_cast<long>(K), 1.0f, pa0 + aoff, la.ld,
                pb0 + boff, lb.ld, 0.0f, c + bi * M * N, static_cast<long>(N));
        }
      }
    }
  }
  const Tensor bias = bias_in ? bias_in->reshape({N}).compact() : Tensor();
  if (bias_in || act != 0) epilogue<float>(c, bias.defined() ? bias.data<float>() : nullptr, out.numel() / std::max<std::int64_t>(1, N), N, act);
  return true;
}

bool gemm_into(Ins in, const autodiff::Attrs& attrs, Tensor& out) {
  if (in.size() != 2 && in.size() != 3) return false;
  return gemm_into_impl(in.first(2), attrs.i("trans_a") != 0, attrs.i("trans_b") != 0, in.size() == 3 ? &in[2] : nullptr,
                        attrs.i("act"), out);
}
bool matmul_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  return in.size() == 2 && gemm_into_impl(in, false, false, nullptr, 0, out);
}

Tensor gemm_forward(Ins in, const autodiff::Attrs& attrs) {
  MLS_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  Tensor a = in[0], b = in[1];
  if (attrs.i("trans_a")) a = a.transpose(-2, -1);
  if (attrs.i("trans_b")) b = b.transpose(-2, -1);
  if (promote(a.dtype(), b.dtype()) == DType::Float32 && a.ndim() >= 2 && b.ndim() >= 2) {
    Shape s = gemm_shape(in[0].shape(), in[1].shape(), attrs.i("trans_a") != 0, attrs.i("trans_b") != 0);
    Tensor out = Tensor::empty(s, DType::Float32);
    if (gemm_into(in, attrs, out)) return out;
  }
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

namespace {
std::mutex& into_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<int, ForwardIntoFn>& into_table() {
  static std::unordered_map<int, ForwardIntoFn> t;
  return t;
}
}  // namespace

void register_forward_into(Op op, ForwardIntoFn fn) {
  std::lock_guard lock(into_mutex());
  into_table()[static_cast<int>(op)] = fn;
}
ForwardIntoFn forward_into(Op op) {
  std::lock_guard lock(into_mutex());
  auto it = into_table().find(static_cast<int>(op));
  return it == into_table().end() ? nullptr : it->second;
}

const Op kGemm = [] {
  const Op op = autodiff::register_op(
      {.name = "gemm", .arity = -1, .differentiable = false, .forward = gemm_forward, .infer = gemm_infer,
       .doc = "matmul(op_a(A), op_b(B)) [+ bias] [then relu/gelu] in one pass", .flops = gemm_flops});
  register_forward_into(op, gemm_into);
  register_forward_into(Op::Matmul, matmul_into);
  detail::register_embedding_into();
  return op;
}();

}  // namespace mls::graph_opt
