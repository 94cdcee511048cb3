// The fused paths of the eager training step: relu_backward (relu's adjoint in one pass), the
// one-pass plain SGD update, and a whole MLP step against a float64 backward written by hand.
#include "helpers.hpp"

#include <cmath>
#include <limits>

#include "mls/common/parallel.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::check_grad;
using autodiff_test::randn;
using autodiff_test::require_error;
using V = std::vector<Var>;

namespace autodiff_test {

/// Random float32 tensor N(0, 1).
Tensor randn32(const Shape& s, std::uint64_t seed) {
  Rng rng(seed, "lab2-fused-test");
  return Tensor::randn(s, rng, 0.0, 1.0, DType::Float32);
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// The unfused rule relu_backward replaces: g * (x > 0) as three lab 1 passes.
Tensor unfused_relu_backward(const Tensor& g, const Tensor& x) { return mls::mul(g, mls::gt(x, 0.0).to(g.dtype())); }
#endif  // MLS_GRADED_BUILD

}  // namespace autodiff_test

TEST_CASE("relu_backward: relu's gradient in one pass equals the unfused g times mask on random float32, dense and "
          "strided, 1 and 2 threads",
          "[lab2][opgrad]") {
  using autodiff_test::randn32;
  // 300 x 129 = 38700 values: more than one thread's grain, and not a multiple of any vector width.
  for (const Shape& s : {Shape{300, 129}, Shape{7, 13}, Shape{1}, Shape{0, 5}}) {
    for (int threads : {1, 2}) {
      INFO("shape " << shape_str(s) << ", " << threads << " threads");
      ThreadCountGuard guard(threads);
      const Tensor g = randn32(s, 1), x = randn32(s, 2);
      Var xv(x, true);
      relu(xv).backward(g);  // relu's rule: relu_backward
      mls::testing::observe("relu grad", xv.grad().value());
      MLS_ORACLE_CHECK(CHECK(equal(xv.grad().value(), autodiff_test::unfused_relu_backward(g, x))));
      const Tensor got = relu_backward(Var(g), Var(x)).value();
      mls::testing::observe("relu_backward", got);
      MLS_ORACLE_CHECK(CHECK(got.dtype() == DType::Float32); CHECK(equal(got, autodiff_test::unfused_relu_backward(g, x))));
    }
  }
  // x exactly 0 passes no gradient (relu'(0) = 0), like the unfused rule.
  const Tensor g = Tensor::from({1.5, -2.0, 3.0, 4.0}).to(DType::Float32);
  const Tensor x = Tensor::from({0.0, -0.0, 1e-30, -1e-30}).to(DType::Float32);
  const Tensor got = relu_backward(Var(g), Var(x)).value();
  mls::testing::observe("relu_backward(g, x) at x = 0, -0, 1e-30, -1e-30", got);
  MLS_ORACLE_CHECK(CHECK(equal(got, Tensor::from({0.0, 0.0, 3.0, 0.0}).to(DType::Float32))));
  // Strided (transposed) and broadcast operands take lab 1's general path, with the same values.
  const Tensor gt = randn32({9, 6}, 3).transpose(), xt = randn32({6, 9}, 4);
  const Tensor strided = relu_backward(Var(gt), Var(xt)).value();
  MLS_OBSERVE(strided);
  MLS_ORACLE_CHECK(CHECK(equal(strided, autodiff_test::unfused_relu_backward(gt, xt))));
  const Tensor gb = randn32({9}, 5);
  const Tensor bcast = relu_backward(Var(gb), Var(xt)).value();
  MLS_OBSERVE(bcast);
  MLS_ORACLE_CHECK(CHECK(bcast.shape() == Shape{6, 9}); CHECK(equal(bcast, autodiff_test::unfused_relu_backward(gb, xt))));
}

TEST_CASE("relu_backward: gradcheck in eager and graph mode, relu's second derivative, forward mode",
          "[lab2][opgrad]") {
  // x away from 0 (the mask's kink): the numeric derivative in x is then exactly 0.
  const Tensor x = mls::add(randn({3, 4}, 41), mls::mul(mls::gt(randn({3, 4}, 42), 0.0).to(DType::Float64), 0.5));
  const Tensor g = randn({3, 4}, 43);
  check_grad([](const V& v) { return relu_backward(v[0], v[1]); }, {g, x});
  check_grad([](const V& v) { return relu_backward(v[0], v[1]); }, {randn({4}, 44), x});  // g broadcast
  // relu's gradient is relu_backward; differentiating it again runs relu_backward's own rule:
  // y = sum(relu(x)^2): dy/dx = relu_backward(2 relu(x), x) = 2 relu(x), and the sum of that has
  // the gradient 2 (x > 0).
  Var xv(x, true);
  sum(relu(xv) * relu(xv)).backward({}, false, /*create_graph=*/true);
  const Var first = xv.grad();
  REQUIRE(first.requires_grad());
  mls::testing::observe_values("first", first.value());
  MLS_ORACLE_CHECK(CHECK(equal(first.value(), mls::mul(mls::relu(x), 2.0))));
  xv.zero_grad();
  sum(first).backward();
  mls::testing::observe("d2", xv.grad().value());
  MLS_ORACLE_CHECK(CHECK(equal(xv.grad().value(), mls::mul(mls::gt(x, 0.0).to(DType::Float64), 2.0))));
  // Forward mode: the tangent of relu_backward(g, x) in g is relu_backward(tg, x).
  const Tensor tg = randn({3, 4}, 46);
  const JvpResult r = jvp([](const V& v) { return V{relu_backward(v[0], v[1])}; }, {g, x}, {tg, randn({3, 4}, 47)});
  mls::testing::observe("jvp tangent", r.tangents[0]);
  MLS_ORACLE_CHECK(CHECK(allclose(r.tangents[0], autodiff_test::unfused_relu_backward(tg, x))));
}

TEST_CASE("relu_backward errors: shapes that do not broadcast", "[lab2][errors]") {
  const Tensor g = autodiff_test::randn32({3, 4}, 1), x = autodiff_test::randn32({5}, 2);
  Var gv(g, true);
  sum(relu(gv)).backward();  // the rule that uses relu_backward
  MLS_OBSERVE(gv.grad().value());
  MLS_ORACLE_CHECK(CHECK(equal(gv.grad().value(), mls::gt(g, 0.0).to(DType::Float32))));
  MLS_OBSERVE(relu_backward(Var(g), Var(autodiff_test::randn32({4}, 3))).shape());
  require_error([&] { (void)relu_backward(Var(g), Var(x)); }, "relu_backward: cannot broadcast shapes [3, 4] and [5]");
  Graph gr;
  const Var a = gr.placeholder("g", {-1, 4}), b = gr.placeholder("x", {5});
  require_error([&] { (void)relu_backward(a, b); }, "relu_backward: cannot broadcast shapes [-1, 4] and [5]");
}

TEST_CASE("nn: plain SGD on float32 is one pass with the roundings of p - lr g, 1 and 2 threads", "[lab2][nn]") {
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    ThreadCountGuard guard(threads);
    const Tensor p0 = autodiff_test::randn32({300, 129}, 7), w = autodiff_test::randn32({300, 129}, 8);
    const Tensor b0 = autodiff_test::randn32({129}, 9);
    nn::Parameter p = nn::parameter(p0.clone()), b = nn::parameter(b0.clone());
    nn::SGD opt({p, b}, 0.01);
    opt.zero_grad();
    sum(p * Var(w) + b).backward();  // dp = w, db = 300 per element
    opt.step();
    mls::testing::observe("p", p.value());
    mls::testing::observe_values("b", b.value());
    MLS_ORACLE_CHECK(CHECK(equal(p.value(), mls::sub(p0, mls::mul(w, 0.01))));
                     CHECK(equal(b.value(), mls::sub(b0, mls::mul(Tensor::full({129}, 300.0, DType::Float32), 0.01)))));
  }
}

TEST_CASE("nn: an MLP training step's gradients match a float64 backward written by hand", "[lab2][nn]") {
  // 13-33-17-5, batch 9: relu_backward (fused) in both hidden layers, bias sums, the softmax
  // cross-entropy; the reference computes every adjoint with lab 1 ops in float64.
  Rng rng(11, "lab2-fused-mlp");
  auto net = nn::mlp({13, 33, 17, 5}, rng);
  const std::vector<nn::Parameter> ps = net->parameters();  // W1 b1 W2 b2 W3 b3
  MLS_OBSERVE(ps.size());
  MLS_ORACLE_CHECK(REQUIRE(ps.size() == 6));
  for (std::size_t i = 1; i < ps.size(); i += 2) ps[i].get()->value.copy_(autodiff_test::randn32(ps[i].shape(), 20 + i));
  const Tensor x = autodiff_test::randn32({9, 13}, 12);
  const Tensor y = Tensor::from({0.0, 4.0, 2.0, 1.0, 3.0, 3.0, 0.0, 2.0, 4.0}).to(DType::Int64);
  const Var loss = softmax_cross_entropy((*net)(Var(x)), Var(y));
  loss.backward();
  std::vector<Tensor> got;
  for (const nn::Parameter& p : ps) {
    got.push_back(p.grad().value());
    mls::testing::observe("grad", got.back(), {1e-4, 1e-6});
  }

  // The oracle, after the code under test ran: every adjoint with lab 1 ops in float64.
  MLS_ORACLE(auto d64 = [](const Tensor& t) { return t.to(DType::Float64); }; std::vector<Tensor> W, b;
             for (std::size_t i = 0; i < 6; i += 2) {
               W.push_back(d64(ps[i].value()));
               b.push_back(d64(ps[i + 1].value()));
             }
             const Tensor x64 = d64(x);
             const Tensor z1 = mls::add(mls::matmul(x64, W[0]), b[0]), h1 = mls::relu(z1);
             const Tensor z2 = mls::add(mls::matmul(h1, W[1]), b[1]), h2 = mls::relu(z2);
             const Tensor z3 = mls::add(mls::matmul(h2, W[2]), b[2]);
             Tensor d3 = mls::softmax(z3, 1);  // (softmax - one_hot) / N
             for (std::int64_t n = 0; n < 9; ++n) {
               const auto k = static_cast<std::int64_t>(y.at({n}));
               d3.set({n, k}, d3.at({n, k}) - 1.0);
             }
             d3 = mls::div(d3, 9.0);
             const Tensor dz2 = mls::mul(mls::matmul(d3, W[2].transpose()), mls::gt(z2, 0.0).to(DType::Float64));
             const Tensor dz1 = mls::mul(mls::matmul(dz2, W[1].transpose()), mls::gt(z1, 0.0).to(DType::Float64));
             const std::vector<Tensor> want = {mls::matmul(x64.transpose(), dz1), mls::sum(dz1, {0}),
                                               mls::matmul(h1.transpose(), dz2), mls::sum(dz2, {0}),
                                               mls::matmul(h2.transpose(), d3),  mls::sum(d3, {0})};)
  MLS_ORACLE_CHECK(for (std::size_t i = 0; i < 6; ++i) {
    INFO("parameter " << i);
    CHECK(got[i].dtype() == DType::Float32);
    CHECK(allclose(d64(got[i]), want[i], 1e-4, 1e-6));
  });
}

TEST_CASE("softmax_cross_entropy: the one-pass float32 forward equals the unfused -log_softmax, its gradient softmax - "
          "one_hot, widths 1 to 1000, 1 and 2 threads",
          "[lab2][nn]") {
  // Unfused reference (the oracle): lab 1's log_softmax (float32), the target's entry picked, negated.
  MLS_ORACLE(auto unfused = [](const Tensor& x, const std::vector<std::int64_t>& t) {
    const Tensor ls = mls::log_softmax(x, 1);
    std::vector<double> r;
    for (std::size_t i = 0; i < t.size(); ++i) r.push_back(-ls.at({static_cast<std::int64_t>(i), t[i]}));
    return r;
  };)
  MLS_ORACLE(auto same = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::abs(a - b) <= 4e-6 * (1.0 + std::abs(b));  // float32 roundings of a sum of c exps
  };)
  Rng rng(31, "lab2-fused-ce");
  // 40 x 1000 = 40000 logits: more than one thread's grain.
  for (const auto& [n, c] : std::vector<std::pair<std::int64_t, std::int64_t>>{{128, 10}, {5, 1}, {7, 16}, {9, 17}, {40, 1000}}) {
    for (int threads : {1, 2}) {
      INFO(n << " x " << c << ", " << threads << " threads");
      ThreadCountGuard guard(threads);
      const Tensor x = mls::mul(autodiff_test::randn32({n, c}, static_cast<std::uint64_t>(n * c)), 3.0);
      std::vector<std::int64_t> t;
      for (std::int64_t i = 0; i < n; ++i) t.push_back(rng.randint(0, c));
      Var xv(x, true);
      const Var loss = softmax_cross_entropy(xv, Var(Tensor::from_vector(t)));  // mean over the batch
      loss.backward();
      mls::testing::observe("dlogits", xv.grad().value(), {1e-5, 1e-7});
      MLS_ORACLE(Tensor dx = mls::softmax(x, 1);  // (softmax - one_hot) / n
                 for (std::int64_t i = 0; i < n; ++i) {
                   dx.set({i, t[static_cast<std::size_t>(i)]}, dx.at({i, t[static_cast<std::size_t>(i)]}) - 1.0);
                 }
                 dx = mls::div(dx, static_cast<double>(n));)
      MLS_ORACLE_CHECK(CHECK(allclose(xv.grad().value(), dx, 1e-5, 1e-7)));
      const Tensor got = loss.value();
      mls::testing::observe_values("loss", got, {2e-5, 1e-9});
      const Tensor rows = apply(Op::SoftmaxCrossEntropy, {Var(x), Var(Tensor::from_vector(t))}).value();
      mls::testing::observe("loss rows", rows, {1e-5, 1e-6});
      MLS_ORACLE(const std::vector<double> want = unfused(x, t);)
      MLS_ORACLE_CHECK(const auto have = rows.to_vector<double>(); for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("row " << i);
        CHECK(same(have[i], want[i]));
      } double mean = 0.0;
                       for (double v : want) mean += v;
                       CHECK(got.item() == Approx(mean / static_cast<double>(n)).epsilon(1e-5)));
    }
  }
  // Rows with infinities and NaN give what the unfused formula gives (inf, or NaN for inf - inf).
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor xs = Tensor::from({-inf, -inf, inf, 0.0, inf, 0.0, nan, 1.0, 1e30, -1e30}).reshape({5, 2}).to(DType::Float32);
  const std::vector<std::int64_t> ts{0, 1, 0, 1, 1};
  const auto have = apply(Op::SoftmaxCrossEntropy, {Var(xs), Var(Tensor::from_vector(ts))}).value().to_vector<double>();
  mls::testing::observe("special rows", have);
  MLS_ORACLE(const std::vector<double> want = unfused(xs, ts);)
  MLS_ORACLE_CHECK(for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("special row " << i << ": " << have[i] << " vs " << want[i]);
    CHECK(same(have[i], want[i]));
  });
}
