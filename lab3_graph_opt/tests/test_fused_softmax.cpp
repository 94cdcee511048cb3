// compile's "fuse-softmax" pass (issue 29): softmax(x * s + mask) -> scaled_softmax, whose
// gradient is one row kernel; on random graphs with their gradients against the graph before the
// pass (lab 2's executor and the planned executor), a float64 gradcheck, and the ops' bad inputs.
#include "helpers.hpp"

#include "mls/autodiff/gradcheck.hpp"
#include "mls/common/rng.hpp"
#include "mls/graph_opt/compile.hpp"

#include <cmath>
#include <limits>

using namespace graph_opt_test;

namespace {
/// A causal mask [t, n]: 0 where j <= i + n - t, -inf after (every row keeps at least one entry).
Tensor causal_mask(std::int64_t t, std::int64_t n, DType dt) {
  std::vector<double> m(static_cast<std::size_t>(t * n), 0.0);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = std::max<std::int64_t>(i + n - t + 1, 1); j < n; ++j)
      m[static_cast<std::size_t>(i * n + j)] = -std::numeric_limits<double>::infinity();
  return Tensor::from_vector(m, {t, n}).to(dt);
}
}  // namespace

TEST_CASE("fuse-softmax gives softmax(x * s + mask)'s values and gradients on random graphs", "[lab3][passes]") {
  Rng rng(29, "fuse-softmax");
  for (int trial = 0; trial < 16; ++trial) {
    INFO("trial " << trial);
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const std::int64_t a = rng.randint(1, 4), h = rng.randint(1, 4), t = rng.randint(1, 9), n = rng.randint(1, 40),
                       d = rng.randint(1, 9);
    Program p;
    const Var q = p.input("q", {a, h, t, d}, dt), k = p.input("k", {a, h, n, d}, dt), w = p.input("w", {a, h, t, n}, dt);
    // As attention's scores: q k^T * s + mask; the scale and the mask on either side, a mask of
    // the last two dims, of the last one, or none (trial % 4 == 2), the scale missing (trial % 4
    // == 3); a mask that is an input (trial % 8 == 5: not a constant, stays an add), a scaled
    // value read twice (trial % 8 == 6: the mul stays).
    const Var scores = autodiff::matmul(q, autodiff::transpose(k));
    const double s = 1.0 / std::sqrt(static_cast<double>(d)) + 0.125;  // never 1: a fused scale shows
    const Var c = p.constant(Tensor::scalar(s, dt));
    const Var scaled = trial % 4 == 3 ? scores : (trial % 2 ? scores * c : c * scores);
    Var u = scaled;
    Var mask;
    if (trial % 8 == 5) mask = p.input("mask", {t, n}, dt);
    else if (trial % 4 != 2) mask = p.constant(trial % 3 ? causal_mask(t, n, dt) : causal_mask(1, n, dt).reshape({n}));
    if (mask.defined()) u = trial % 3 == 1 ? mask + u : u + mask;
    const Var y = autodiff::softmax(u, trial % 5 == 0 ? -1 : 3);
    Var loss = autodiff::sum(y * w);
    if (trial % 8 == 6) loss = loss + autodiff::sum(scaled);
    p.output(loss);
    Program r = clone(p);
    verify(r);
    const int rewritten = fuse_softmax(r);
    verify(r);
    const std::size_t wrt_n = p.inputs.size();
    std::vector<Var> wrt_p(p.inputs.begin(), p.inputs.end()), wrt_r(r.inputs.begin(), r.inputs.begin() + static_cast<std::ptrdiff_t>(wrt_n));
    for (const Var& g : autodiff::gradients(loss, wrt_p)) p.output(g);
    for (const Var& g : autodiff::gradients(r.outputs[0], wrt_r)) r.output(g);
    verify(r);
    MLS_OBSERVE(rewritten);
    MLS_OBSERVE(count_op(r, kScaledSoftmaxBackward));
    MLS_OBSERVE(count_op(r, Op::Add));
    const auto feeds = random_feeds(p, 70 + static_cast<std::uint64_t>(trial));
    const std::vector<Tensor> got = run(r, feeds);
    observe_outputs("fuse-softmax", got);
    PlannedExecutor ex(r, plan_memory(r));
    const std::vector<Tensor> planned = ex.run(feeds);
    observe_outputs("fuse-softmax in planned buffers", planned);
    // Which inputs the fused node kept: the mask when it is a constant, the mul's operand when
    // the scaled value is read only by the add/softmax.
    std::size_t with_mask = 0, with_scale = 0;
    for (const NodePtr& m : r.graph->nodes())
      if (m->op == kScaledSoftmax) with_mask += m->inputs.size() == 2, with_scale += m->attrs.f("scale") != 1.0;
    const bool mask_fused = mask.defined() && trial % 8 != 5;
    const bool scale_fused = trial % 4 != 3 && trial % 8 != 6 && trial % 8 != 5;
    MLS_ORACLE_CHECK(CHECK(rewritten == 1); CHECK(count_op(r, Op::Softmax) == 0); CHECK(count_op(r, kScaledSoftmax) == 1);
                     CHECK(with_mask == (mask_fused ? 1u : 0u)); CHECK(with_scale == (scale_fused ? 1u : 0u));
                     CHECK(count_op(r, kScaledSoftmaxBackward) >= 1);
                     CHECK(max_rel_error(got, run(p, feeds)) <= 1.0); CHECK(max_rel_error(planned, got) <= 1.0));
  }
}

TEST_CASE("fuse-softmax leaves a softmax over another axis, and compile's GPT-like step keeps eager's gradients", "[lab3][passes]") {
  Program p;
  const Var x = p.input("x", {3, 5, 4});
  p.output(autodiff::softmax(x * 2.0, 1));
  Program r = clone(p);
  verify(r);
  const int rewritten = fuse_softmax(r);
  MLS_OBSERVE(rewritten);
  MLS_ORACLE_CHECK(CHECK(rewritten == 0); CHECK(count_op(r, Op::Softmax) == 1));
  // compile() runs it in its pre-gradient pipeline: a masked attention's loss and gradients as eager.
  Rng rng(29, "fuse-softmax compile");
  const Tensor qv = Tensor::randn({2, 2, 6, 4}, rng), kv = Tensor::randn({2, 2, 6, 4}, rng), vv = Tensor::randn({2, 2, 6, 4}, rng);
  const Tensor mask = causal_mask(6, 6, DType::Float32);
  auto fn = [&](Var q, Var k, Var v) {
    return autodiff::sum(autodiff::matmul(autodiff::softmax(autodiff::matmul(q, autodiff::transpose(k)) * 0.5 + Var(mask), -1), v) *
                         autodiff::tanh(v));
  };
  auto compiled = graph_opt::compile(fn);
  Var q(qv, true), k(kv, true), v(vv, true);
  const Var le = fn(q, k, v);
  le.backward();
  const std::vector<Tensor> eager{le.value(), q.grad().value(), k.grad().value(), v.grad().value()};
  q.zero_grad(), k.zero_grad(), v.zero_grad();
  const Var lc = compiled(q, k, v);
  lc.backward();
  const std::vector<Tensor> comp{lc.value(), q.grad().value(), k.grad().value(), v.grad().value()};
  observe_outputs("compiled masked attention: loss, dq, dk, dv", comp);
  MLS_ORACLE_CHECK(CHECK(count_op(compiled.impl().version(0).forward, kScaledSoftmax) == 1);
                   CHECK(max_rel_error(comp, eager) <= 1.0));
}

TEST_CASE("scaled_softmax passes a float64 gradcheck with a mask, equals softmax(s x + mask), and its ops refuse bad inputs", "[lab3][passes]") {
  Program p;
  const Var px = p.input("x", {2, 3, 5}, DType::Float64), pm = p.input("m", {3, 5}, DType::Float64);
  p.output(p.make(kScaledSoftmax, {px, pm}, autodiff::Attrs().set("scale", 0.7)));
  verify(p);
  const std::vector<Tensor> in{randn64({2, 3, 5}, 7, "softmax-x"), randn64({3, 5}, 8, "softmax-m")};
  const Tensor w = randn64({2, 3, 5}, 9, "softmax-w");
  const autodiff::GradcheckResult r = autodiff::gradcheck(
      [&](const std::vector<Var>& v) {
        return autodiff::sum(autodiff::apply(kScaledSoftmax, {v[0], v[1]}, autodiff::Attrs().set("scale", 0.7)) * autodiff::constant_like(v[0], w)) +
               autodiff::sum(autodiff::apply(kScaledSoftmax, {v[0] * v[0]}, autodiff::Attrs().set("scale", -1.5)) * autodiff::constant_like(v[0], w));
      },
      in);
  MLS_OBSERVE(r.ok);
  INFO(r.report);
  CHECK(r.ok);
  // Its value is lab 1's softmax of s x + mask (float32: within a few ulps, the exp's rounding and
  // a fused multiply-add of the scale and the mask).
  Rng rng(29, "scaled_softmax value");
  const Tensor x = Tensor::randn({4, 3, 7}, rng, 0.0, 2.0), m = causal_mask(3, 7, DType::Float32);
  const Tensor fused = autodiff::apply(kScaledSoftmax, {Var(x), Var(m)}, autodiff::Attrs().set("scale", 0.25)).value();
  MLS_OBSERVE_VALUES(fused);
  MLS_ORACLE_CHECK(CHECK(max_rel_error({fused}, {autodiff::softmax(Var(x) * 0.25 + Var(m), -1).value()}) <= 1.0));
  const Var x24(Tensor::zeros({2, 4})), c4(Tensor::zeros({4})), c3(Tensor::zeros({3}));
  const autodiff::Attrs s1 = autodiff::Attrs().set("scale", 1.0);
  require_error([&] { (void)autodiff::apply(kScaledSoftmax, {x24, c3}, s1); },
                "scaled_softmax: the mask [3] must be trailing dims of x [2, 4]");
  require_error([&] { (void)autodiff::apply(kScaledSoftmax, {x24, Var(Tensor::zeros({4}, DType::Float64))}, s1); },
                "scaled_softmax: the mask is float64, x is float32");
  require_error([&] { (void)autodiff::apply(kScaledSoftmax, {x24, c4, c4}, s1); }, "scaled_softmax: expected 1 or 2 inputs");
  require_error([&] { (void)autodiff::apply(kScaledSoftmax, {Var(Tensor::zeros({2, 4}, DType::Int64))}, s1); },
                "scaled_softmax: x must be float32 or float64, got int64");
  require_error([&] { (void)autodiff::apply(kScaledSoftmaxBackward, {x24, Var(Tensor::zeros({2, 3}))}, s1); },
                "scaled_softmax_backward: g [2, 3] must have y's shape [2, 4]");
  require_error([&] { (void)autodiff::apply(kScaledSoftmaxBackward, {x24}, s1); }, "scaled_softmax_backward: expected 2 inputs");
}
