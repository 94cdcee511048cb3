// Lab 4: tiled (flash) attention against a double-precision naive attention that forms the
// whole (T, T) matrix, and a float64 gradient check of that reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mls/kernels/attention.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"  // MLS_ORACLE
#include "reference.hpp"

using kernels_test::random_vec;

namespace {
constexpr double kEps = std::numeric_limits<float>::epsilon();

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// Naive attention in double on packed qkv (B, T, 3C): out (B, T, C), lse (B, H, T) and, given
/// dout, the gradient dinp (B, T, 3C). Every (T, T) score matrix is formed in full.
struct AttentionRef {
  std::vector<double> out, lse, dinp;
};
template <class X>
AttentionRef attention_ref(const std::vector<X>& inp, const std::vector<X>* dout, long B, long T,
                           long C, long H, bool causal) {
  const long hs = C / H, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  AttentionRef r{std::vector<double>(B * T * C), std::vector<double>(B * H * T),
                 std::vector<double>(B * T * C3, 0.0)};
  std::vector<double> P(T * T), dP(T * T);
  for (long b = 0; b < B; ++b) {
    for (long h = 0; h < H; ++h) {
      auto q = [&](long t, long j) -> double { return inp[(b * T + t) * C3 + h * hs + j]; };
      auto k = [&](long t, long j) -> double { return inp[(b * T + t) * C3 + C + h * hs + j]; };
      auto v = [&](long t, long j) -> double { return inp[(b * T + t) * C3 + 2 * C + h * hs + j]; };
      for (long t = 0; t < T; ++t) {
        const long n = causal ? t + 1 : T;
        double mx = -1e300;
        for (long t2 = 0; t2 < n; ++t2) {
          double s = 0;
          for (long j = 0; j < hs; ++j) s += q(t, j) * k(t2, j);
          P[t * T + t2] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (long t2 = 0; t2 < n; ++t2) sum += std::exp(P[t * T + t2] - mx);
        for (long t2 = 0; t2 < T; ++t2) P[t * T + t2] = t2 < n ? std::exp(P[t * T + t2] - mx) / sum : 0.0;
        r.lse[(b * H + h) * T + t] = mx + std::log(sum);
        for (long j = 0; j < hs; ++j) {
          double o = 0;
          for (long t2 = 0; t2 < n; ++t2) o += P[t * T + t2] * v(t2, j);
          r.out[(b * T + t) * C + h * hs + j] = o;
        }
      }
      if (dout == nullptr) continue;
      auto dy = [&](long t, long j) -> double { return (*dout)[(b * T + t) * C + h * hs + j]; };
      double* dq = r.dinp.data() + b * T * C3 + h * hs;
      for (long t = 0; t < T; ++t) {
        double s = 0;
        for (long t2 = 0; t2 < T; ++t2) {
          double d = 0;
          for (long j = 0; j < hs; ++j) d += dy(t, j) * v(t2, j);
          dP[t * T + t2] = d;
          s += P[t * T + t2] * d;
        }
        for (long t2 = 0; t2 < T; ++t2) {
          const double p = P[t * T + t2], ds = p * (dP[t * T + t2] - s) * scale;
          if (p == 0.0) continue;
          for (long j = 0; j < hs; ++j) {
            dq[t * C3 + j] += ds * k(t2, j);
            dq[t2 * C3 + C + j] += ds * q(t, j);
            dq[t2 * C3 + 2 * C + j] += p * dy(t, j);
          }
        }
      }
    }
  }
  return r;
}

/// max |got - want| / max(1, max |want|).
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, mag = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    mag = std::max(mag, std::fabs(want[i]));
  }
  return err / mag;
}
#endif

/// The float32 error bound of attention for context T and head size hs: a score is a dot product
/// of hs terms (gamma_hs, Higham 3.1), the softmax sum and the output sum reduce up to T terms
/// and the exp adds a few ulp; 2 leaves room for the blocked summation orders. Gradients go
/// through two such reductions more (dP = dout · vᵀ and D = rowsum(dout ⊙ out)): 4×.
double tol_forward(long T, long hs) { return 2 * (hs + T + 16) * kEps; }
double tol_backward(long T, long hs) { return 4 * tol_forward(T, hs); }

struct Case {
  long B, T, H, hs;
};
}  // namespace

TEST_CASE("online_softmax_update folds blocks of a row into its softmax",
          "[lab4][flash][online_softmax]") {
  for (long n : {1L, 5L, 64L, 100L}) {
    auto x = random_vec(n, 7 + n, "online-softmax");
    for (auto& v : x) v *= 12.0f;
    if (n > 4) x[3] = -INFINITY;  // a masked score
    for (long blk : {1L, 3L, 16L, 64L}) {
      std::vector<float> s = x;  // the blocks in place: probabilities before normalisation
      std::vector<float> ms, ls, alphas;
      float m = -INFINITY, l = 0.f;
      for (long j0 = 0; j0 < n; j0 += blk) {
        const float alpha = mls::kernels::online_softmax_update(s.data() + j0, std::min(blk, n - j0), m, l);
        ms.push_back(m);
        ls.push_back(l);
        alphas.push_back(alpha);
      }
      const std::string c = "n = " + std::to_string(n) + ", block = " + std::to_string(blk);
      mls::testing::observe("online_softmax_update: running max, " + c, ms);
      mls::testing::observe("online_softmax_update: running sum, " + c, ls, {4 * (n + 8) * kEps, 0.0});
      mls::testing::observe("online_softmax_update: alpha, " + c, alphas, {16 * kEps, 1e-37});
      mls::testing::observe("online_softmax_update: exp(s - m), " + c, s, {16 * 12 * kEps, 1e-37});
      MLS_ORACLE_CHECK({
        // replay in double: the running max and sum after each block, alpha, exp(s - m_then)
        double mr = -INFINITY, lr = 0;
        std::size_t b = 0;
        for (long j0 = 0; j0 < n; j0 += blk, ++b) {
          const long j1 = std::min(n, j0 + blk);
          double mn = mr;
          for (long j = j0; j < j1; ++j) mn = std::max(mn, static_cast<double>(x[j]));
          const double alpha = mr == -INFINITY ? 0.0 : std::exp(mr - mn);
          double sum = 0;
          for (long j = j0; j < j1; ++j) {
            const double e = std::exp(x[j] - mn);
            sum += e;
            // |x - m| <= 24 amplifies the rounding of the difference: (|x - m| + 8) ulp
            CHECK(std::fabs(s[j] - e) <= (e == 0 ? 0.0 : (std::fabs(x[j] - mn) + 8) * kEps * e) + 1e-37);
          }
          lr = lr * alpha + sum;
          mr = mn;
          CHECK(ms[b] == static_cast<float>(mr));
          CHECK(std::fabs(alphas[b] - alpha) <= 32 * kEps * alpha + 1e-37);
          CHECK(std::fabs(ls[b] - lr) <= 2 * (n + 32) * kEps * lr);
        }
      });
    }
  }
  // a block of nothing but masked scores leaves the row empty (alpha 1, l 0, m -inf)
  std::vector<float> s{-INFINITY, -INFINITY};
  float m = -INFINITY, l = 0.f;
  const float alpha = mls::kernels::online_softmax_update(s.data(), 2, m, l);
  mls::testing::observe("online_softmax_update: all-masked block (alpha, l, s0, s1)",
                        std::vector<float>{alpha, l, s[0], s[1]});
  CHECK(m == -INFINITY);
  CHECK(l == 0.f);
}

TEST_CASE("flash attention forward and backward equal the naive attention",
          "[lab4][flash][attention]") {
  const Case cases[] = {{2, 1, 2, 5},   {1, 2, 3, 7},    {2, 3, 1, 16},   {2, 17, 2, 13},
                        {1, 64, 2, 64}, {2, 255, 1, 17}, {1, 1024, 1, 9}, {1, 2048, 1, 3}};
  for (const auto& cs : cases) {
    const long B = cs.B, T = cs.T, H = cs.H, hs = cs.hs, C = H * hs;
    const auto inp = random_vec(B * T * 3 * C, 11 + T, "qkv");
    const auto dout = random_vec(B * T * C, 12 + T, "dout");
    // small blocks exercise the block edges (not multiples of 16 nor of T); 64 is the default
    for (auto [bq, bk] : {std::pair{64L, 64L}, {5L, 7L}, {16L, 33L}}) {
      if (T > 300 && bq != 64) continue;  // the long contexts once, with the default blocks
      std::vector<float> out(B * T * C), lse(B * H * T), dinp(B * T * 3 * C, 0.25f);  // += check
      mls::kernels::flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, H, true, bq, bk);
      mls::kernels::flash_attention_backward(dinp.data(), dout.data(), inp.data(), out.data(),
                                             lse.data(), B, T, C, H, true, bq, bk);
      const std::string c = "T = " + std::to_string(T) + ", hs = " + std::to_string(hs) +
                            ", blocks " + std::to_string(bq) + "x" + std::to_string(bk);
      const double tf = tol_forward(T, hs), tb = tol_backward(T, hs);
      mls::testing::observe("flash_attention_forward: out, " + c, out, {0.0, 2 * tf});
      mls::testing::observe("flash_attention_forward: lse, " + c, lse, {2 * tf, 2 * tf});
      mls::testing::observe("flash_attention_backward: dinp, " + c, dinp, {2 * tb, 2 * tb});
      MLS_ORACLE_CHECK({
        const AttentionRef ref = attention_ref(inp, &dout, B, T, C, H, true);
        std::vector<double> dref = ref.dinp;
        for (auto& d : dref) d += 0.25;
        INFO(c);
        CHECK(rel_err(out, ref.out) <= tf);
        CHECK(rel_err(lse, ref.lse) <= tf);
        CHECK(rel_err(dinp, dref) <= tb);
      });
    }
  }
}

TEST_CASE("flash attention without the causal mask equals full attention",
          "[lab4][flash][attention]") {
  const long B = 2, T = 37, H = 3, hs = 11, C = H * hs;
  const auto inp = random_vec(B * T * 3 * C, 21, "qkv");
  const auto dout = random_vec(B * T * C, 22, "dout");
  std::vector<float> out(B * T * C), lse(B * H * T), dinp(B * T * 3 * C, 0.f);
  mls::kernels::flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, H, false, 8, 16);
  mls::kernels::flash_attention_backward(dinp.data(), dout.data(), inp.data(), out.data(), lse.data(),
                                         B, T, C, H, false, 8, 16);
  const double tf = tol_forward(T, hs), tb = tol_backward(T, hs);
  mls::testing::observe("flash_attention_forward (no mask): out", out, {0.0, 2 * tf});
  mls::testing::observe("flash_attention_backward (no mask): dinp", dinp, {0.0, 2 * tb});
  MLS_ORACLE_CHECK({
    const AttentionRef ref = attention_ref(inp, &dout, B, T, C, H, false);
    CHECK(rel_err(out, ref.out) <= tf);
    CHECK(rel_err(lse, ref.lse) <= tf);
    CHECK(rel_err(dinp, ref.dinp) <= tb);
  });
}

TEST_CASE("flash attention gradients pass a gradient check, the reference a float64 one",
          "[lab4][flash][gradcheck]") {
  const long B = 1, T = 5, H = 2, hs = 3, C = H * hs, n = B * T * 3 * C;
  const auto inp = random_vec(n, 31, "qkv");
  const auto w = random_vec(B * T * C, 32, "w");  // loss = sum(w ⊙ out): dout = w
  std::vector<float> out(B * T * C), lse(B * H * T), dinp(n, 0.f);
  mls::kernels::flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, H, true, 2, 3);
  mls::kernels::flash_attention_backward(dinp.data(), w.data(), inp.data(), out.data(), lse.data(),
                                         B, T, C, H, true, 2, 3);
  mls::testing::observe("flash_attention_backward: dinp, T = 5, hs = 3", dinp, {0.0, 1e-5});
  // Central differences of the float32 kernel, summed in double: with step h the error is about
  // h^2 |f'''| + (float rounding of the loss, ~ (T + hs) eps) / h; h = 2^-7 balances them.
  const float h = 1.0f / 128;
  auto loss = [&](const std::vector<float>& x) {
    std::vector<float> o(B * T * C), ls(B * H * T);
    mls::kernels::flash_attention_forward(o.data(), ls.data(), x.data(), B, T, C, H, true, 2, 3);
    double acc = 0;
    for (long i = 0; i < B * T * C; ++i) acc += static_cast<double>(w[i]) * o[i];
    return acc;
  };
  std::vector<float> fd(n);
  for (long i = 0; i < n; ++i) {
    auto xp = inp, xm = inp;
    xp[i] += h;
    xm[i] -= h;
    fd[i] = static_cast<float>((loss(xp) - loss(xm)) / (static_cast<double>(xp[i]) - xm[i]));
  }
  mls::testing::observe("flash_attention_forward: central differences, T = 5, hs = 3", fd, {0.0, 1e-3});
  for (long i = 0; i < n; ++i) CHECK(std::fabs(fd[i] - dinp[i]) <= 2e-3);
  MLS_ORACLE_CHECK({
    // float64: the naive reference's analytic gradient against its central differences
    std::vector<double> x(inp.begin(), inp.end()), wd(w.begin(), w.end());
    const AttentionRef ref = attention_ref(x, &wd, B, T, C, H, true);
    for (long i = 0; i < n; ++i) {
      const double hd = 1e-6;
      auto xp = x, xm = x;
      xp[i] += hd;
      xm[i] -= hd;
      const auto op = attention_ref<double>(xp, nullptr, B, T, C, H, true).out;
      const auto om = attention_ref<double>(xm, nullptr, B, T, C, H, true).out;
      double lp = 0, lm = 0;
      for (long j = 0; j < B * T * C; ++j) {
        lp += wd[j] * op[j];
        lm += wd[j] * om[j];
      }
      CHECK(std::fabs((lp - lm) / (2 * hd) - ref.dinp[i]) <= 1e-7);
      CHECK(std::fabs(dinp[i] - ref.dinp[i]) <= tol_backward(T, hs));
    }
  });
}

TEST_CASE("flash attention rejects bad shapes and block sizes", "[lab4][flash][errors]") {
  std::vector<float> buf(3 * 64, 0.f), lse(64, 0.f), d(3 * 64, 0.f);
  auto fwd = [&](long B, long T, long C, long H, long bq, long bk) {
    return [=, &buf, &lse] {
      mls::kernels::flash_attention_forward(buf.data(), lse.data(), buf.data(), B, T, C, H, true, bq, bk);
    };
  };
  auto bwd = [&](long B, long T, long C, long H, long bq, long bk) {
    return [=, &buf, &lse, &d] {
      mls::kernels::flash_attention_backward(d.data(), buf.data(), buf.data(), buf.data(), lse.data(),
                                             B, T, C, H, true, bq, bk);
    };
  };
  mls::testing::require_error(fwd(0, 4, 4, 1, 64, 64), "flash_attention_forward: B = 0");
  mls::testing::require_error(fwd(1, 0, 4, 1, 64, 64), "T = 0");
  mls::testing::require_error(fwd(1, 4, -4, 1, 64, 64), "C = -4");
  mls::testing::require_error(fwd(1, 4, 4, 0, 64, 64), "H = 0, expected all > 0");
  mls::testing::require_error(fwd(1, 4, 6, 4, 64, 64), "C = 6 is not a multiple of H = 4");
  mls::testing::require_error(fwd(1, 4, 4, 1, 0, 64), "block_q = 0, block_k = 64, expected both >= 1");
  mls::testing::require_error(fwd(1, 4, 4, 1, 64, -1), "block_k = -1");
  mls::testing::require_error(bwd(1, 4, 4, 1, -2, 64), "flash_attention_backward: block_q = -2");
  mls::testing::require_error(bwd(1, 4, 6, 4, 64, 64), "flash_attention_backward: C = 6 is not a multiple");
}
