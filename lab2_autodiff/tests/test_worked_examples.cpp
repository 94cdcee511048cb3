// The lectures' worked examples (slides 000 and 002) in every mode.
#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::randn;

namespace {
#ifndef MLS_GRADED_BUILD  // the slides' values, compiled out of the grading build (mls/testing.hpp)
constexpr double kY = 11.652, kDx1 = 5.5, kDx2 = 1.716;  // the slides, to 3 decimals
#endif
/// Approx(slide value).margin(5e-4) on both sides.
constexpr mls::testing::Tolerance kSlide{2.4e-5, 1e-3};
}

TEST_CASE("slide trace: forward mode with dual numbers", "[lab2][examples]") {
  auto f = [](Dual x1, Dual x2) { return log(x1) + x1 * x2 - sin(x2); };
  const Dual d1 = f(Dual(2.0, 1.0), Dual(5.0, 0.0));  // seed x1
  const Dual d2 = f(Dual(2.0, 0.0), Dual(5.0, 1.0));  // seed x2
  mls::testing::observe("y, dy/dx1, dy/dx2", std::vector<double>{d1.v, d1.d, d2.d}, kSlide);
  MLS_ORACLE_CHECK(CHECK(d1.v == Approx(kY).margin(5e-4)); CHECK(d1.d == Approx(kDx1).margin(5e-4));
                   CHECK(d2.d == Approx(kDx2).margin(5e-4)));
}

TEST_CASE("slide trace: forward mode JVP over the graph", "[lab2][examples]") {
  auto f = [](const std::vector<Var>& x) { return std::vector<Var>{examples::slide_function(x[0], x[1])}; };
  const std::vector<Tensor> at{Tensor::scalar(2.0, DType::Float64), Tensor::scalar(5.0, DType::Float64)};
  const JvpResult r1 = jvp(f, at, {Tensor::scalar(1.0, DType::Float64), Tensor::scalar(0.0, DType::Float64)});
  const JvpResult r2 = jvp(f, at, {Tensor::scalar(0.0, DType::Float64), Tensor::scalar(1.0, DType::Float64)});
  mls::testing::observe_values("y", r1.values[0], kSlide);
  mls::testing::observe_values("dy/dx1", r1.tangents[0], kSlide);
  mls::testing::observe_values("dy/dx2", r2.tangents[0], kSlide);
  MLS_ORACLE_CHECK(CHECK(r1.values[0].item() == Approx(kY).margin(5e-4)); CHECK(r1.tangents[0].item() == Approx(kDx1).margin(5e-4));
                   CHECK(r2.tangents[0].item() == Approx(kDx2).margin(5e-4)));
}

TEST_CASE("slide trace: eager reverse mode", "[lab2][examples]") {
  Var x1(Tensor::scalar(2.0, DType::Float64), true), x2(Tensor::scalar(5.0, DType::Float64), true);
  const Var y = examples::slide_function(x1, x2);
  y.backward();
  autodiff_test::observe_var("y", y, kSlide);
  autodiff_test::observe_var("dy/dx1", x1.grad(), kSlide);
  autodiff_test::observe_var("dy/dx2", x2.grad(), kSlide);
  MLS_ORACLE_CHECK(CHECK(y.value().item() == Approx(kY).margin(5e-4)); CHECK(x1.grad().value().item() == Approx(kDx1).margin(5e-4));
                   CHECK(x2.grad().value().item() == Approx(kDx2).margin(5e-4)));
}

TEST_CASE("slide trace: symbolic reverse mode (gradients + executor)", "[lab2][examples]") {
  Graph g;
  const Var x1 = g.placeholder("x1", {}, DType::Float64), x2 = g.placeholder("x2", {}, DType::Float64);
  const Var y = examples::slide_function(x1, x2);
  const auto grads = gradients(y, {x1, x2});
  const auto out = Executor(g).run({y, grads[0], grads[1]}, {{x1, Tensor::scalar(2.0, DType::Float64)},
                                                             {x2, Tensor::scalar(5.0, DType::Float64)}});
  mls::testing::observe_values("y", out[0], kSlide);
  mls::testing::observe_values("dy/dx1", out[1], kSlide);
  mls::testing::observe_values("dy/dx2", out[2], kSlide);
  MLS_ORACLE_CHECK(CHECK(out[0].item() == Approx(kY).margin(5e-4)); CHECK(out[1].item() == Approx(kDx1).margin(5e-4));
                   CHECK(out[2].item() == Approx(kDx2).margin(5e-4)));
  // The graph is reusable with other values (lecture: "can be reused by different input values").
  const auto out2 = Executor(g).run({grads[0]}, {{x1, Tensor::scalar(1.0, DType::Float64)},
                                                 {x2, Tensor::scalar(3.0, DType::Float64)}});
  mls::testing::observe_values("dy/dx1 at (1, 3)", out2[0], autodiff_test::kApprox);
  MLS_ORACLE_CHECK(CHECK(out2[0].item() == Approx(1.0 + 3.0)));  // 1 / x1 + x2
}

TEST_CASE("(exp(v1)+1) times exp(v1): the backward graph has the slides' structure", "[lab2][examples]") {
  Graph g;
  const Var v1 = g.placeholder("v1", {}, DType::Float64);
  const Var v4 = examples::exp_example(v1);
  MLS_OBSERVE(g.size());
  MLS_ORACLE_CHECK(REQUIRE(g.size() == 5));  // v1, exp, const 1, add, mul
  const Var grad = gradients(v4, {v1})[0];
  // Backward nodes: the seed 1, v̄2→4 = v̄4·v3, v̄3 = v̄4·v2, v̄2 = v̄2→4 + v̄2→3, v̄1 = v̄2·v2.
  MLS_OBSERVE(g.num_backward());
  MLS_ORACLE_CHECK(CHECK(g.num_backward() == 5));
  int muls = 0, adds = 0, consts = 0;
  for (const auto& n : g.nodes()) {
    if (!n->is_backward) continue;
    muls += n->op == Op::Mul;
    adds += n->op == Op::Add;
    consts += n->op == Op::Constant;
  }
  MLS_OBSERVE(muls);
  MLS_OBSERVE(adds);
  MLS_OBSERVE(consts);
  // The node used twice (exp(v1)) gets its two partial adjoints summed: 3 muls, 1 add, 1 const.
  MLS_ORACLE_CHECK(CHECK(muls == 3); CHECK(adds == 1); CHECK(consts == 1));
  // v̄1 = v̄2 · exp(v1): its inputs are the summed adjoint and the forward exp node itself.
  std::string structure = op_name(grad.get()->op);  // "op(input op, ...)", forward inputs marked
  for (std::size_t i = 0; i < grad.get()->inputs.size(); ++i) {
    const Node* in = grad.get()->inputs[i].get();
    structure += (i == 0 ? "(" : ", ") + std::string(op_name(in->op)) + (in->is_backward ? "" : " (forward)");
  }
  structure += ")";
  MLS_OBSERVE(structure);
  MLS_ORACLE_CHECK(REQUIRE(grad.get()->op == Op::Mul); CHECK(grad.get()->inputs[0]->op == Op::Add);
                   CHECK(grad.get()->inputs[1]->op == Op::Exp); CHECK_FALSE(grad.get()->inputs[1]->is_backward));
  const double v = 0.3;
  const auto out = Executor(g).run({v4, grad}, {{v1, Tensor::scalar(v, DType::Float64)}});
  mls::testing::observe_values("v4", out[0], autodiff_test::kApprox);
  mls::testing::observe_values("dv4/dv1", out[1], autodiff_test::kApprox);
  MLS_ORACLE_CHECK(CHECK(out[0].item() == Approx((std::exp(v) + 1) * std::exp(v)));
                   CHECK(out[1].item() == Approx(2 * std::exp(2 * v) + std::exp(v))));
}

TEST_CASE("logistic regression (tinyflow): eager and graph give identical losses and gradients step by step", "[lab2][examples]") {
  const std::int64_t n = 16, d = 12, c = 5;
  Rng rng(7, "logreg");
  const Tensor x = Tensor::randn({n, d}, rng);
  Tensor labels = Tensor::empty({n}, DType::Int64);
  for (std::int64_t i = 0; i < n; ++i) labels.set({i}, static_cast<double>(rng.randint(0, c)));
  const Tensor y = one_hot(Var(labels), c).value();
  const Tensor w0 = Tensor::zeros({d, c});  // tf.Variable(tf.zeros([784, 10]))
  const double lr = 0.5;
  // Graph: the slides' program, W_grad = gradients(cross_entropy, [W]); train_step = assign(W, W - lr*W_grad).
  examples::Model m = examples::logistic_regression(w0);
  const Var train_step = m.graph->assign(m.params[0], m.params[0] - m.grads[0] * lr);
  // Eager: the same loss on the tape.
  Var w(w0.clone(), true);
  for (int step = 0; step < 5; ++step) {
    const auto out = Executor(*m.graph).run({m.loss, m.grads[0], train_step}, {{m.inputs[0], x}, {m.inputs[1], y}});
    w.zero_grad();
    const Var loss = examples::logistic_regression_loss(Var(x), Var(y), w);
    loss.backward();
    INFO("step " << step);
    CHECK(loss.value().item() == out[0].item());
    mls::testing::observe_values("loss", out[0], {1e-6, 1e-9});
    mls::testing::observe_values("W grad", out[1], {1e-6, 1e-9});
    CHECK(equal(w.grad().value(), out[1]));
    Tensor wv = w.value();  // the eager step (in place: the next step's eager loss reads it)
    wv -= mls::mul(w.grad().value(), lr);
    mls::testing::observe_values("W after the step", m.params[0].get()->value, {1e-6, 1e-9});
    CHECK(equal(wv, m.params[0].get()->value));
    MLS_ORACLE_CHECK(if (step == 0) CHECK(out[0].item() == Approx(std::log(static_cast<double>(c)))));  // uniform softmax
  }
}

TEST_CASE("two-layer MLP L = MSE(w2 ReLU(w1 x), y): eager and graph give identical losses and gradients step by step", "[lab2][examples]") {
  const std::int64_t n = 8, din = 6, h = 10, dout = 3;
  Rng rng(11, "mlp");
  const Tensor x = Tensor::randn({n, din}, rng), y = Tensor::randn({n, dout}, rng);
  const Tensor w1 = Tensor::randn({din, h}, rng, 0.0, 0.5), w2 = Tensor::randn({h, dout}, rng, 0.0, 0.5);
  examples::Model m = examples::two_layer_mlp(w1, w2);
  Var e1(w1.clone(), true), e2(w2.clone(), true);
  const double lr = 0.1;
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    const auto out = Executor(*m.graph).run({m.loss, m.grads[0], m.grads[1]}, {{m.inputs[0], x}, {m.inputs[1], y}});
    e1.zero_grad();
    e2.zero_grad();
    const Var loss = examples::two_layer_mlp_loss(Var(x), Var(y), e1, e2);
    loss.backward();
    INFO("step " << step);
    CHECK(loss.value().item() == out[0].item());
    mls::testing::observe_values("loss", out[0], {1e-6, 1e-9});
    mls::testing::observe_values("w1 grad", out[1], {1e-6, 1e-9});
    mls::testing::observe_values("w2 grad", out[2], {1e-6, 1e-9});
    CHECK(equal(e1.grad().value(), out[1]));
    CHECK(equal(e2.grad().value(), out[2]));
    // f(θ, ∇L) = θ - lr ∇L on both sides.
    for (auto [ev, gi] : {std::pair<Var*, std::size_t>{&e1, 1}, {&e2, 2}}) {
      Tensor v = ev->value();
      v -= mls::mul(ev->grad().value(), lr);
      Tensor gv = m.params[gi - 1].get()->value;
      gv -= mls::mul(out[gi], lr);
    }
    if (step == 0) first = out[0].item();
    last = out[0].item();
  }
  CHECK(last < first);
}
