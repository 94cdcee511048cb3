// Forward mode: dual numbers and JVP.
#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::randn;
using autodiff_test::require_error;

TEST_CASE("dual numbers: each rule against the analytic derivative", "[lab2][forward]") {
  const Dual x(0.7, 1.0);
  mls::testing::observe("derivatives", std::vector<double>{
      (x + 2.0).d, (3.0 - x).d, (x * x).d, (1.0 / x).d, (-x).d, sin(x).d, cos(x).d, exp(x).d, log(x).d, tanh(x).d,
      sqrt(x).d, pow(x, 3.0).d, pow(x, 3.0).v, (x * sin(x * x)).d}, autodiff_test::kApprox);
  // The analytic derivatives (the oracle) only outside the grading build.
  MLS_ORACLE_CHECK(CHECK((x + 2.0).d == Approx(1.0)); CHECK((3.0 - x).d == Approx(-1.0)); CHECK((x * x).d == Approx(1.4));
                   CHECK((1.0 / x).d == Approx(-1.0 / (0.7 * 0.7))); CHECK((-x).d == Approx(-1.0));
                   CHECK(sin(x).d == Approx(std::cos(0.7))); CHECK(cos(x).d == Approx(-std::sin(0.7)));
                   CHECK(exp(x).d == Approx(std::exp(0.7))); CHECK(log(x).d == Approx(1.0 / 0.7));
                   CHECK(tanh(x).d == Approx(1.0 - std::tanh(0.7) * std::tanh(0.7)));
                   CHECK(sqrt(x).d == Approx(0.5 / std::sqrt(0.7))); CHECK(pow(x, 3.0).d == Approx(3 * 0.7 * 0.7));
                   CHECK(pow(x, 3.0).v == Approx(0.7 * 0.7 * 0.7));
                   // A composition: d/dx [x sin(x^2)] = sin(x^2) + 2x^2 cos(x^2)
                   const Dual y = x * sin(x * x);
                   CHECK(y.d == Approx(std::sin(0.49) + 2 * 0.49 * std::cos(0.49))));
}

TEST_CASE("dual numbers: bad input", "[lab2][errors]") {
  MLS_OBSERVE(log(Dual(2.0, 1.0)).d, autodiff_test::kApprox);
  MLS_ORACLE_CHECK(CHECK(log(Dual(2.0, 1.0)).d == Approx(0.5)));
  require_error([] { (void)log(Dual(-1.0, 1.0)); }, "log(Dual): the value must be > 0, got -1");
  require_error([] { (void)sqrt(Dual(0.0, 1.0)); }, "sqrt(Dual)");
}

TEST_CASE("jvp: forward mode agrees with reverse mode via the dot-product identity", "[lab2][forward]") {
  using F = std::function<Var(const std::vector<Var>&)>;
  const std::vector<std::pair<const char*, F>> fs = {
      {"elementwise", [](const std::vector<Var>& x) { return tanh(x[0]) * exp(x[1]) / (x[0] * x[0] + 1.0) - sin(x[1]); }},
      {"matmul+softmax", [](const std::vector<Var>& x) { return softmax(matmul(x[0], transpose(x[1])), 1); }},
      {"log_softmax+sum", [](const std::vector<Var>& x) { return sum(log_softmax(x[0] * x[1], 0), {1}, true); }},
      {"shape ops", [](const std::vector<Var>& x) {
         return concat({reshape(permute(x[0], {1, 0}), {2, 6}), reshape(slice(x[1], 1, 0, 2), {1, 6})}, 0);
       }},
      {"relu/where/pow", [](const std::vector<Var>& x) { return where(gt(x[0], x[1]), pow(x[0] * x[0] + 1.0, 1.5), relu(x[1])); }},
      {"mse/logsumexp/mean", [](const std::vector<Var>& x) { return mse_loss(x[0], x[1]) * mean(logsumexp(x[0], 1)); }},
  };
  const Tensor x0 = randn({3, 4}, 1), x1 = randn({3, 4}, 2), u0 = randn({3, 4}, 3), u1 = randn({3, 4}, 4);
  for (const auto& [name, f] : fs) {
    INFO(name);
    const JvpResult r = jvp([&](const std::vector<Var>& x) { return std::vector<Var>{f(x)}; }, {x0, x1}, {u0, u1});
    const Tensor v = randn(r.values[0].shape(), 9);
    const double lhs = mls::sum(mls::mul(v, r.tangents[0])).item();
    mls::testing::observe_values("jvp value", r.values[0], autodiff_test::kAllclose);
    MLS_OBSERVE(lhs, {1e-9, 1e-11});
    // The oracle: reverse mode on the tape, <J^T v, u> (after forward mode ran).
    MLS_ORACLE(Var a(x0.clone(), true), b(x1.clone(), true); const Var out = f({a, b}); out.backward(v);
               const double rhs = mls::sum(mls::mul(a.grad().value(), u0)).item() + mls::sum(mls::mul(b.grad().value(), u1)).item();)
    MLS_ORACLE_CHECK(CHECK(allclose(out.value(), r.values[0])); CHECK(lhs == Approx(rhs).epsilon(1e-10).margin(1e-12)));
  }
}

TEST_CASE("jvp: one forward pass per input direction gives a Jacobian column", "[lab2][forward]") {
  // f(x) = [x0 x1, sin x0]: the column for e0 is [x1, cos x0], for e1 [x0, 0].
  Graph g;
  const Var x = g.placeholder("x", {2}, DType::Float64);
  const Var x0 = slice(x, 0, 0, 1), x1 = slice(x, 0, 1, 2);
  const Var y = concat({x0 * x1, sin(x0)}, 0);
  const Tensor xv = Tensor::from({0.3, 2.0});
  const JvpResult c0 = jvp({y}, {{x, xv}}, {{x, Tensor::from({1.0, 0.0})}});
  const JvpResult c1 = jvp({y}, {{x, xv}}, {{x, Tensor::from({0.0, 1.0})}});
  mls::testing::observe_values("column 0", c0.tangents[0], autodiff_test::kAllclose);
  mls::testing::observe_values("column 1", c1.tangents[0], autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(allclose(c0.tangents[0], Tensor::from({2.0, std::cos(0.3)})));
                   CHECK(allclose(c1.tangents[0], Tensor::from({0.3, 0.0}))));
}

TEST_CASE("jvp errors: tangents of the wrong shape, ops without a rule", "[lab2][errors]") {
  auto f = [](const std::vector<Var>& x) { return std::vector<Var>{exp(x[0])}; };
  const JvpResult ok = jvp(f, {Tensor::from({0.0})}, {Tensor::from({1.0})});
  mls::testing::observe_values("tangent", ok.tangents[0], autodiff_test::kApprox);
  MLS_ORACLE_CHECK(CHECK(ok.tangents[0].item() == Approx(1.0)));
  require_error([&] { jvp(f, {Tensor::from({0.0})}, {Tensor::from({1.0, 2.0})}); }, "tangent 0 has shape [2]");
  // Every differentiable op has a rule now (max included); assign still has no tangent.
  Graph g;
  const Var v = g.variable("v", Tensor::from({1.0}));
  const Var a = g.assign(v, exp(v));
  require_error([&] { jvp({a}, {}, {{v, Tensor::from({1.0})}}); }, "jvp: the graph contains assign");
}
