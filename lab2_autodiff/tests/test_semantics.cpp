// Regression tests for disagreements with PyTorch found by differential testing (the lab 2
// oracle, tests/oracle/): second derivatives of softmax_cross_entropy through soft targets.
#include <cmath>

#include "helpers.hpp"

using namespace mls;
using namespace mls::ad;
using lab2test::randn;
using lab2test::randu;

namespace {

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

}  // namespace

TEST_CASE("softmax_cross_entropy: Hessian-vector products through soft targets, eager and graph",
          "[lab2][opgrad]") {
  for (const Shape& s : {Shape{1, 3}, Shape{2, 4}}) {
    INFO("shape " << shape_str(s));
    const Tensor x0 = randn(s, 71), t0 = randu(s, 72, 0.1, 1.0);  // targets that do not sum to 1
    const Tensor vx = randn(s, 73), vt = randn(s, 74);
    const auto [hx, ht] = ce_hvp(x0, t0, vx, vt);

    // Eager: backward with create_graph, then the gradient of <g, v>.
    Var x(x0, true), t(t0, true);
    softmax_cross_entropy(x, t).backward({}, false, /*create_graph=*/true);
    const Var gx = x.grad(), gt = t.grad();
    x.zero_grad();
    t.zero_grad();
    (sum(gx * Var(vx)) + sum(gt * Var(vt))).backward();
    check_close(x.grad().value().to_vector<double>(), hx);
    check_close(t.grad().value().to_vector<double>(), ht);

    // Define-then-run: gradients of gradients.
    Graph g;
    const Var xp = g.placeholder("x", s, DType::Float64), tp = g.placeholder("t", s, DType::Float64);
    const std::vector<Var> d1 = gradients(softmax_cross_entropy(xp, tp), {xp, tp});
    const Var dot = sum(d1[0] * g.constant(vx)) + sum(d1[1] * g.constant(vt));
    const std::vector<Var> d2 = gradients(dot, {xp, tp});
    const std::vector<Tensor> r = Executor(g).run({d2[0], d2[1]}, {{xp, x0}, {tp, t0}});
    check_close(r[0].to_vector<double>(), hx);
    check_close(r[1].to_vector<double>(), ht);
  }
}

TEST_CASE("softmax_cross_entropy: first derivative with unnormalised soft targets", "[lab2][opgrad]") {
  const Tensor x = randn({3, 5}, 81), t = randu({3, 5}, 82, 0.0, 2.0);
  lab2test::check_grad([](const std::vector<Var>& v) { return softmax_cross_entropy(v[0], v[1]); }, {x, t});
}
