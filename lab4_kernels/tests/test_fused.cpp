// Lab 4: fused CPU kernels against double-precision naive references.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mls/kernels/fused.hpp"
#include "mls/observe.hpp"
#include "reference.hpp"

using kernels_test::random_vec;

namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon();

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
}  // namespace

TEST_CASE("fast_expf is within a few ulp of exp", "[lab4][fused][exp]") {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.01234) {
    const double got = mls::kernels::fast_expf(static_cast<float>(x));
    // exp of the float-rounded argument; relative error bound of a few float ulp.
    const double want_f = std::exp(static_cast<double>(static_cast<float>(x)));
    worst = std::max(worst, std::fabs(got - want_f) / want_f);
  }
  {  // values on a coarse grid, each build within 4 ulp of exp
    std::vector<float> xs, ys;
    for (double x = -87.0; x <= 88.0; x += 1.234) xs.push_back(static_cast<float>(x));
    for (float x : xs) ys.push_back(mls::kernels::fast_expf(x));
    mls::testing::observe("fast_expf on a grid", ys, {8 * kEps, 0.0});
    mls::testing::observe("fast_expf(-1000), (1000), (NaN)", std::vector<float>{mls::kernels::fast_expf(-1000.0f),
        mls::kernels::fast_expf(1000.0f), mls::kernels::fast_expf(std::numeric_limits<float>::quiet_NaN())}, {0.0, 2e-37});
  }
  CHECK(worst <= 4 * kEps);
  CHECK(mls::kernels::fast_expf(-1000.0f) >= 0.0f);
  CHECK(mls::kernels::fast_expf(-1000.0f) < 1e-37f);
  // Like std::exp: overflow is +inf, NaN stays NaN (softmax shifts by the max, so never overflows).
  CHECK(std::isinf(mls::kernels::fast_expf(1000.0f)));
  CHECK(std::isnan(mls::kernels::fast_expf(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fused E = D + (A + B) * C matches the three-pass version", "[lab4][fused][elementwise]") {
  for (long n : {0L, 1L, 7L, 33L, 1000L, 4099L}) {
    const auto A = random_vec(n, 1, "A"), B = random_vec(n, 1, "B"), C = random_vec(n, 1, "C"),
               D = random_vec(n, 1, "D");
    std::vector<float> E(n);
    mls::kernels::fused_add_mul_add(n, A.data(), B.data(), C.data(), D.data(), E.data());
    mls::testing::observe("E", E, {0.0, 2 * 3 * 3 * kEps});
    for (long i = 0; i < n; ++i) {
      const double want = static_cast<double>(D[i]) + (static_cast<double>(A[i]) + B[i]) * C[i];
      // three roundings of values of magnitude <= 3
      CHECK(std::fabs(E[i] - want) <= 3 * 3 * kEps);
    }
  }
}

TEST_CASE("softmax rows sum to 1 and match the reference", "[lab4][fused][softmax]") {
  for (auto [rows, cols] : {std::pair{1L, 1L}, {3L, 7L}, {5L, 33L}, {17L, 1000L}, {2L, 4097L}}) {
    auto x = random_vec(rows * cols, 2, "x");
    for (auto& v : x) v *= 20.0f;  // large logits: the max subtraction matters
    x[0] = 80.0f;                  // exp(80) alone would overflow a naive float sum
    std::vector<float> y(rows * cols);
    mls::kernels::softmax_forward(y.data(), x.data(), rows, cols);
    mls::testing::observe("y", y, {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
    for (long r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (long c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[r * cols + c]));
      for (long c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      double ysum = 0;
      for (long c = 0; c < cols; ++c) {
        const double want = std::exp(x[r * cols + c] - mx) / sum;
        ysum += y[r * cols + c];
        // relative error: rounding of x - max (|x - max| eps, amplified by exp), exp itself (a
        // few ulp), the float sum of `cols` terms; below FLT_MIN results may be flushed to 0.
        const double arg = std::fabs(x[r * cols + c] - mx);
        CHECK(std::fabs(y[r * cols + c] - want) <= (arg + 8 + cols) * kEps * want + 1e-37);
      }
      CHECK(std::fabs(ysum - 1.0) <= 2 * (cols + 8) * kEps);
    }
  }
}

TEST_CASE("layernorm forward and backward match the double reference", "[lab4][fused][layernorm]") {
  for (auto [rows, cols] : {std::pair{1L, 1L}, {3L, 7L}, {4L, 64L}, {9L, 769L}}) {
    const auto x = random_vec(rows * cols, 3, "x"), w = random_vec(cols, 3, "w"),
               b = random_vec(cols, 3, "b"), dy = random_vec(rows * cols, 3, "dy");
    const float eps = 1e-5f;
    std::vector<float> y(rows * cols), mean(rows), rstd(rows);
    mls::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                 rows, cols, eps);
    std::vector<float> dx(rows * cols, 0.5f), dw(cols, 0.25f), db(cols, -0.25f);  // += check
    mls::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                  mean.data(), rstd.data(), rows, cols);
    std::vector<double> dw_ref(cols, 0.25), db_ref(cols, -0.25);
    double tol_max = 0, rs_max = 0, norm_max = 0;  // the widest bounds of the checks below, for the observations
    for (long r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (long c = 0; c < cols; ++c) m += x[r * cols + c];
      m /= cols;
      for (long c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
      v /= cols;
      const double rs = 1.0 / std::sqrt(v + eps);
      // rstd can reach 1/sqrt(eps) ~ 316 for cols == 1; errors scale with it.
      const double tol = (cols + 8) * kEps * (1 + rs) * 4;
      tol_max = std::max(tol_max, tol);
      rs_max = std::max(rs_max, rs);
      CHECK(std::fabs(mean[r] - m) <= tol);
      CHECK(std::fabs(rstd[r] - rs) <= tol * rs);
      double dmean = 0, dnm = 0;
      for (long c = 0; c < cols; ++c) {
        const double norm = (x[r * cols + c] - m) * rs;
        CHECK(std::fabs(y[r * cols + c] - (norm * w[c] + b[c])) <= tol * (1 + std::fabs(norm)));
        norm_max = std::max(norm_max, std::fabs(norm));
        dmean += w[c] * dy[r * cols + c];
        dnm += w[c] * dy[r * cols + c] * norm;
      }
      dmean /= cols;
      dnm /= cols;
      for (long c = 0; c < cols; ++c) {
        const double norm = (x[r * cols + c] - m) * rs;
        const double dnorm = w[c] * dy[r * cols + c];
        const double want = 0.5 + (dnorm - dmean - norm * dnm) * rs;
        CHECK(std::fabs(dx[r * cols + c] - want) <= tol * rs * 4);
        dw_ref[c] += norm * dy[r * cols + c];
        db_ref[c] += dy[r * cols + c];
      }
    }
    mls::testing::observe("mean", mean, {0.0, 2 * tol_max});
    mls::testing::observe("rstd", rstd, {2 * tol_max, 0.0});
    mls::testing::observe("y", y, {0.0, 2 * tol_max * (1 + norm_max)});
    mls::testing::observe("dx", dx, {0.0, 2 * tol_max * rs_max * 4});
    mls::testing::observe("dw", dw, {0.0, 2 * (rows + 8) * kEps * 8 * 4});
    mls::testing::observe("db", db, {0.0, 2 * (rows + 8) * kEps * 4});
    for (long c = 0; c < cols; ++c) {
      CHECK(std::fabs(dw[c] - dw_ref[c]) <= (rows + 8) * kEps * 8 * 4);
      CHECK(std::fabs(db[c] - db_ref[c]) <= (rows + 8) * kEps * 4);
    }
  }
}

TEST_CASE("gelu forward and backward match the tanh formula", "[lab4][fused][gelu]") {
  const long n = 2001;
  std::vector<float> x(n), dy = random_vec(n, 4, "dy");
  for (long i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / (n - 1);
  std::vector<float> y(n), dx(n, 1.0f);
  mls::kernels::gelu_forward(y.data(), x.data(), n);
  mls::kernels::gelu_backward(dx.data(), x.data(), dy.data(), n);
  mls::testing::observe("y", y, {0.0, 2 * 16 * kEps * 11});
  mls::testing::observe("dx", dx, {0.0, 2 * (1e-5 + 64 * kEps * 11)});
  for (long i = 0; i < n; ++i) {
    const double xi = x[i];
    // GELU loses relative accuracy where 1 + tanh cancels (x << 0); bound by |x| ulps.
    CHECK(std::fabs(y[i] - gelu_ref(xi)) <= 16 * kEps * (1 + std::fabs(xi)));
    const double h = 1e-4;
    const double d = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);  // central difference
    CHECK(std::fabs(dx[i] - (1.0 + d * dy[i])) <= 1e-5 + 64 * kEps * (1 + std::fabs(xi)));
  }
}
