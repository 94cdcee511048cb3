// Eager reverse mode: the tape, accumulation, no_grad, retain_graph, create_graph.
#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::randn;
using autodiff_test::require_error;

TEST_CASE("eager: gradients of a small expression", "[lab2][eager]") {
  Var x(Tensor::from({1.0, 2.0, 3.0}), true);
  const Var y = sum(x * x * 3.0 + exp(x));
  y.backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(const auto g = x.grad().value().to_vector<double>();
                   for (int i = 0; i < 3; ++i) CHECK(g[static_cast<std::size_t>(i)] == Approx(6.0 * (i + 1) + std::exp(i + 1.0))));
}

TEST_CASE("eager: gradients accumulate across backward calls until zero_grad", "[lab2][eager]") {
  Var x(Tensor::scalar(3.0, DType::Float64), true);
  (x * x).backward();
  (x * x).backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(12.0)));
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  (x * 2.0).backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(2.0)));
}

TEST_CASE("eager: a value used twice sums its adjoints", "[lab2][eager]") {
  Var v1(Tensor::scalar(0.7, DType::Float64), true);
  const Var y = examples::exp_example(v1);
  y.backward();
  autodiff_test::observe_var("v1.grad", v1.grad());
  MLS_ORACLE_CHECK(CHECK(v1.grad().value().item() == Approx(2 * std::exp(1.4) + std::exp(0.7))));
}

TEST_CASE("eager: no_grad records nothing, leaves without requires_grad get no gradient", "[lab2][eager]") {
  Var x(Tensor::scalar(2.0), true), c(Tensor::scalar(5.0));
  Var y;
  {
    NoGradGuard ng;
    y = x * x;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(grad_enabled());
  const Var z = x * c;
  CHECK(z.requires_grad());
  CHECK_FALSE(c.requires_grad());
  z.backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(5.0)));
  // detach cuts the tape
  const Var d = (x * x).detach();
  CHECK_FALSE(d.requires_grad());
}

TEST_CASE("eager: non-scalar output with a grad_output (vector-Jacobian product)", "[lab2][eager]") {
  Var x(Tensor::from({1.0, 2.0}), true);
  const Var y = x * x;  // dy/dx = diag(2x)
  y.backward(Tensor::from({10.0, 100.0}));
  autodiff_test::observe_var("x.grad", x.grad(), {});
  MLS_ORACLE_CHECK(CHECK(x.grad().value().to_vector<double>() == std::vector<double>{20.0, 400.0}));
}

TEST_CASE("eager: retain_graph allows a second backward", "[lab2][eager]") {
  Var x(Tensor::scalar(2.0, DType::Float64), true);
  const Var y = sin(x) * x;
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(2 * (std::cos(2.0) * 2.0 + std::sin(2.0)))));
}

TEST_CASE("eager: second derivative with create_graph", "[lab2][eager]") {
  Var x(Tensor::from({0.5, -1.0, 2.0}), true);
  const Var y = sum(x * x * x + sin(x));
  y.backward({}, false, /*create_graph=*/true);
  const Var g = x.grad();  // 3x^2 + cos x, itself on the tape
  REQUIRE(g.requires_grad());
  x.zero_grad();
  sum(g).backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(const auto h = x.grad().value().to_vector<double>(); const std::vector<double> xs{0.5, -1.0, 2.0};
                   for (std::size_t i = 0; i < 3; ++i) CHECK(h[i] == Approx(6 * xs[i] - std::sin(xs[i]))));
}

TEST_CASE("eager: a deep chain does not overflow the stack", "[lab2][eager]") {
  Var x(Tensor::scalar(1.0, DType::Float64), true);
  Var y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0001;
  y.backward();
  autodiff_test::observe_var("x.grad", x.grad(), {2e-9, 0.0});
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(std::pow(1.0001, 20000)).epsilon(1e-9)));
}

TEST_CASE("eager errors: backward on a non-scalar without grad_output", "[lab2][errors]") {
  Var x(Tensor::from({1.0, 2.0}), true);
  sum(x * x).backward();  // a scalar is fine
  REQUIRE(x.grad().defined());
  autodiff_test::observe_var("x.grad", x.grad());
  require_error([&] { (x * x).backward(); }, "not a scalar");
  require_error([&] { (x * x).backward(Tensor::from({1.0, 2.0, 3.0})); }, "grad_output has shape [3]");
}

TEST_CASE("eager errors: gradient of a tensor that does not require one", "[lab2][errors]") {
  Var x(Tensor::scalar(1.0), true), c(Tensor::scalar(2.0));
  (x * c).backward();
  autodiff_test::observe_var("x.grad", x.grad());
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(2.0)));
  require_error([&] { (void)c.grad(); }, "does not require grad");
  require_error([&] { (c * c).backward(); }, "does not require grad");
  require_error([&] { Var(Tensor::from({1, 2}), true); }, "only floating");
}

TEST_CASE("eager errors: using a freed graph twice", "[lab2][errors]") {
  Var x(Tensor::scalar(2.0), true);
  const Var y = exp(x) * x;
  y.backward();
  autodiff_test::observe_var("x.grad", x.grad(), {2e-5, 0.0});
  MLS_ORACLE_CHECK(CHECK(x.grad().value().item() == Approx(3 * std::exp(2.0f)).epsilon(1e-5)));
  require_error([&] { y.backward(); }, "retain_graph");
}
