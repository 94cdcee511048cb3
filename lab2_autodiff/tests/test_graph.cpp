// Define-then-run: graphs, the executor, gradients() as graph construction.
#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::randn;
using autodiff_test::require_error;

TEST_CASE("graph: shapes are inferred, -1 for the batch", "[lab2][graph]") {
  Graph g;
  const Var x = g.placeholder("x", {-1, 784});
  const Var w = g.variable("W", Tensor::zeros({784, 10}));
  const Var b = g.variable("b", Tensor::zeros({10}));
  const Var y = softmax(matmul(x, w) + b);
  MLS_OBSERVE(y.shape());
  MLS_OBSERVE(sum(y, {1}).shape());
  MLS_OBSERVE(transpose(y).shape());
  MLS_OBSERVE(reshape(w, {-1, 20}).shape());
  MLS_ORACLE_CHECK(CHECK(y.shape() == Shape{-1, 10}); CHECK(sum(y, {1}).shape() == Shape{-1});
                   CHECK(transpose(y).shape() == Shape{10, -1}); CHECK(reshape(w, {-1, 20}).shape() == Shape{392, 20}));
  MLS_CHECK_EQ(mean(y, {0}, true).shape(), (Shape{1, 10}));
  MLS_CHECK_EQ(conv2d(g.placeholder("img", {-1, 3, 8, 8}), g.variable("k", Tensor::zeros({4, 3, 3, 3})), 1, 1).shape(),
               (Shape{-1, 4, 8, 8}));
  const Var dw = gradients(sum(y), {w})[0];
  MLS_CHECK_EQ(dw.shape(), (Shape{784, 10}));
  const auto out = Executor(g).run({y, dw}, {{x, Tensor::ones({3, 784})}});
  mls::testing::observe_values("y", out[0], autodiff_test::kAllclose);
  mls::testing::observe_values("dw", out[1], {2e-5, 2e-6});
  MLS_ORACLE_CHECK(CHECK(out[0].shape() == Shape{3, 10}); CHECK(allclose(out[0], Tensor::full({3, 10}, 0.1f)));
                   CHECK(allclose(out[1], Tensor::zeros({784, 10}), 1e-5, 1e-6)));
}

TEST_CASE("graph: gradients are nodes of the same graph, the forward nodes are unchanged", "[lab2][graph]") {
  Graph g;
  const Var x = g.placeholder("x", {3}, DType::Float64);
  const Var y = sum(tanh(x) * x);
  const std::size_t before = g.size();
  const Var dx = gradients(y, {x})[0];
  CHECK(g.size() > before);
  CHECK(g.num_backward() == g.size() - before);
  CHECK(dx.is_backward());
  CHECK_FALSE(y.is_backward());
  const Tensor xv = Tensor::from({0.1, -0.4, 1.3});
  const Tensor got = Executor(g).run({dx}, {{x, xv}})[0];
  mls::testing::observe_values("dx", got, autodiff_test::kAllclose);
  MLS_ORACLE(const Tensor t = mls::tanh(xv);)  // d/dx x tanh x = tanh x + x (1 - tanh^2 x)
  MLS_ORACLE_CHECK(CHECK(allclose(got, mls::add(t, mls::mul(xv, 1.0 - mls::mul(t, t))))));
}

TEST_CASE("graph: second derivatives via gradients of gradients", "[lab2][graph]") {
  Graph g;
  const Var x = g.placeholder("x", {4}, DType::Float64);
  const Var y = sum(x * x * x + sin(x));
  const Var dx = gradients(y, {x})[0];
  const Var d2x = gradients(sum(dx), {x})[0];
  const Tensor xv = Tensor::from({0.5, -1.0, 2.0, 0.0});
  const auto out = Executor(g).run({dx, d2x}, {{x, xv}});
  mls::testing::observe_values("dx", out[0], autodiff_test::kAllclose);
  mls::testing::observe_values("d2x", out[1], autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(allclose(out[0], mls::add(mls::mul(mls::mul(xv, xv), 3.0), mls::cos(xv))));
                   CHECK(allclose(out[1], mls::sub(mls::mul(xv, 6.0), mls::sin(xv)))));
}

TEST_CASE("graph: Hessian-vector products match finite differences of the gradient", "[lab2][graph]") {
  // For each f: H v from gradients(sum(grad f * v)) against (grad f(x + h v) - grad f(x - h v)) / 2h.
  using F = std::function<Var(const Var&)>;
  const std::vector<std::pair<const char*, F>> fs = {
      {"tanh", [](const Var& x) { return sum(tanh(x) * x); }},
      {"sigmoid*exp", [](const Var& x) { return sum(sigmoid(x) * exp(x * 0.5)); }},
      {"softmax", [](const Var& x) { return sum(softmax(x, 1) * softmax(x * 2.0, 1)); }},
      {"log_softmax", [](const Var& x) { return sum(log_softmax(x, 0) * x); }},
      {"logsumexp", [](const Var& x) { return sum(logsumexp(x, 1) * logsumexp(x, 1)); }},
      {"matmul", [](const Var& x) { return sum(matmul(x, transpose(x)) * matmul(x, transpose(x))); }},
      {"gelu", [](const Var& x) { return sum(gelu(x)); }},
      {"div", [](const Var& x) { return sum(x / (x * x + 1.0)); }},
      {"mean", [](const Var& x) { return sum(mean(x * x, {0}) * mean(x, {0})); }},
  };
  const Tensor xv = randn({3, 4}, 5), v = randn({3, 4}, 6);
  const double h = std::cbrt(std::numeric_limits<double>::epsilon());
  for (const auto& [name, f] : fs) {
    INFO(name);
    Graph g;
    const Var x = g.placeholder("x", {3, 4}, DType::Float64);
    const Var gx = gradients(f(x), {x})[0];
    const Var hv = gradients(sum(gx * g.constant(v)), {x})[0];
    Executor ex(g);
    const Tensor got = ex.run({hv}, {{x, xv}})[0];
    mls::testing::observe_values("Hv", got, {2e-6, 2e-6});
    // The oracle: central differences of the gradient along v.
    MLS_ORACLE(const Tensor up = ex.run({gx}, {{x, mls::add(xv, mls::mul(v, h))}})[0];
               const Tensor down = ex.run({gx}, {{x, mls::sub(xv, mls::mul(v, h))}})[0];
               const Tensor num = mls::div(mls::sub(up, down), 2 * h);)
    MLS_ORACLE_CHECK(CHECK(allclose(got, num, 1e-6, 1e-6)));
  }
}

TEST_CASE("graph: variables, assign and a training loop", "[lab2][graph]") {
  Graph g;
  const Var w = g.variable("w", Tensor::scalar(0.0, DType::Float64));
  const Var target = g.constant(Tensor::scalar(3.0, DType::Float64));
  const Var loss = (w - target) * (w - target);
  const Var step = g.assign(w, w - gradients(loss, {w})[0] * 0.25);
  Executor ex(g);
  for (int i = 0; i < 30; ++i) ex.run({step});
  mls::testing::observe_values("w", w.get()->value, {0.0, 2e-6});
  MLS_ORACLE_CHECK(CHECK(w.get()->value.item() == Approx(3.0).margin(1e-6)));
}

TEST_CASE("graph: gradient of an unrelated variable is zeros, topo_sort orders inputs first", "[lab2][graph]") {
  Graph g;
  const Var a = g.placeholder("a", {2}), b = g.placeholder("b", {2});
  const Var y = sum(exp(a));
  const auto grads = gradients(y, {a, b});
  const auto out = Executor(g).run({grads[1]}, {{b, Tensor::ones({2})}});
  mls::testing::observe_values("d/db", out[0], autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(allclose(out[0], Tensor::zeros({2}))));
  const std::vector<Var> outs{y};
  const auto order = topo_sort(outs);
  MLS_OBSERVE(order.size());
  std::string ops;  // the order as op names (what the node pointers checked below stand for)
  for (const Node* n : order) ops += std::string(ops.empty() ? "" : " ") + (n ? op_name(n->op) : "null");
  MLS_OBSERVE(ops);
  MLS_ORACLE_CHECK(REQUIRE(order.size() == 3); CHECK(order.front() == a.get()); CHECK(order.back() == y.get()));
}

TEST_CASE("graph: prune and replace_all_uses (rewriting for lab 3)", "[lab2][graph]") {
  Graph g;
  const Var x = g.placeholder("x", {2}, DType::Float64);
  const Var y = exp(x) + sin(x);
  (void)cos(x);  // dead
  const std::size_t pruned = g.prune({y});
  MLS_OBSERVE(pruned);
  MLS_ORACLE_CHECK(CHECK(pruned == 1));
  const Var z = g.constant(Tensor::from({0.0, 0.0}));
  const std::size_t replaced = g.replace_all_uses(x, z);
  MLS_OBSERVE(replaced);
  MLS_ORACLE_CHECK(CHECK(replaced == 2));
  const Tensor yv = Executor(g).run({y})[0];
  mls::testing::observe_values("y", yv, autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(yv.to_vector<double>() == std::vector<double>{1.0, 1.0}));
}

TEST_CASE("graph errors: feeds with the wrong shape or dtype, missing feeds", "[lab2][errors]") {
  Graph g;
  const Var x = g.placeholder("x", {-1, 3});
  const Var y = sum(x * x);
  const Var dx = gradients(y, {x})[0];
  Executor ex(g);
  const Tensor dxv = ex.run({dx}, {{x, Tensor::ones({2, 3})}})[0];
  mls::testing::observe_values("dx", dxv, autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(dxv.shape() == Shape{2, 3}));
  require_error([&] { ex.run({y}, {{x, Tensor::ones({2, 4})}}); }, "placeholder 'x' expects float32 [-1, 3], fed float32 [2, 4]");
  require_error([&] { ex.run({y}, {{x, Tensor::ones({2, 3}, DType::Float64)}}); }, "fed float64");
  require_error([&] { ex.run({y}); }, "placeholder 'x'");
  require_error([&] { ex.run({y}); }, "not fed");
}

TEST_CASE("graph errors: a cycle, mixing graphs, bad shapes at build time", "[lab2][errors]") {
  Graph g;
  const Var x = g.placeholder("x", {2});
  const Var a = exp(x);
  const Var b = sin(a);
  const Tensor bv = Executor(g).run({b}, {{x, Tensor::ones({2})}})[0];
  mls::testing::observe_values("b", bv, autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(bv.shape() == Shape{2}));
  g.set_input(a, 0, b);  // a = exp(b), b = sin(a)
  require_error([&] { Executor(g).run({b}, {{x, Tensor::ones({2})}}); }, "cycle");
  g.set_input(a, 0, x);  // break the cycle again: its shared edges would otherwise never be freed

  Graph other;
  const Var z = other.placeholder("z", {2});
  require_error([&] { (void)(x + z); }, "different graphs");
  require_error([&] { (void)(x + Var(Tensor::ones({2}))); }, "cannot mix");
  require_error([&] { (void)matmul(g.placeholder("m", {2, 3}), g.placeholder("n", {4, 5})); }, "inner dimensions");
  require_error([&] { (void)(x + g.placeholder("q", {3})); }, "cannot broadcast shapes [2] and [3]");
  require_error([&] { (void)gradients(Var(Tensor::ones({1}), true), {x}); }, "graph node");
}
