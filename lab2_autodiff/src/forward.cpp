// Student file of lab 2: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Forward mode: dual numbers and the tensor JVP over a graph.
#include "mls/autodiff/forward.hpp"

#include <cmath>
#include <unordered_map>

#include "mls/tensor/scalar.hpp"

namespace mls::autodiff {

/// Sum rule: (a + b)˙ = ȧ + ḃ.
Dual operator+(Dual a, Dual b) {
  // BEGIN SOLUTION
  return {a.v + b.v, a.d + b.d};
  // END SOLUTION
}
/// Difference rule: (a - b)˙ = ȧ - ḃ.
Dual operator-(Dual a, Dual b) {
  // BEGIN SOLUTION
  return {a.v - b.v, a.d - b.d};
  // END SOLUTION
}
/// Product rule: (ab)˙ = ȧb + aḃ.
Dual operator*(Dual a, Dual b) {
  // BEGIN SOLUTION
  return {a.v * b.v, a.d * b.v + a.v * b.d};
  // END SOLUTION
}
/// Quotient rule: (a/b)˙ = (ȧ - (a/b)ḃ) / b.
Dual operator/(Dual a, Dual b) {
  // BEGIN SOLUTION
  const double q = a.v / b.v;
  return {q, (a.d - q * b.d) / b.v};
  // END SOLUTION
}
/// Negation: (-a)˙ = -ȧ.
Dual operator-(Dual a) {
  // BEGIN SOLUTION
  return {-a.v, -a.d};
  // END SOLUTION
}
/// sin(a)˙ = ȧ cos(a).
Dual sin(Dual a) {
  // BEGIN SOLUTION
  return {std::sin(a.v), a.d * std::cos(a.v)};
  // END SOLUTION
}
/// cos(a)˙ = -ȧ sin(a).
Dual cos(Dual a) {
  // BEGIN SOLUTION
  return {std::cos(a.v), -a.d * std::sin(a.v)};
  // END SOLUTION
}
/// exp(a)˙ = ȧ exp(a).
Dual exp(Dual a) {
  // BEGIN SOLUTION
  const double e = std::exp(a.v);
  return {e, a.d * e};
  // END SOLUTION
}
/// log(a)˙ = ȧ / a (a > 0).
Dual log(Dual a) {
  MLS_CHECK(a.v > 0, "log(Dual): the value must be > 0, got ", a.v);
  // BEGIN SOLUTION
  return {std::log(a.v), a.d / a.v};
  // END SOLUTION
}
/// tanh(a)˙ = ȧ (1 - tanh² a).
Dual tanh(Dual a) {
  // BEGIN SOLUTION
  const double t = std::tanh(a.v);
  return {t, a.d * (1.0 - t * t)};
  // END SOLUTION
}
/// sqrt(a)˙ = ȧ / (2 sqrt(a)) (a > 0).
Dual sqrt(Dual a) {
  MLS_CHECK(a.v > 0, "sqrt(Dual): the value must be > 0, got ", a.v);
  // BEGIN SOLUTION
  const double s = std::sqrt(a.v);
  return {s, a.d * 0.5 / s};
  // END SOLUTION
}
/// (a^p)˙ = ȧ p a^(p-1) for a constant p.
Dual pow(Dual a, double p) {
  // BEGIN SOLUTION
  return {std::pow(a.v, p), a.d * p * std::pow(a.v, p - 1.0)};
  // END SOLUTION
}

// ---- tensor JVP -------------------------------------------------------------------------------------
namespace {
/// `t` broadcast (materialised) to `shape`, or `t` itself when it already has it.
[[maybe_unused]] Tensor fit(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  return t.expand(shape).clone();
}
/// The op's forward applied with input `k` replaced by `t` (for ops linear in that input).
[[maybe_unused]] Tensor linear_in(const Node& node, const std::vector<Tensor>& vals, std::size_t k, const Tensor& t) {
  std::vector<Tensor> v = vals;
  v[k] = t;
  return op_def(node.op).forward(v, node.attrs);
}
}  // namespace

/// The output tangent of one node (J·u for that op): see forward.hpp.
Tensor jvp_rule(const Node& node, const std::vector<Tensor>& x, const std::vector<Tensor>& t, const Tensor& y) {
  bool any = false;
  for (const Tensor& ti : t) any = any || ti.defined();
  const OpDef& def = op_def(node.op);
  if (!any || !def.differentiable) return {};
  if (def.jvp) return def.jvp(node, x, t, y);  // an op registered with its own forward-mode rule
  // BEGIN SOLUTION
  const Shape& ys = y.shape();
  switch (node.op) {
    // linear in input 0 (the other inputs are shapes, indices or constants): apply the op to t
    case Op::Neg: case Op::Sum: case Op::Mean: case Op::SumLike: case Op::BroadcastLike: case Op::ExpandMean:
    case Op::Reshape: case Op::ReshapeLike: case Op::Permute: case Op::Slice: case Op::SliceBackward:
    case Op::Expand: case Op::Unsqueeze: case Op::Squeeze: case Op::Im2Col: case Op::Col2Im: case Op::Cast:
    case Op::Embedding: case Op::EmbeddingBackward:
      return t[0].defined() ? linear_in(node, x, 0, t[0]) : Tensor();
    case Op::Concat: case Op::Stack: {
      std::vector<Tensor> v(t.size());
      for (std::size_t i = 0; i < t.size(); ++i) v[i] = t[i].defined() ? t[i] : Tensor::zeros(x[i].shape(), x[i].dtype());
      return op_def(node.op).forward(v, node.attrs);
    }
    case Op::Abs: return mls::mul(t[0], mls::sub(mls::gt(x[0], 0.0).to(y.dtype()), mls::lt(x[0], 0.0).to(y.dtype())));
    case Op::Exp: return mls::mul(t[0], y);
    case Op::Log: return mls::div(t[0], x[0]);
    case Op::Sqrt: return mls::div(mls::mul(t[0], 0.5), y);
    case Op::Rsqrt: return mls::mul(mls::mul(t[0], -0.5), mls::mul(y, mls::mul(y, y)));
    case Op::Sin: return mls::mul(t[0], mls::cos(x[0]));
    case Op::Cos: return mls::neg(mls::mul(t[0], mls::sin(x[0])));
    case Op::Tanh: return mls::mul(t[0], 1.0 - mls::mul(y, y));
    case Op::Sigmoid: return mls::mul(t[0], mls::mul(y, 1.0 - y));
    case Op::Relu: return mls::mul(t[0], mls::gt(x[0], 0.0).to(y.dtype()));
    case Op::Add: case Op::Sub: {
      Tensor r = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) r = mls::add(r, t[0]);
      if (t[1].defined()) r = node.op == Op::Add ? mls::add(r, t[1]) : mls::sub(r, t[1]);
      return r;
    }
    case Op::Mul: case Op::Matmul: case Op::Conv2d: {  // bilinear: f(ta, b) + f(a, tb)
      Tensor r;
      if (t[0].defined()) r = linear_in(node, x, 0, t[0]);
      if (t[1].defined()) {
        const Tensor s = linear_in(node, x, 1, t[1]);
        r = r.defined() ? mls::add(r, s) : s;
      }
      return fit(r, ys);
    }
    case Op::Div: {  // (ta - y tb) / b
      Tensor num = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) num = mls::add(num, t[0]);
      if (t[1].defined()) num = mls::sub(num, mls::mul(y, t[1]));
      return mls::div(num, x[1]);
    }
    case Op::Pow: {  // ta b a^(b-1) + tb y log a
      Tensor r = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) r = mls::add(r, mls::mul(mls::mul(t[0], x[1]), mls::pow(x[0], mls::sub(x[1], 1.0))));
      if (t[1].defined()) r = mls::add(r, mls::mul(mls::mul(t[1], y), mls::log(x[0])));
      return r;
    }
    case Op::Where: {
      const Tensor ta = t[1].defined() ? t[1] : Tensor::zeros({}, y.dtype());
      const Tensor tb = t[2].defined() ? t[2] : Tensor::zeros({}, y.dtype());
      return fit(mls::where(x[0], ta, tb), ys);
    }
    case Op::Softmax: {  // y (t - sum(t y))
      const std::int64_t ax = node.attrs.i("axis");
      return mls::mul(y, mls::sub(t[0], mls::sum(mls::mul(t[0], y), {ax}, true)));
    }
    case Op::LogSoftmax: {  // t - sum(softmax(x) t)
      const std::int64_t ax = node.attrs.i("axis");
      return mls::sub(t[0], mls::sum(mls::mul(mls::exp(y), t[0]), {ax}, true));
    }
    case Op::LogSumExp: {
      const std::int64_t ax = node.attrs.i("axis");
      return mls::sum(mls::mul(mls::softmax(x[0], ax), t[0]), {ax}, node.attrs.i("keepdim") != 0);
    }
    case Op::Mse: {  // mean(2 (a - b)(ta - tb))
      Tensor dt = Tensor::zeros(x[0].shape(), y.dtype());
      if (t[0].defined()) dt = mls::add(dt, t[0]);
      if (t[1].defined()) dt = mls::sub(dt, t[1]);
      return mls::mean(mls::mul(mls::mul(mls::sub(x[0], x[1]), dt), 2.0));
    }
    case Op::Gelu: {  // y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2), u = k (x + c x^3)
      const double k = scalar::kGeluK, c = scalar::kGeluC;
      const Tensor& a = x[0];
      const Tensor th = mls::tanh(mls::mul(mls::add(a, mls::mul(mls::mul(mls::mul(a, a), a), c)), k));
      const Tensor du = mls::mul(mls::add(mls::mul(mls::mul(a, a), 3.0 * c), 1.0), k);
      const Tensor d = mls::add(mls::mul(mls::add(th, 1.0), 0.5),
                                mls::mul(mls::mul(mls::mul(a, 0.5), (1.0 - mls::mul(th, th))), du));
      return mls::mul(t[0], d);
    }
    case Op::Maximum: case Op::Minimum: {  // the tangent of the winner; ties take the mean (as reverse mode)
      const Tensor win = node.op == Op::Maximum ? mls::gt(x[0], x[1]) : mls::lt(x[0], x[1]);
      const Tensor wa = mls::add(win.to(y.dtype()), mls::mul(mls::eq(x[0], x[1]).to(y.dtype()), 0.5));
      Tensor r = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) r = mls::add(r, mls::mul(t[0], wa));
      if (t[1].defined()) r = mls::add(r, mls::mul(t[1], 1.0 - wa));
      return r;
    }
    case Op::Max: case Op::Min: {  // the mean tangent of the elements equal to the extremum
      std::vector<std::int64_t> axes = node.attrs.ints("axes");
      if (axes.empty())
        for (std::int64_t d = 0; d < x[0].ndim(); ++d) axes.push_back(d);
      Shape kshape = x[0].shape();
      for (std::int64_t& d : axes) {
        if (d < 0) d += x[0].ndim();
        kshape[static_cast<std::size_t>(d)] = 1;
      }
      const Tensor hit = mls::eq(x[0], y.reshape(kshape)).to(y.dtype());
      const Tensor num = mls::sum(mls::mul(hit, t[0]), axes, true);
      return mls::div(num, mls::sum(hit, axes, true)).reshape(ys);
    }
    case Op::SoftmaxCrossEntropy: {  // loss_n = -sum_c t log p:  -sum_c (t (tx - <p, tx>) + tt log p)
      const Tensor ls = mls::log_softmax(x[0], 1);
      Tensor target = x[1];
      if (!is_floating(target.dtype())) {
        const auto idx = target.to_vector<std::int64_t>();
        target = Tensor::zeros(x[0].shape(), y.dtype());
        for (std::size_t i = 0; i < idx.size(); ++i) target.set({static_cast<std::int64_t>(i), idx[i]}, 1.0);
      }
      Tensor r = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) {
        const Tensor dls = mls::sub(t[0], mls::sum(mls::mul(mls::exp(ls), t[0]), {1}, true));
        r = mls::sub(r, mls::sum(mls::mul(target, dls), {1}));
      }
      if (t[1].defined() && is_floating(x[1].dtype())) r = mls::sub(r, mls::sum(mls::mul(t[1], ls), {1}));
      return r;
    }
    case Op::LayerNorm: case Op::BatchNorm: {  // y = xhat gamma + beta
      const bool ln = node.op == Op::LayerNorm;
      const double eps = node.attrs.f("eps");
      const std::int64_t nd = x[0].ndim();
      const std::vector<std::int64_t> axes =
          ln ? std::vector<std::int64_t>{nd - 1} : (nd == 2 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, 2, 3});
      const std::int64_t c = x[1].shape()[0];
      const Shape cs = ln ? Shape{c} : (nd == 2 ? Shape{1, c} : Shape{1, c, 1, 1});
      const bool batch_stats = ln || node.attrs.i("training") != 0;
      Tensor xhat, rstd;
      if (batch_stats) {
        const Tensor xc = mls::sub(x[0], mls::mean(x[0], axes, true));
        rstd = mls::rsqrt(mls::add(mls::mean(mls::mul(xc, xc), axes, true), eps));
        xhat = mls::mul(xc, rstd);
      } else {
        rstd = mls::rsqrt(mls::add(x[4].reshape(cs), eps));
        xhat = mls::mul(mls::sub(x[0], x[3].reshape(cs)), rstd);
      }
      Tensor r = Tensor::zeros(ys, y.dtype());
      if (t[0].defined()) {  // xhat' = rstd (tx - mean(tx) - xhat mean(tx xhat)) with batch statistics
        Tensor dxhat = batch_stats ? mls::mul(rstd, mls::sub(mls::sub(t[0], mls::mean(t[0], axes, true)),
                                                             mls::mul(xhat, mls::mean(mls::mul(t[0], xhat), axes, true))))
                                   : mls::mul(t[0], rstd);
        r = mls::add(r, mls::mul(dxhat, x[1].reshape(cs)));
      }
      if (t[1].defined()) r = mls::add(r, mls::mul(xhat, t[1].reshape(cs)));
      if (t[2].defined()) r = mls::add(r, t[2].reshape(cs));
      return r;
    }
    default:
      fail("jvp: no forward-mode rule for op ", op_name(node.op), " (use reverse mode for it)");
  }
  // END SOLUTION
}

JvpResult jvp(const std::vector<Var>& outputs, const Feeds& feeds, const Feeds& tangents) {
  MLS_CHECK(!outputs.empty(), "jvp: no outputs");
  const Graph* g = outputs[0].get() ? outputs[0].get()->graph : nullptr;
  MLS_CHECK(g != nullptr, "jvp: outputs must be graph nodes");
  for (const Var& o : outputs) MLS_CHECK(o.defined() && o.get()->graph == g, "jvp: outputs must be in one graph");
  std::unordered_map<const Node*, Tensor> tan;
  for (const auto& [v, t] : tangents) {
    MLS_CHECK(v.defined() && v.get()->graph == g, "jvp: a tangent is given for a node of another graph");
    MLS_CHECK(v.get()->op == Op::Placeholder || v.get()->op == Op::Variable,
              "jvp: tangents are given for placeholders or variables, not ", op_name(v.get()->op));
    MLS_CHECK(t.defined() && t.dtype() == v.dtype(), "jvp: the tangent of '", v.name(), "' must be ", v.dtype());
    tan[v.get()] = t;
  }
  // Values: run the whole graph once (the executor checks the feeds).
  const std::vector<Node*> order = topo_sort(outputs);
  for (Node* n : order) {
    if (n->op == Op::Assign) fail("jvp: the graph contains assign, which has no tangent");
  }
  std::unordered_map<const Node*, Tensor> val;
  {
    std::vector<Var> fetch;
    std::unordered_map<const Node*, NodePtr> owner;
    for (const Var& o : outputs) owner.emplace(o.get(), o.node());
    for (Node* n : order)
      for (const NodePtr& in : n->inputs) owner.emplace(in.get(), in);
    for (Node* n : order) fetch.emplace_back(owner.at(n));
    const std::vector<Tensor> vs = Executor(*g).run(fetch, feeds);
    for (std::size_t i = 0; i < order.size(); ++i) val[order[i]] = vs[i];
  }
  for (const auto& [n, t] : tan)
    if (val.count(n))
      MLS_CHECK(t.shape() == val.at(n).shape(), "jvp: tangent of '", n->name, "' has shape ", shape_str(t.shape()),
                ", the value has ", shape_str(val.at(n).shape()));
  std::vector<Tensor> xs, ts;
  for (Node* n : order) {
    if (n->is_leaf()) continue;
    xs.clear();
    ts.clear();
    for (const NodePtr& in : n->inputs) {
      xs.push_back(val.at(in.get()));
      auto it = tan.find(in.get());
      ts.push_back(it == tan.end() ? Tensor() : it->second);
    }
    const Tensor t = jvp_rule(*n, xs, ts, val.at(n));
    if (t.defined()) tan[n] = t;
  }
  JvpResult r;
  for (const Var& o : outputs) {
    const Tensor& v = val.at(o.get());
    r.values.push_back(v);
    auto it = tan.find(o.get());
    r.tangents.push_back(it == tan.end() ? Tensor::zeros(v.shape(), v.dtype()) : it->second);
  }
  return r;
}

JvpResult jvp(const std::function<std::vector<Var>(const std::vector<Var>&)>& f, const std::vector<Tensor>& primals,
              const std::vector<Tensor>& tangents) {
  MLS_CHECK(primals.size() == tangents.size(), "jvp: ", primals.size(), " primals but ", tangents.size(), " tangents");
  Graph g;
  std::vector<Var> ph;
  Feeds feeds, tans;
  for (std::size_t i = 0; i < primals.size(); ++i) {
    ph.push_back(g.placeholder("x" + std::to_string(i), primals[i].shape(), primals[i].dtype()));
    feeds.emplace_back(ph.back(), primals[i]);
    MLS_CHECK(tangents[i].shape() == primals[i].shape(), "jvp: tangent ", i, " has shape ",
              shape_str(tangents[i].shape()), ", primal has ", shape_str(primals[i].shape()));
    tans.emplace_back(ph.back(), tangents[i].to(primals[i].dtype()));
  }
  return jvp(f(ph), feeds, tans);
}

}  // namespace mls::autodiff
