// Lab 4: fused CPU kernels against double-precision naive references.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mls/common/fastmath.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"  // MLS_ORACLE
#include "reference.hpp"

using kernels_test::random_vec;

namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon();

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(mls::kGeluK * (x + mls::kGeluC * x * x * x)));
}

/// Double-precision layernorm forward and backward: y, dx (accumulated onto 0.5), dw (onto 0.25),
/// db (onto -0.25), and the largest rstd (the errors scale with it).
struct LayernormRef {
  std::vector<double> y, dx, dw, db;
  double rs_max = 0;
};
LayernormRef layernorm_ref(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& b, const std::vector<float>& dy, long rows,
                           long cols, float eps) {
  LayernormRef ref{std::vector<double>(rows * cols), std::vector<double>(rows * cols),
                   std::vector<double>(cols, 0.25), std::vector<double>(cols, -0.25)};
  for (long r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const float* dyr = dy.data() + r * cols;
    double m = 0, v = 0;
    for (long c = 0; c < cols; ++c) m += xr[c];
    m /= cols;
    for (long c = 0; c < cols; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double rs = 1.0 / std::sqrt(v / cols + eps);
    ref.rs_max = std::max(ref.rs_max, rs);
    double dmean = 0, dnm = 0;
    for (long c = 0; c < cols; ++c) {
      const double norm = (xr[c] - m) * rs;
      ref.y[r * cols + c] = norm * w[c] + b[c];
      dmean += w[c] * dyr[c];
      dnm += w[c] * dyr[c] * norm;
    }
    dmean /= cols;
    dnm /= cols;
    for (long c = 0; c < cols; ++c) {
      const double norm = (xr[c] - m) * rs;
      ref.dx[r * cols + c] = 0.5 + (w[c] * dyr[c] - dmean - norm * dnm) * rs;
      ref.dw[c] += norm * dyr[c];
      ref.db[c] += dyr[c];
    }
  }
  return ref;
}
}  // namespace

TEST_CASE("fast_expf is within a few ulp of exp", "[lab4][fused][exp]") {
  MLS_ORACLE(double worst = 0; for (double x = -87.0; x <= 88.0; x += 0.01234) {
    const double got = mls::kernels::fast_expf(static_cast<float>(x));
    // exp of the float-rounded argument; relative error bound of a few float ulp.
    const double want_f = std::exp(static_cast<double>(static_cast<float>(x)));
    worst = std::max(worst, std::fabs(got - want_f) / want_f);
  })
  {  // values on a coarse grid, each build within 4 ulp of exp
    std::vector<float> xs, ys;
    for (double x = -87.0; x <= 88.0; x += 1.234) xs.push_back(static_cast<float>(x));
    for (float x : xs) ys.push_back(mls::kernels::fast_expf(x));
    mls::testing::observe("fast_expf on a grid", ys, {8 * kEps, 0.0});
    mls::testing::observe("fast_expf(-1000), (1000), (NaN)", std::vector<float>{mls::kernels::fast_expf(-1000.0f),
        mls::kernels::fast_expf(1000.0f), mls::kernels::fast_expf(std::numeric_limits<float>::quiet_NaN())}, {0.0, 2e-37});
  }
  MLS_ORACLE_CHECK(CHECK(worst <= 4 * kEps));
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
    mls::testing::observe("fused_add_mul_add: E", E, {0.0, 2 * 3 * 3 * kEps});
    MLS_ORACLE_CHECK(for (long i = 0; i < n; ++i) {
      const double want = static_cast<double>(D[i]) + (static_cast<double>(A[i]) + B[i]) * C[i];
      // three roundings of values of magnitude <= 3
      CHECK(std::fabs(E[i] - want) <= 3 * 3 * kEps);
    });
  }
}

TEST_CASE("softmax rows sum to 1 and match the reference", "[lab4][fused][softmax]") {
  for (auto [rows, cols] : {std::pair{1L, 1L}, {3L, 7L}, {5L, 33L}, {17L, 1000L}, {2L, 4097L}}) {
    auto x = random_vec(rows * cols, 2, "x");
    for (auto& v : x) v *= 20.0f;  // large logits: the max subtraction matters
    x[0] = 80.0f;                  // exp(80) alone would overflow a naive float sum
    std::vector<float> y(rows * cols);
    mls::kernels::softmax_forward(y.data(), x.data(), rows, cols);
    mls::testing::observe("softmax_forward: y", y, {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
    MLS_ORACLE_CHECK(for (long r = 0; r < rows; ++r) {
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
    });
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
    double tol_max = 0, rs_max = 0, norm_max = 0;  // the widest bounds of the checks below, for the observations
    MLS_ORACLE(std::vector<double> dw_ref(cols, 0.25), db_ref(cols, -0.25);)
    MLS_ORACLE_CHECK(for (long r = 0; r < rows; ++r) {
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
    });
    mls::testing::observe("layernorm_forward: mean", mean, {0.0, 2 * tol_max});
    mls::testing::observe("layernorm_forward: rstd", rstd, {2 * tol_max, 0.0});
    mls::testing::observe("layernorm_forward: y", y, {0.0, 2 * tol_max * (1 + norm_max)});
    mls::testing::observe("layernorm_backward: dx", dx, {0.0, 2 * tol_max * rs_max * 4});
    mls::testing::observe("layernorm_backward: dw", dw, {0.0, 2 * (rows + 8) * kEps * 8 * 4});
    mls::testing::observe("layernorm_backward: db", db, {0.0, 2 * (rows + 8) * kEps * 4});
    MLS_ORACLE_CHECK(for (long c = 0; c < cols; ++c) {
      CHECK(std::fabs(dw[c] - dw_ref[c]) <= (rows + 8) * kEps * 8 * 4);
      CHECK(std::fabs(db[c] - db_ref[c]) <= (rows + 8) * kEps * 4);
    });
  }
}

TEST_CASE("gelu forward and backward match the tanh formula", "[lab4][fused][gelu]") {
  const long n = 2001;
  std::vector<float> x(n), dy = random_vec(n, 4, "dy");
  for (long i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / (n - 1);
  std::vector<float> y(n), dx(n, 1.0f);
  mls::kernels::gelu_forward(y.data(), x.data(), n);
  mls::kernels::gelu_backward(dx.data(), x.data(), dy.data(), n);
  mls::testing::observe("gelu_forward: y", y, {0.0, 2 * 16 * kEps * 11});
  mls::testing::observe("gelu_backward: dx", dx, {0.0, 2 * (1e-5 + 64 * kEps * 11)});
  MLS_ORACLE_CHECK(for (long i = 0; i < n; ++i) {
    const double xi = x[i];
    // GELU loses relative accuracy where 1 + tanh cancels (x << 0); bound by |x| ulps.
    CHECK(std::fabs(y[i] - gelu_ref(xi)) <= 16 * kEps * (1 + std::fabs(xi)));
    const double h = 1e-4;
    const double d = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);  // central difference
    CHECK(std::fabs(dx[i] - (1.0 + d * dy[i])) <= 1e-5 + 64 * kEps * (1 + std::fabs(xi)));
  });
}

// ---- the same kernels on every instruction set, on 1-3 threads and past the streaming size ----
// (outputs of 16 MiB and more are written with non-temporal stores; rows and blocks are split
// over the threads; set_packed_isa also selects the fused kernels' AVX-512 or portable loops).

namespace {

/// Runs `body` on the fused kernels' two code paths (the best instruction set, AVX-512 where
/// present, and the portable loops: "scalar"), each on 1 and 2 threads, and 3 when `small`
/// (more threads than cores; kept to small sizes so the test stays fast on a loaded machine).
template <class F>
void for_each_isa_and_threads(bool small, F&& body) {
  const std::string saved = mls::kernels::packed_isa();
  const auto isas = mls::kernels::packed_isas();
  std::vector<std::string> paths = {isas.front()};
  if (isas.back() != isas.front()) paths.push_back(isas.back());
  for (const auto& isa : paths) {
    mls::kernels::set_packed_isa(isa);
    for (int threads : {1, 2, 3}) {
      if (threads == 3 && !small) continue;
      INFO("isa " << isa << ", " << threads << " threads");
      mls::ThreadCountGuard guard(threads);
      body();
    }
  }
  mls::kernels::set_packed_isa(saved);
}

constexpr long kStreamed = (4L << 20) + 5;  // floats: a 16 MiB output and a ragged end

}  // namespace

TEST_CASE("fused E = D + (A + B) * C on every ISA, threads and streamed sizes",
          "[lab4][fused][elementwise]") {
  for (long n : {70001L, kStreamed}) {
    const auto A = random_vec(n, 5, "A"), B = random_vec(n, 5, "B"), C = random_vec(n, 5, "C"),
               D = random_vec(n, 5, "D");
    std::vector<float> E(n);
    for_each_isa_and_threads(n < kStreamed, [&] {
      std::fill(E.begin(), E.end(), std::numeric_limits<float>::quiet_NaN());  // every element must be written
      mls::kernels::fused_add_mul_add(n, A.data(), B.data(), C.data(), D.data(), E.data());
      mls::testing::observe_sampled("fused_add_mul_add: E", E, {0.0, 2 * 3 * 3 * kEps});
      MLS_ORACLE_CHECK(long bad = 0; for (long i = 0; i < n; ++i) {
        const double want = static_cast<double>(D[i]) + (static_cast<double>(A[i]) + B[i]) * C[i];
        bad += std::fabs(E[i] - want) > 3 * 3 * kEps;
      } CHECK(bad == 0));
    });
  }
}

TEST_CASE("softmax on every ISA, threads and streamed sizes", "[lab4][fused][softmax]") {
  for (auto [rows, cols] : {std::pair{300L, 100L}, {4097L, 1024L}}) {
    auto x = random_vec(rows * cols, 6, "x");
    for (auto& v : x) v *= 20.0f;
    MLS_ORACLE(std::vector<double> want(rows * cols); for (long r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (long c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[r * cols + c]));
      for (long c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      for (long c = 0; c < cols; ++c) want[r * cols + c] = std::exp(x[r * cols + c] - mx) / sum;
    })
    // As the test above: (|x - max| + 8 + cols) eps relative.
    MLS_ORACLE(std::vector<double> tol(rows * cols); for (long i = 0; i < rows * cols; ++i) {
      const double arg = std::fabs(std::log(want[i] > 0 ? want[i] : 1e-300));
      tol[i] = (arg + 8 + cols) * kEps * want[i] + 1e-37;
    })
    std::vector<float> y(rows * cols);
    for_each_isa_and_threads(rows * cols < kStreamed, [&] {
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      mls::kernels::softmax_forward(y.data(), x.data(), rows, cols);
      mls::testing::observe_sampled("softmax_forward: y", y, {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
      MLS_ORACLE_CHECK(long bad = 0; for (long i = 0; i < rows * cols; ++i) bad += std::fabs(y[i] - want[i]) > tol[i];
                       CHECK(bad == 0));
    });
  }
}

TEST_CASE("layernorm on every ISA, threads and streamed sizes", "[lab4][fused][layernorm]") {
  for (auto [rows, cols] : {std::pair{257L, 96L}, {4097L, 1024L}}) {
    const auto x = random_vec(rows * cols, 7, "x"), w = random_vec(cols, 7, "w"),
               b = random_vec(cols, 7, "b"), dy = random_vec(rows * cols, 7, "dy");
    const float eps = 1e-5f;
    // double reference: y, dx (with dx starting at 0.5), dw, db (starting at 0.25, -0.25)
    double rs_max = 0;  // the largest rstd (the observations' tolerances scale with it)
    MLS_ORACLE(const auto ref = layernorm_ref(x, w, b, dy, rows, cols, eps);
               const std::vector<double>&y_ref = ref.y, &dx_ref = ref.dx, &dw_ref = ref.dw, &db_ref = ref.db;
               rs_max = ref.rs_max;)
    const double tol = (cols + 8) * kEps * (1 + rs_max) * 4;
    std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols), db(cols);
    for_each_isa_and_threads(rows * cols < kStreamed, [&] {
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      mls::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                      b.data(), rows, cols, eps);
      std::fill(dx.begin(), dx.end(), 0.5f);
      std::fill(dw.begin(), dw.end(), 0.25f);
      std::fill(db.begin(), db.end(), -0.25f);
      mls::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                                       w.data(), mean.data(), rstd.data(), rows, cols);
      mls::testing::observe_sampled("layernorm_forward: y", y, {0.0, 2 * tol * 8});
      mls::testing::observe_sampled("layernorm_backward: dx", dx, {0.0, 2 * tol * rs_max * 4});
      mls::testing::observe("layernorm_backward: dw", dw, {0.0, 2 * (rows + 8) * kEps * 8 * 4});
      mls::testing::observe("layernorm_backward: db", db, {0.0, 2 * (rows + 8) * kEps * 4});
      MLS_ORACLE_CHECK(long bad_y = 0, bad_dx = 0, bad_dw = 0; for (long i = 0; i < rows * cols; ++i) {
        bad_y += std::fabs(y[i] - y_ref[i]) > tol * (1 + std::fabs(y_ref[i]) + 4);
        bad_dx += std::fabs(dx[i] - dx_ref[i]) > tol * rs_max * 4;
      } for (long c = 0; c < cols; ++c) {
        bad_dw += std::fabs(dw[c] - dw_ref[c]) > (rows + 8) * kEps * 8 * 4;
        bad_dw += std::fabs(db[c] - db_ref[c]) > (rows + 8) * kEps * 4;
      } CHECK(bad_y == 0); CHECK(bad_dx == 0); CHECK(bad_dw == 0));
    });
  }
}

TEST_CASE("gelu forward/backward and bias+gelu on every ISA, threads and streamed sizes",
          "[lab4][fused][gelu]") {
  for (long n : {70003L, kStreamed}) {
    auto x = random_vec(n, 8, "x");
    for (auto& v : x) v *= 8.0f;  // [-8, 8]: both tails and the middle
    x[0] = 1e4f;                   // far tails: gelu(x) = x and 0, gelu' = 1 and 0
    x[1] = -1e4f;
    const auto dy = random_vec(n, 8, "dy");
    // references once: y, dx (from 1), and their bounds
    MLS_ORACLE(std::vector<double> y_ref(n), dx_ref(n), tol_y(n), tol_dx(n); for (long i = 0; i < n; ++i) {
      const double xi = x[i], h = 1e-4;
      y_ref[i] = gelu_ref(xi);
      const double d = std::fabs(xi) > 100 ? (xi > 0 ? 1.0 : 0.0)
                                           : (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);
      dx_ref[i] = 1.0 + d * dy[i];
      tol_y[i] = 16 * kEps * (1 + std::fabs(xi));
      tol_dx[i] = 1e-5 + 64 * kEps * (1 + std::fabs(xi));
    })
    std::vector<float> y(n), dx(n);
    for_each_isa_and_threads(n < kStreamed, [&] {
      std::fill(dx.begin(), dx.end(), 1.0f);
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      mls::kernels::gelu_forward(y.data(), x.data(), n);
      mls::kernels::gelu_backward(dx.data(), x.data(), dy.data(), n);
      mls::testing::observe_sampled("gelu_forward: y", y, {0.0, 2 * 16 * kEps * 9});
      mls::testing::observe_sampled("gelu_backward: dx", dx, {0.0, 2 * (1e-5 + 64 * kEps * 9)});
      MLS_ORACLE_CHECK(long bad_y = 0, bad_dx = 0; for (long i = 0; i < n; ++i) {
        bad_y += std::fabs(y[i] - y_ref[i]) > tol_y[i];
        bad_dx += std::fabs(dx[i] - dx_ref[i]) > tol_dx[i];
      } CHECK(bad_y == 0); CHECK(bad_dx == 0));
    });
  }
}

TEST_CASE("bias_gelu_forward is gelu(x + bias) per row", "[lab4][fused][gelu]") {
  for (auto [rows, cols] : {std::pair{1L, 1L}, {3L, 17L}, {300L, 129L}, {4097L, 1024L}}) {
    auto x = random_vec(rows * cols, 9, "x");
    for (auto& v : x) v *= 6.0f;
    const auto bias = random_vec(cols, 9, "bias");
    MLS_ORACLE(std::vector<double> want(rows * cols), tol(rows * cols); for (long r = 0; r < rows; ++r) {
      for (long c = 0; c < cols; ++c) {
        const double v = static_cast<double>(static_cast<float>(x[r * cols + c] + bias[c]));
        want[r * cols + c] = gelu_ref(v);
        tol[r * cols + c] = 16 * kEps * (1 + std::fabs(v));
      }
    })
    std::vector<float> y(rows * cols), z(rows * cols);
    for_each_isa_and_threads(rows * cols < kStreamed, [&] {
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      mls::kernels::bias_gelu_forward(y.data(), x.data(), bias.data(), rows, cols);
      mls::testing::observe_sampled("bias_gelu_forward: y", y, {0.0, 2 * 16 * kEps * 8});
      MLS_ORACLE_CHECK(long bad = 0; for (long i = 0; i < rows * cols; ++i) bad += std::fabs(y[i] - want[i]) > tol[i];
                       CHECK(bad == 0));
      // in place: out may alias inp
      z = x;
      mls::kernels::bias_gelu_forward(z.data(), z.data(), bias.data(), rows, cols);
      // (a bool, not CHECK(z == y): the harness records each assertion's expansion, and two
      // 4M-element vectors would make it 40 MB)
      const bool same = z == y;
      CHECK(same);
    });
  }
}

// ---- row lengths and alignments: the AVX-512 loops run a masked head up to a 64-byte boundary,
// whole vectors and a masked tail; every length from 1 to past L1, at offsets that leave the
// rows 4-, 16-, 20- and 64-byte aligned, must give the reference and write nothing outside ----

namespace {

/// A buffer of n floats at `offset` floats into a vector with guard values on both sides.
struct Guarded {
  static constexpr float kGuard = 12345.0f;
  std::vector<float> buf;
  long offset, n;
  Guarded(long n_, long offset_, const std::vector<float>& init)
      : buf(static_cast<size_t>(offset_ + n_ + 32), kGuard), offset(offset_), n(n_) {
    std::copy(init.begin(), init.end(), buf.begin() + offset);
  }
  Guarded(long n_, long offset_, float fill) : Guarded(n_, offset_, std::vector<float>(n_, fill)) {}
  float* data() { return buf.data() + offset; }
  float operator[](long i) const { return buf[static_cast<size_t>(offset + i)]; }
  std::vector<float> values() const { return {buf.begin() + offset, buf.begin() + offset + n}; }
  /// Guard values that were overwritten (0 when the kernel stayed inside [0, n)).
  long guards_hit() const {
    long hit = 0;
    for (long i = 0; i < static_cast<long>(buf.size()); ++i) {
      if (i < offset || i >= offset + n) hit += buf[static_cast<size_t>(i)] != kGuard;
    }
    return hit;
  }
};

constexpr std::pair<long, long> kShapes[] = {{1, 1},  {1, 3},   {2, 15},   {3, 16},  {2, 17},
                                             {5, 33}, {4, 100}, {3, 1024}, {2, 4099}, {1, 20000}};
constexpr long kOffsets[] = {0, 1, 5, 12};

}  // namespace

TEST_CASE("softmax on every row length and alignment", "[lab4][fused][softmax][alignment]") {
  for (auto [rows, cols] : kShapes) {
    auto x = random_vec(rows * cols, 10, "x");
    for (auto& v : x) v *= 20.0f;
    MLS_ORACLE(std::vector<double> want(rows * cols), tol(rows * cols); for (long r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (long c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[r * cols + c]));
      for (long c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      for (long c = 0; c < cols; ++c) {
        const double arg = mx - x[r * cols + c];
        want[r * cols + c] = std::exp(-arg) / sum;
        tol[r * cols + c] = (arg + 8 + cols) * kEps * want[r * cols + c] + 1e-37;
      }
    })
    for (long offset : kOffsets) {
      INFO(rows << " x " << cols << ", offset " << offset << " floats");
      for_each_isa_and_threads(true, [&] {
        Guarded in(rows * cols, offset, x), y(rows * cols, (offset * 7) % 16, 0.0f);
        mls::kernels::softmax_forward(y.data(), in.data(), rows, cols);
        mls::testing::observe("softmax_forward: y", y.values(), {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
        MLS_ORACLE_CHECK(long bad = 0; for (long i = 0; i < rows * cols; ++i) bad += !(std::fabs(y[i] - want[i]) <= tol[i]);
                         CHECK(bad == 0));
        CHECK(y.guards_hit() == 0);
        // in place (out == inp); not bit for bit the values above: the row's offset within a
        // cache line decides which lanes sum which elements
        mls::kernels::softmax_forward(in.data(), in.data(), rows, cols);
        mls::testing::observe("softmax_forward: y in place", in.values(), {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
        MLS_ORACLE_CHECK(long bad_in_place = 0;
                         for (long i = 0; i < rows * cols; ++i) bad_in_place += !(std::fabs(in[i] - want[i]) <= tol[i]);
                         CHECK(bad_in_place == 0));
        CHECK(in.guards_hit() == 0);
      });
    }
  }
}

TEST_CASE("softmax gives exactly 0 for -inf logits (masks)", "[lab4][fused][softmax][alignment]") {
  const long rows = 3, cols = 37;
  auto x = random_vec(rows * cols, 11, "x");
  for (long i = 0; i < rows * cols; i += 3) x[i] = -std::numeric_limits<float>::infinity();
  for_each_isa_and_threads(true, [&] {
    Guarded in(rows * cols, 1, x), y(rows * cols, 1, 0.0f);
    mls::kernels::softmax_forward(y.data(), in.data(), rows, cols);
    mls::testing::observe("softmax_forward: y", y.values(), {2 * (8 + static_cast<double>(cols)) * kEps, 0.0});
    MLS_ORACLE_CHECK(long bad = 0; for (long r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (long c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[r * cols + c]));
      for (long c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      for (long c = 0; c < cols; ++c) {
        const long i = r * cols + c;
        if (std::isinf(x[i])) {
          bad += y[i] != 0.0f;
        } else {
          const double want = std::exp(x[i] - mx) / sum;
          bad += !(std::fabs(y[i] - want) <= (8 + cols) * kEps * want * 2);
        }
      }
    } CHECK(bad == 0));
  });
}

TEST_CASE("layernorm on every row length and alignment", "[lab4][fused][layernorm][alignment]") {
  for (auto [rows, cols] : kShapes) {
    const auto x = random_vec(rows * cols, 12, "x"), w = random_vec(cols, 12, "w"),
               b = random_vec(cols, 12, "b"), dy = random_vec(rows * cols, 12, "dy");
    const float eps = 1e-5f;
    double rs_max = 0;  // the largest rstd (the observations' tolerances scale with it)
    MLS_ORACLE(const auto ref = layernorm_ref(x, w, b, dy, rows, cols, eps);
               const std::vector<double>&y_ref = ref.y, &dx_ref = ref.dx, &dw_ref = ref.dw, &db_ref = ref.db;
               rs_max = ref.rs_max;)
    const double tol = (cols + 8) * kEps * (1 + rs_max) * 4;
    for (long offset : kOffsets) {
      INFO(rows << " x " << cols << ", offset " << offset << " floats");
      for_each_isa_and_threads(true, [&] {
        Guarded xin(rows * cols, offset, x), y(rows * cols, offset, 0.0f), mean(rows, 3, 0.0f),
            rstd(rows, 3, 0.0f), dx(rows * cols, offset, 0.5f), dw(cols, offset, 0.25f),
            db(cols, offset, -0.25f);
        // weight, bias and dout at other offsets than x
        Guarded win(cols, (offset + 3) % 16, w), bin(cols, (offset + 9) % 16, b),
            dyin(rows * cols, (offset + 1) % 16, dy);
        mls::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), xin.data(), win.data(),
                                        bin.data(), rows, cols, eps);
        mls::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dyin.data(), xin.data(),
                                         win.data(), mean.data(), rstd.data(), rows, cols);
        mls::testing::observe("layernorm_forward: y", y.values(), {0.0, 2 * tol * 8});
        mls::testing::observe("layernorm_backward: dx", dx.values(), {0.0, 2 * tol * rs_max * 4});
        mls::testing::observe("layernorm_backward: dw", dw.values(), {0.0, 2 * (rows + 8) * kEps * 8 * 4});
        mls::testing::observe("layernorm_backward: db", db.values(), {0.0, 2 * (rows + 8) * kEps * 4});
        mls::testing::observe("layernorm_forward: mean", mean.values(), {0.0, 2 * tol});
        mls::testing::observe("layernorm_forward: rstd", rstd.values(), {2 * tol, 0.0});
        MLS_ORACLE_CHECK(long bad_y = 0, bad_dx = 0, bad_dw = 0; for (long i = 0; i < rows * cols; ++i) {
          bad_y += !(std::fabs(y[i] - y_ref[i]) <= tol * (1 + std::fabs(y_ref[i]) + 4));
          bad_dx += !(std::fabs(dx[i] - dx_ref[i]) <= tol * rs_max * 4);
        } for (long c = 0; c < cols; ++c) {
          bad_dw += !(std::fabs(dw[c] - dw_ref[c]) <= (rows + 8) * kEps * 8 * 4);
          bad_dw += !(std::fabs(db[c] - db_ref[c]) <= (rows + 8) * kEps * 4);
        } CHECK(bad_y == 0); CHECK(bad_dx == 0); CHECK(bad_dw == 0));
        CHECK(y.guards_hit() + mean.guards_hit() + rstd.guards_hit() == 0);
        CHECK(dx.guards_hit() + dw.guards_hit() + db.guards_hit() == 0);
      });
    }
  }
}

TEST_CASE("gelu and bias+gelu on every length and alignment", "[lab4][fused][gelu][alignment]") {
  for (auto [rows, cols] : kShapes) {
    const long n = rows * cols;
    auto x = random_vec(n, 13, "x");
    for (auto& v : x) v *= 8.0f;
    const auto bias = random_vec(cols, 13, "bias"), dy = random_vec(n, 13, "dy");
    for (long offset : kOffsets) {
      INFO(rows << " x " << cols << ", offset " << offset << " floats");
      for_each_isa_and_threads(true, [&] {
        Guarded xin(n, offset, x), y(n, (offset + 5) % 16, 0.0f), z(n, offset, 0.0f),
            dx(n, offset, 1.0f), bin(cols, (offset + 2) % 16, bias), dyin(n, (offset + 7) % 16, dy);
        mls::kernels::gelu_forward(y.data(), xin.data(), n);
        mls::kernels::bias_gelu_forward(z.data(), xin.data(), bin.data(), rows, cols);
        mls::kernels::gelu_backward(dx.data(), xin.data(), dyin.data(), n);
        mls::testing::observe("y", y.values(), {0.0, 2 * 16 * kEps * 9});
        mls::testing::observe("z", z.values(), {0.0, 2 * 16 * kEps * 10});
        mls::testing::observe("dx", dx.values(), {0.0, 2 * (1e-5 + 64 * kEps * 9)});
        MLS_ORACLE_CHECK(long bad_y = 0, bad_z = 0, bad_dx = 0; for (long i = 0; i < n; ++i) {
          const double xi = x[i], h = 1e-4;
          bad_y += !(std::fabs(y[i] - gelu_ref(xi)) <= 16 * kEps * (1 + std::fabs(xi)));
          const double d = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);
          bad_dx += !(std::fabs(dx[i] - (1.0 + d * dy[i])) <= 1e-5 + 64 * kEps * (1 + std::fabs(xi)));
          const double v = static_cast<double>(static_cast<float>(x[i] + bias[i % cols]));
          bad_z += !(std::fabs(z[i] - gelu_ref(v)) <= 16 * kEps * (1 + std::fabs(v)));
        } CHECK(bad_y == 0); CHECK(bad_z == 0); CHECK(bad_dx == 0));
        CHECK(y.guards_hit() + z.guards_hit() + dx.guards_hit() == 0);
      });
    }
  }
}

TEST_CASE("fused kernels give the same bits wherever the rows sit in memory",
          "[lab4][fused][same_bits][alignment]") {
  // Later labs compare runs bit for bit (lab 6: thread counts, recomputation, ZeRO stages) whose
  // buffers sit at different addresses: a sum may not depend on a row's offset in a cache line.
  const long rows = 3, cols = 1000;
  auto x = random_vec(rows * cols, 14, "x");
  for (auto& v : x) v *= 10.0f;
  const auto w = random_vec(cols, 14, "w"), b = random_vec(cols, 14, "b"),
             dy = random_vec(rows * cols, 14, "dy");
  for_each_isa_and_threads(true, [&] {
    std::vector<std::vector<float>> first;  // the outputs at offset 0
    for (long offset : {0L, 1L, 3L, 5L, 8L, 12L, 15L}) {
      INFO("offset " << offset << " floats");
      Guarded xin(rows * cols, offset, x), win(cols, offset, w), bin(cols, offset, b),
          dyin(rows * cols, offset, dy), sm(rows * cols, offset, 0.0f), y(rows * cols, offset, 0.0f),
          mean(rows, offset, 0.0f), rstd(rows, offset, 0.0f), dx(rows * cols, offset, 0.0f),
          dw(cols, offset, 0.0f), db(cols, offset, 0.0f), g(rows * cols, offset, 0.0f),
          dg(rows * cols, offset, 0.0f);
      mls::kernels::softmax_forward(sm.data(), xin.data(), rows, cols);
      mls::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), xin.data(), win.data(),
                                      bin.data(), rows, cols, 1e-5f);
      mls::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dyin.data(), xin.data(),
                                       win.data(), mean.data(), rstd.data(), rows, cols);
      mls::kernels::bias_gelu_forward(g.data(), xin.data(), bin.data(), rows, cols);
      mls::kernels::gelu_backward(dg.data(), xin.data(), dyin.data(), rows * cols);
      const std::vector<std::vector<float>> got = {sm.values(), y.values(), mean.values(),
                                                   rstd.values(), dx.values(), dw.values(),
                                                   db.values(), g.values(), dg.values()};
      if (first.empty()) {
        first = got;
        mls::testing::observe("softmax", got[0], {2 * (128 + 8 + static_cast<double>(cols)) * kEps, 2e-37});
        mls::testing::observe("rstd", got[3], {1e-5, 0.0});
      }
      for (std::size_t k = 0; k < got.size(); ++k) {
        INFO("output " << k << " (softmax, y, mean, rstd, dx, dw, db, bias+gelu, gelu')");
        const bool same = got[k] == first[k];
        CHECK(same);
      }
    }
  });
}

TEST_CASE("fused kernels give the same bits at every intra-op budget", "[lab4][fused][same_bits]") {
  // Lab 3's parallel executor runs nodes side by side, each with a share of the threads
  // (mls::IntraOpBudget) while num_threads() stays the same; its outputs must equal the sequential
  // executor's bit for bit, so the kernels (layernorm backward's per-thread partial sums
  // included) may not depend on how many threads share them.
  mls::ThreadCountGuard guard(4);
  const long rows = 1031, cols = 257;  // enough rows for every thread to get some
  const auto x = random_vec(rows * cols, 15, "x"), w = random_vec(cols, 15, "w"), b = random_vec(cols, 15, "b"),
             dy = random_vec(rows * cols, 15, "dy");
  auto outputs = [&] {
    std::vector<float> sm(rows * cols), y(rows * cols), mean(rows), rstd(rows), dx(rows * cols, 0.0f), dw(cols, 0.0f),
        db(cols, 0.0f), g(rows * cols), dg(rows * cols, 0.0f);
    mls::kernels::softmax_forward(sm.data(), x.data(), rows, cols);
    mls::kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols, 1e-5f);
    mls::kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                     rows, cols);
    mls::kernels::bias_gelu_forward(g.data(), x.data(), b.data(), rows, cols);
    mls::kernels::gelu_backward(dg.data(), x.data(), dy.data(), rows * cols);
    return std::vector<std::vector<float>>{sm, y, mean, rstd, dx, dw, db, g, dg};
  };
  const auto full = outputs();
  mls::testing::observe("dweight at budget 4", full[5], {1e-3, 1e-4});
  mls::testing::observe("dbias at budget 4", full[6], {1e-3, 1e-4});
  for (int budget : {1, 2, 3}) {
    mls::IntraOpBudget cap(budget);
    const auto got = outputs();
    for (std::size_t k = 0; k < got.size(); ++k) {
      INFO("budget " << budget << ", output " << k << " (softmax, y, mean, rstd, dx, dw, db, bias+gelu, gelu')");
      const bool same = got[k] == full[k];
      mls::testing::observe("output " + std::to_string(k) + " same bits at budget " + std::to_string(budget), same);
      CHECK(same);
    }
  }
}
