// Regression tests for disagreements with PyTorch found by differential testing (the lab 2
// oracle, tests/oracle/): second derivatives of softmax_cross_entropy through soft targets.
#include <cmath>
#include <functional>

#include "helpers.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::randn;
using autodiff_test::randu;

namespace {

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// The analytic Hessian-vector product of L(x, t) = mean_n -sum_c t[n,c] log softmax(x)[n,c]
/// along (vx, vt), with S_n = sum_c t[n,c] and p = softmax(x):
///   Hv_x = (S (p * vx - p <p, vx>) + p sum(vt) - vt) / N,   Hv_t = -(vx - <p, vx>) / N.
std::pair<std::vector<double>, std::vector<double>> ce_hvp(const Tensor& x, const Tensor& t, const Tensor& vx,
                                                           const Tensor& vt) {
  const std::int64_t n = x.shape()[0], c = x.shape()[1];
  std::vector<double> hx(static_cast<std::size_t>(n * c)), ht(hx.size());
  for (std::int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, z = 0, s = 0, pv = 0, svt = 0;
    for (std::int64_t j = 0; j < c; ++j) m = std::max(m, x.at({i, j}));
    for (std::int64_t j = 0; j < c; ++j) z += std::exp(x.at({i, j}) - m);
    std::vector<double> p(static_cast<std::size_t>(c));
    for (std::int64_t j = 0; j < c; ++j) {
      p[static_cast<std::size_t>(j)] = std::exp(x.at({i, j}) - m) / z;
      s += t.at({i, j});
      pv += p[static_cast<std::size_t>(j)] * vx.at({i, j});
      svt += vt.at({i, j});
    }
    for (std::int64_t j = 0; j < c; ++j) {
      const double pj = p[static_cast<std::size_t>(j)];
      const auto k = static_cast<std::size_t>(i * c + j);
      hx[k] = (s * (pj * vx.at({i, j}) - pj * pv) + pj * svt - vt.at({i, j})) / static_cast<double>(n);
      ht[k] = -(vx.at({i, j}) - pv) / static_cast<double>(n);
    }
  }
  return {hx, ht};
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
}
#endif  // MLS_GRADED_BUILD

void observe_hvp(const std::string& label, const std::vector<double>& got) {
  mls::testing::observe(label, got, {2.4e-5, 2e-12});  // Approx(want).margin(1e-12), on both sides
}

}  // namespace

TEST_CASE("softmax_cross_entropy: Hessian-vector products through soft targets, eager and graph",
          "[lab2][opgrad]") {
  for (const Shape& s : {Shape{1, 3}, Shape{2, 4}}) {
    INFO("shape " << shape_str(s));
    const Tensor x0 = randn(s, 71), t0 = randu(s, 72, 0.1, 1.0);  // targets that do not sum to 1
    const Tensor vx = randn(s, 73), vt = randn(s, 74);

    // Eager: backward with create_graph, then the gradient of <g, v>.
    Var x(x0, true), t(t0, true);
    softmax_cross_entropy(x, t).backward({}, false, /*create_graph=*/true);
    const Var gx = x.grad(), gt = t.grad();
    x.zero_grad();
    t.zero_grad();
    (sum(gx * Var(vx)) + sum(gt * Var(vt))).backward();
    const std::vector<double> eager_x = x.grad().value().to_vector<double>(), eager_t = t.grad().value().to_vector<double>();
    observe_hvp("softmax_cross_entropy(x, t) Hessian-vector product, eager, d/dx, shape " + shape_str(s), eager_x);
    observe_hvp("softmax_cross_entropy(x, t) Hessian-vector product, eager, d/dt, shape " + shape_str(s), eager_t);

    // Define-then-run: gradients of gradients.
    Graph g;
    const Var xp = g.placeholder("x", s, DType::Float64), tp = g.placeholder("t", s, DType::Float64);
    const std::vector<Var> d1 = gradients(softmax_cross_entropy(xp, tp), {xp, tp});
    const Var dot = sum(d1[0] * g.constant(vx)) + sum(d1[1] * g.constant(vt));
    const std::vector<Var> d2 = gradients(dot, {xp, tp});
    const std::vector<Tensor> r = Executor(g).run({d2[0], d2[1]}, {{xp, x0}, {tp, t0}});
    const std::vector<double> graph_x = r[0].to_vector<double>(), graph_t = r[1].to_vector<double>();
    observe_hvp("softmax_cross_entropy(x, t) Hessian-vector product, graph, d/dx, shape " + shape_str(s), graph_x);
    observe_hvp("softmax_cross_entropy(x, t) Hessian-vector product, graph, d/dt, shape " + shape_str(s), graph_t);
    MLS_ORACLE(const auto [hx, ht] = ce_hvp(x0, t0, vx, vt);)
    MLS_ORACLE_CHECK(check_close(eager_x, hx); check_close(eager_t, ht); check_close(graph_x, hx); check_close(graph_t, ht));
  }
}

TEST_CASE("softmax_cross_entropy: first derivative with unnormalised soft targets", "[lab2][opgrad]") {
  const Tensor x = randn({3, 5}, 81), t = randu({3, 5}, 82, 0.0, 2.0);
  autodiff_test::check_grad([](const std::vector<Var>& v) { return softmax_cross_entropy(v[0], v[1]); }, {x, t});
}

// ---- forward mode for the ops that had no rule ---------------------------------------------------
namespace {

using Fn = std::function<std::vector<Var>(const std::vector<Var>&)>;

/// J·u from jvp() against central differences (float64, h = 1e-6) and, through <w, J u> =
/// <J^T w, u>, against reverse mode. `fd` = false skips the differences (at ties, where the
/// function has no derivative and both modes take the mean of the one-sided ones).
void check_jvp(const Fn& f, const std::vector<Tensor>& xs, std::uint64_t seed, bool fd = true) {
  std::vector<Tensor> us;
  for (std::size_t i = 0; i < xs.size(); ++i) us.push_back(randn(xs[i].shape(), seed + i));
  const JvpResult r = jvp(f, xs, us);
  const Tensor ju = r.tangents.at(0);
  mls::testing::observe_values("J u", ju, {2e-5, 2e-6});  // allclose(ju, diff, 1e-5, 1e-6), on both sides
  // Oracle 1: central differences of f.
  MLS_ORACLE_CHECK(auto eval = [&](double h) {
    std::vector<Var> in;
    for (std::size_t i = 0; i < xs.size(); ++i) in.emplace_back(mls::add(xs[i], mls::mul(us[i], h)));
    return f(in).at(0).value();
  }; if (fd) {
    const double h = 1e-6;
    const Tensor diff = mls::div(mls::sub(eval(h), eval(-h)), 2 * h);
    INFO("J u " << ju << "\nfinite differences " << diff);
    CHECK(mls::allclose(ju, diff, 1e-5, 1e-6));
  });
  std::vector<Var> leaves;
  for (const Tensor& x : xs) leaves.emplace_back(x, true);
  const Var y = f(leaves).at(0);
  const Tensor w = randn(y.shape(), seed + 100);
  const double lhs = mls::sum(mls::mul(ju, w)).item();
  MLS_OBSERVE(lhs, {1e-9, 1e-11});
  // Oracle 2: reverse mode, <J^T w, u>.
  MLS_ORACLE(sum(y * Var(w)).backward(); double rhs = 0.0; for (std::size_t i = 0; i < xs.size(); ++i) {
    if (leaves[i].grad().defined()) rhs += mls::sum(mls::mul(leaves[i].grad().value(), us[i])).item();
  })
  MLS_ORACLE_CHECK(CHECK(lhs == Approx(rhs).epsilon(1e-10).margin(1e-12)));
}

}  // namespace

TEST_CASE("jvp: gelu, maximum and minimum against differences and reverse mode", "[lab2][forward]") {
  const Tensor a = randn({3, 4}, 201), b = randn({4}, 202);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{gelu(v[0])}; }, {a}, 1);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{maximum(v[0], v[1])}; }, {a, b}, 2);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{minimum(v[0], v[1])}; }, {a, b}, 3);
  // Ties: both modes split half and half.
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{maximum(v[0], v[0] * 1.0)}; }, {a}, 4, false);
}

TEST_CASE("jvp: max and min over axes, with and without ties", "[lab2][forward]") {
  const Tensor x = randn({2, 3, 4}, 211);
  for (bool keep : {false, true}) {
    for (const std::vector<std::int64_t>& axes : std::vector<std::vector<std::int64_t>>{{}, {0}, {2}, {0, 2}, {-1}}) {
      INFO("axes " << shape_str(axes) << " keepdim " << keep);
      check_jvp([&](const std::vector<Var>& v) { return std::vector<Var>{max(v[0], axes, keep)}; }, {x}, 5);
      check_jvp([&](const std::vector<Var>& v) { return std::vector<Var>{min(v[0], axes, keep)}; }, {x}, 6);
    }
  }
  const Tensor ties = Tensor::from({1.0, 3.0, 3.0, -2.0, -2.0, 0.5}, {2, 3});
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{max(v[0], {1})}; }, {ties}, 7, false);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{min(v[0])}; }, {ties}, 8, false);
}

TEST_CASE("jvp: the fused losses (softmax_cross_entropy with both target kinds, mse)", "[lab2][forward]") {
  const Tensor x = randn({3, 5}, 221), t = randu({3, 5}, 222, 0.0, 1.0);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{softmax_cross_entropy(v[0], v[1])}; }, {x, t}, 9);
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{4, 0, 2});
  check_jvp([&](const std::vector<Var>& v) {
    return std::vector<Var>{softmax_cross_entropy(v[0], constant_like(v[0], idx))};
  }, {x}, 10);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{mse_loss(v[0], v[1])}; }, {x, t}, 11);
}

TEST_CASE("jvp: layer_norm and batch_norm (training and inference)", "[lab2][forward]") {
  const Tensor x = randn({4, 3}, 231), x4 = randn({2, 3, 2, 2}, 232);
  const Tensor g = randu({3}, 233, 0.5, 1.5), b = randn({3}, 234);
  check_jvp([](const std::vector<Var>& v) { return std::vector<Var>{layer_norm(v[0], v[1], v[2])}; }, {x, g, b}, 12);
  for (bool training : {true, false}) {
    INFO("training " << training);
    for (const Tensor& in : {x, x4}) {
      check_jvp([&](const std::vector<Var>& v) {
        const Var rm = constant_like(v[0], randn({3}, 235)), rv = constant_like(v[0], randu({3}, 236, 0.5, 2.0));
        return std::vector<Var>{batch_norm(v[0], v[1], v[2], rm, rv, training)};
      }, {in, g, b}, 13);
    }
  }
}
