// Attention as one fused node (issue 29: compile's GPT step). Not a student file.
//   fused_attention(q, k, v, mask; scale): softmax(scale q k^T + mask) v for q, k, v [..., T, D]
//     (one shape) and a constant mask [T, T], one row of scores at a time: the [.., T, T] scores
//     and probabilities are never stored. Its gradient is attention_backward (q, k, v, mask, dy
//     -> dq|dk|dv packed [3, ..., T, D]), which recomputes each row's probabilities.
//   "fuse-attention": matmul(softmax(matmul(q, transpose(k)) * s + mask), v) -> fused_attention,
//     run by compile() on the traced forward graph before it builds the backward.
#include <algorithm>
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

/// A [..., T, D] operand read where it lies (a permuted view of qkv needs no copy): slice b of the
/// leading dims starts at p + off[b], row t at + t * row; the last dim has stride 1.
template <class T>
struct Operand {
  const T* p;
  const std::int64_t* off;
  std::int64_t row;
  const T* at(std::int64_t b, std::int64_t t) const { return p + off[b] + t * row; }
};

/// Row t of the probabilities: p[j] = softmax_j(scale q_t . k_j + m_t[j]), kt = K^T [D, S].
template <class T>
inline void prob_row(const T* __restrict q, const T* __restrict kt, const T* __restrict m, T* __restrict p, std::int64_t S, std::int64_t D, T scale) {
  for (std::int64_t j = 0; j < S; ++j) p[j] = 0;
  for (std::int64_t d = 0; d < D; ++d) {
    const T a = q[d];
    const T* k = kt + d * S;
    for (std::int64_t j = 0; j < S; ++j) p[j] += a * k[j];
  }
  // Separate loops: the scale, the exp and the normalisation vectorize; the max and the sum
  // (reductions in order) are short scalar loops.
  for (std::int64_t j = 0; j < S; ++j) p[j] = p[j] * scale + m[j];
  T mx = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < S; ++j) mx = p[j] > mx ? p[j] : mx;
  for (std::int64_t j = 0; j < S; ++j) p[j] = scalar::exp(p[j] - mx);
  T sum = 0;
  for (std::int64_t j = 0; j < S; ++j) sum += p[j];
  const T inv = T(1) / sum;
  for (std::int64_t j = 0; j < S; ++j) p[j] *= inv;
}
/// y = softmax(scale q k^T + m) v over `batch` slices of [T, D] (y compact).
template <class T, int DC>
inline void attention_fwd(Operand<T> q, Operand<T> k, Operand<T> v, const T* __restrict m, T* __restrict y, std::int64_t batch,
                          std::int64_t Tn, std::int64_t Din, T scale) {
  const std::int64_t D = DC > 0 ? DC : Din;  // a compile-time head size: each row loop one vector op
  std::vector<T> kt(static_cast<std::size_t>(D * Tn)), p(static_cast<std::size_t>(Tn));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t j = 0; j < Tn; ++j)
      for (std::int64_t d = 0; d < D; ++d) kt[static_cast<std::size_t>(d * Tn + j)] = k.at(b, j)[d];
    for (std::int64_t t = 0; t < Tn; ++t) {
      prob_row(q.at(b, t), kt.data(), m + t * Tn, p.data(), Tn, D, scale);
      T* __restrict yt = y + (b * Tn + t) * D;
      for (std::int64_t d = 0; d < D; ++d) yt[d] = 0;
      for (std::int64_t j = 0; j < Tn; ++j) {
        const T pj = p[static_cast<std::size_t>(j)];
        const T* __restrict vj = v.at(b, j);
        for (std::int64_t d = 0; d < D; ++d) yt[d] += pj * vj[d];
      }
    }
  }
}
/// dq, dk, dv (each [batch, T, D], packed one after the other in `out`, compact) from dy.
template <class T, int DC>
inline void attention_bwd(Operand<T> q, Operand<T> k, Operand<T> v, const T* __restrict m, Operand<T> dy, T* __restrict out,
                          std::int64_t batch, std::int64_t Tn, std::int64_t Din, T scale) {
  const std::int64_t D = DC > 0 ? DC : Din;
  const std::int64_t n = batch * Tn * D;
  T* __restrict dq = out;
  T* __restrict dk = out + n;
  T* __restrict dv = out + 2 * n;
  std::fill(out, out + 3 * n, T(0));
  std::vector<T> kt(static_cast<std::size_t>(D * Tn)), vt(kt.size()), p(static_cast<std::size_t>(Tn)), dp(p.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t o = b * Tn * D;
    for (std::int64_t j = 0; j < Tn; ++j)
      for (std::int64_t d = 0; d < D; ++d) {
        kt[static_cast<std::size_t>(d * Tn + j)] = k.at(b, j)[d];
        vt[static_cast<std::size_t>(d * Tn + j)] = v.at(b, j)[d];
      }
    for (std::int64_t t = 0; t < Tn; ++t) {
      const T* __restrict qt = q.at(b, t);
      prob_row(qt, kt.data(), m + t * Tn, p.data(), Tn, D, scale);
      const T* __restrict g = dy.at(b, t);
      // dv_j += p_j g; dp_j = g . v_j
      for (std::int64_t j = 0; j < Tn; ++j) {
        const T pj = p[static_cast<std::size_t>(j)];
        T* __restrict dvj = dv + o + j * D;
        for (std::int64_t d = 0; d < D; ++d) dvj[d] += pj * g[d];
        dp[static_cast<std::size_t>(j)] = 0;
      }
      for (std::int64_t d = 0; d < D; ++d) {
        const T gd = g[d];
        const T* __restrict vd = vt.data() + d * Tn;
        T* __restrict dpp = dp.data();
        for (std::int64_t j = 0; j < Tn; ++j) dpp[j] += gd * vd[j];
      }
      // ds_j = p_j (dp_j - sum_i p_i dp_i), times scale; dq_t += ds_j k_j; dk_j += ds_j q_t
      T dot = 0;
      for (std::int64_t j = 0; j < Tn; ++j) dot += p[static_cast<std::size_t>(j)] * dp[static_cast<std::size_t>(j)];
      T* __restrict dqt = dq + o + t * D;
      for (std::int64_t j = 0; j < Tn; ++j) {
        const T ds = p[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - dot) * scale;
        if (ds == T(0)) continue;  // masked (p = 0) positions add nothing
        const T* __restrict kj = k.at(b, j);
        T* __restrict dkj = dk + o + j * D;
        for (std::int64_t d = 0; d < D; ++d) {
          dqt[d] += ds * kj[d];
          dkj[d] += ds * qt[d];
        }
      }
    }
  }
}

/// The kernels built for AVX-512, AVX2 + FMA and the baseline (simd.hpp's pick_isa).
template <class T>
using FwdFn = void (*)(Operand<T>, Operand<T>, Operand<T>, const T*, T*, std::int64_t, std::int64_t, std::int64_t, T);
template <class T>
using BwdFn = void (*)(Operand<T>, Operand<T>, Operand<T>, const T*, Operand<T>, T*, std::int64_t, std::int64_t, std::int64_t, T);
#ifdef MLS_SIMD_DISPATCH
template <class T, int DC>
__attribute__((target("avx512f"), flatten)) void attention_fwd_avx512(Operand<T> q, Operand<T> k, Operand<T> v, const T* m, T* y,
                                                                      std::int64_t b, std::int64_t t, std::int64_t d, T s) {
  attention_fwd<T, DC>(q, k, v, m, y, b, t, d, s);
}
template <class T, int DC>
__attribute__((target("avx2,fma"), flatten)) void attention_fwd_avx2(Operand<T> q, Operand<T> k, Operand<T> v, const T* m, T* y,
                                                                     std::int64_t b, std::int64_t t, std::int64_t d, T s) {
  attention_fwd<T, DC>(q, k, v, m, y, b, t, d, s);
}
template <class T, int DC>
__attribute__((target("avx512f"), flatten)) void attention_bwd_avx512(Operand<T> q, Operand<T> k, Operand<T> v, const T* m, Operand<T> dy,
                                                                      T* o, std::int64_t b, std::int64_t t, std::int64_t d, T s) {
  attention_bwd<T, DC>(q, k, v, m, dy, o, b, t, d, s);
}
template <class T, int DC>
__attribute__((target("avx2,fma"), flatten)) void attention_bwd_avx2(Operand<T> q, Operand<T> k, Operand<T> v, const T* m, Operand<T> dy,
                                                                     T* o, std::int64_t b, std::int64_t t, std::int64_t d, T s) {
  attention_bwd<T, DC>(q, k, v, m, dy, o, b, t, d, s);
}
#endif
template <class T, int DC>
FwdFn<T> pick_fwd_dc() {
#ifdef MLS_SIMD_DISPATCH
  static const FwdFn<T> fn = simd::pick_isa<FwdFn<T>>(attention_fwd_avx512<T, DC>, attention_fwd_avx2<T, DC>, attention_fwd<T, DC>);
  return fn;
#else
  return attention_fwd<T, DC>;
#endif
}
template <class T, int DC>
BwdFn<T> pick_bwd_dc() {
#ifdef MLS_SIMD_DISPATCH
  static const BwdFn<T> fn = simd::pick_isa<BwdFn<T>>(attention_bwd_avx512<T, DC>, attention_bwd_avx2<T, DC>, attention_bwd<T, DC>);
  return fn;
#else
  return attention_bwd<T, DC>;
#endif
}
/// The kernel for head size D: built for D = 16, 32 and 64, else for any D.
template <class T>
FwdFn<T> pick_fwd(std::int64_t D) {
  return D == 16 ? pick_fwd_dc<T, 16>() : D == 32 ? pick_fwd_dc<T, 32>() : D == 64 ? pick_fwd_dc<T, 64>() : pick_fwd_dc<T, 0>();
}
template <class T>
BwdFn<T> pick_bwd(std::int64_t D) {
  return D == 16 ? pick_bwd_dc<T, 16>() : D == 32 ? pick_bwd_dc<T, 32>() : D == 64 ? pick_bwd_dc<T, 64>() : pick_bwd_dc<T, 0>();
}

/// q, k, v of one shape [..., T, D] (T, D >= 1), mask [T, T], dy (backward) of q's shape; one float dtype.
void check_attention(const std::vector<Shape>& s, const std::vector<DType>& d, const char* op) {
  const Shape& q = s[0];
  MLS_CHECK(q.size() >= 2, op, ": q must be [..., T, D], got ", shape_str(q));
  MLS_CHECK(is_floating(d[0]), op, ": q must be floating, got ", d[0]);
  const std::int64_t T = q[q.size() - 2];
  for (std::size_t k = 1; k < s.size(); ++k) {
    const Shape want = k == 3 ? Shape{T, T} : q;
    MLS_CHECK(s[k] == want, op, ": input ", k, " must be ", shape_str(want), " for q ", shape_str(q), ", got ", shape_str(s[k]));
    MLS_CHECK(d[k] == d[0], op, ": input ", k, " is ", d[k], ", q is ", d[0]);
  }
}
void check_attention(InNodes in, const char* op) {
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const Node* n : in) s.push_back(n->shape), d.push_back(n->dtype);
  check_attention(s, d, op);
}
/// batch, T and D of q [..., T, D].
void dims(const Shape& q, std::int64_t& batch, std::int64_t& T, std::int64_t& D) {
  T = q[q.size() - 2];
  D = q.back();
  batch = 1;
  for (std::size_t i = 0; i + 2 < q.size(); ++i) batch *= q[i];
}
template <bool Backward>
bool attention_into(Ins in, const autodiff::Attrs& a, Tensor& out) {
  if (in.size() != (Backward ? 5u : 4u) || (out.dtype() != DType::Float32 && out.dtype() != DType::Float64)) return false;
  for (const Tensor& t : in)
    if (t.dtype() != out.dtype()) return false;
  std::int64_t batch, T, D;
  dims(in[0].shape(), batch, T, D);
  // Each operand where it lies when its last dim has stride 1 (else a compact copy); the batch
  // offsets of its leading dims.
  std::vector<Tensor> c(in.size());
  std::vector<std::vector<std::int64_t>> off(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    c[i] = in[i].strides().back() == 1 || in[i].shape().back() == 1 ? in[i] : in[i].compact();
    if (i == 3) c[i] = c[i].compact();  // the mask: [T, T] rows
    if (i == 3) continue;
    const Shape& sh = c[i].shape();
    const Strides& st = c[i].strides();
    off[i].assign(static_cast<std::size_t>(batch), 0);
    for (std::int64_t b = 0; b < batch; ++b) {
      std::int64_t rest = b, o = 0;
      for (std::size_t d = sh.size() - 2; d-- > 0;) {
        o += (rest % sh[d]) * st[d];
        rest /= sh[d];
      }
      off[i][static_cast<std::size_t>(b)] = o;
    }
  }
  const double scale = a.f("scale");
  auto go = [&]<class F>(F) {
    auto op = [&](std::size_t i) {
      return Operand<F>{c[i].data<F>(), off[i].data(), c[i].strides()[c[i].ndim() - 2]};
    };
    if constexpr (Backward)
      pick_bwd<F>(D)(op(0), op(1), op(2), c[3].data<F>(), op(4), out.data<F>(), batch, T, D, static_cast<F>(scale));
    else
      pick_fwd<F>(D)(op(0), op(1), op(2), c[3].data<F>(), out.data<F>(), batch, T, D, static_cast<F>(scale));
  };
  if (out.dtype() == DType::Float32) go(float{});
  else go(double{});
  return true;
}
template <bool Backward>
Tensor attention_forward(Ins in, const autodiff::Attrs& a) {
  const char* op = Backward ? "attention_backward" : "fused_attention";
  MLS_CHECK(in.size() == (Backward ? 5u : 4u), op, ": expected ", Backward ? 5 : 4, " inputs, got ", in.size());
  std::vector<Shape> s;
  std::vector<DType> d;
  for (const Tensor& t : in) s.push_back(t.shape()), d.push_back(t.dtype());
  check_attention(s, d, op);
  Shape shape = in[0].shape();
  if (Backward) shape.insert(shape.begin(), 3);
  Tensor out = Tensor::empty(shape, in[0].dtype());
  MLS_CHECK(attention_into<Backward>(in, a, out), op, ": expected float32 or float64, got ", in[0].dtype());
  return out;
}
void fused_attention_infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_attention(in, "fused_attention");
  s = in[0]->shape;
  d = in[0]->dtype;
}
void attention_backward_infer(InNodes in, const autodiff::Attrs&, Shape& s, DType& d) {
  check_attention(in, "attention_backward");
  s = in[0]->shape;
  s.insert(s.begin(), 3);
  d = in[0]->dtype;
}
double attention_flops(const Node& n) {
  std::int64_t batch, T, D;
  dims(n.inputs[0]->shape, batch, T, D);
  return 4.0 * static_cast<double>(batch * T * T * D) * (n.inputs.size() == 5 ? 2.5 : 1.0);
}
std::vector<Var> fused_attention_bwd(const Var& out, const Var& g, const std::vector<bool>& needs);
}  // namespace

const Op kAttentionBackward = [] {
  const Op op = autodiff::register_op({.name = "attention_backward", .arity = 5, .differentiable = false,
                                       .forward = attention_forward<true>, .infer = attention_backward_infer,
                                       .doc = "fused_attention's dq|dk|dv packed [3, ...] from q, k, v, mask, dy",
                                       .flops = attention_flops});
  register_forward_into(op, attention_into<true>);
  return op;
}();
const Op kFusedAttention = [] {
  const Op op = autodiff::register_op({.name = "fused_attention", .arity = 4, .forward = attention_forward<false>,
                                       .infer = fused_attention_infer, .backward = fused_attention_bwd,
                                       .doc = "softmax(scale q k^T + mask) v, one row of scores at a time",
                                       .flops = attention_flops});
  register_forward_into(op, attention_into<false>);
  return op;
}();

namespace {
std::vector<Var> fused_attention_bwd(const Var& out, const Var& g, const std::vector<bool>& needs) {
  const Node& n = *out.node();
  std::vector<Var> in;
  for (const NodePtr& i : n.inputs) in.emplace_back(i);
  const Var packed = autodiff::apply(kAttentionBackward, {in[0], in[1], in[2], in[3], g}, n.attrs);
  auto part = [&](std::int64_t k) { return autodiff::reshape(autodiff::slice(packed, 0, k, k + 1, 1), in[0].shape()); };
  MLS_CHECK(!needs[3], "fused_attention: no gradient for the mask (a constant)");
  return {needs[0] ? part(0) : Var(), needs[1] ? part(1) : Var(), needs[2] ? part(2) : Var(), Var()};
}

bool is_scalar_constant(const Node& n) { return n.op == Op::Constant && n.value.defined() && n.value.numel() == 1; }
}  // namespace

int fuse_attention(Program& p) {
  int rewrites = 0;
  const auto uses = use_counts(p);
  auto own = detail::owners(p);
  auto single = [&](const Node* n) { return uses.at(n) == 1; };
  for (Node* y : p.schedule()) {
    // y = matmul(att, v), att = softmax(add(mul(matmul(q, kT), s), mask)), kT = permute(k) swapping the last two dims.
    if (y->op != Op::Matmul) continue;
    const Node* att = y->inputs[0].get();
    const Node* v = y->inputs[1].get();
    if (att->op != Op::Softmax || !single(att) || att->attrs.i("axis") != static_cast<std::int64_t>(att->shape.size()) - 1) continue;
    const Node* add = att->inputs[0].get();
    if (add->op != Op::Add || !single(add)) continue;
    const Node* mul = add->inputs[0].get();
    const Node* mask = add->inputs[1].get();
    if (mul->op != Op::Mul) std::swap(mul, mask);
    if (mul->op != Op::Mul || !single(mul) || mask->op != Op::Constant) continue;
    const Node* scores = mul->inputs[0].get();
    const Node* s = mul->inputs[1].get();
    if (scores->op != Op::Matmul) std::swap(scores, s);
    if (scores->op != Op::Matmul || !single(scores) || !is_scalar_constant(*s)) continue;
    const Node* q = scores->inputs[0].get();
    const Node* kt = scores->inputs[1].get();
    if (kt->op != Op::Permute) continue;
    const auto& perm = kt->attrs.ints("dims");
    const std::size_t r = perm.size();
    bool swap_last = r >= 2;
    for (std::size_t i = 0; swap_last && i < r; ++i)
      swap_last = perm[i] == static_cast<std::int64_t>(i < r - 2 ? i : (i == r - 2 ? r - 1 : r - 2));
    if (!swap_last) continue;
    const Node* k = kt->inputs[0].get();
    // One shape and float dtype for q, k, v; mask [T, T] of that dtype; the scale a float.
    const Shape& qs = q->shape;
    if (qs.size() < 2 || k->shape != qs || v->shape != qs || y->shape != qs) continue;
    bool ok = q->dtype == k->dtype && q->dtype == v->dtype && q->dtype == mask->dtype && q->dtype == y->dtype &&
              (q->dtype == DType::Float32 || q->dtype == DType::Float64);
    for (std::int64_t d : qs) ok = ok && d > 0;
    const std::int64_t T = qs[qs.size() - 2];
    if (!ok || mask->shape != Shape{T, T} || s->dtype != q->dtype) continue;
    const double scale = s->value.to(DType::Float64).item();
    const Var fused = p.make(kFusedAttention, {Var(own.at(q)), Var(own.at(k)), Var(own.at(v)), Var(own.at(mask))},
                             autodiff::Attrs().set("scale", scale));
    p.replace(Var(own.at(y)), fused);
    ++rewrites;
  }
  prune(p);
  return rewrites;
}

}  // namespace mls::graph_opt
