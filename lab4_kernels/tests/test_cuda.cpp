// Lab 4: CUDA kernels against double-precision references. Without a GPU every test says
// "SKIPPED: no GPU" (CTest then reports it as skipped, not passed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mls/common/bf16.hpp"
#include "mls/common/fastmath.hpp"
#include "mls/kernels/attention.hpp"
#include "mls/kernels/cuda.hpp"
#include "mls/testing.hpp"
#include "reference.hpp"

namespace cu = mls::kernels::cuda;
using kernels_test::random_vec;

#define REQUIRE_GPU() MLS_REQUIRE_GPU(cu::available)

namespace {
enum class Precision { fp32, bf16 };

/// Runs CUDA kernel `name` on one problem and observes C; outside the grading build, also checks
/// it against the double-precision reference (computed after the kernel ran). bf16: A and B are
/// rounded to bf16 and the kernel is a gemm_bf16 one; the reference multiplies the rounded values
/// (a product of two bf16 values is exact in fp32, so the fp32 bounds hold).
void check_sgemm(const std::string& name, int M, int N, int K, float alpha, float beta,
                 Precision precision = Precision::fp32) {
  auto A = random_vec(static_cast<size_t>(M) * K, M + N, "A");
  auto B = random_vec(static_cast<size_t>(K) * N, M + N, "B");
  auto C = random_vec(static_cast<size_t>(M) * N, M + N, "C");
  const auto C_before = C;
  cu::DeviceBuffer dC(C.size());
  cu::to_device(dC.get(), C.data(), C.size());
  if (precision == Precision::fp32) {
    cu::DeviceBuffer dA(A.size()), dB(B.size());
    cu::to_device(dA.get(), A.data(), A.size());
    cu::to_device(dB.get(), B.data(), B.size());
    cu::sgemm(name, M, N, K, alpha, dA.get(), dB.get(), beta, dC.get());
    cu::synchronize();
  } else {
    std::vector<std::uint16_t> A16(A.size()), B16(B.size());
    for (size_t i = 0; i < A.size(); ++i) A16[i] = mls::to_bf16(A[i]), A[i] = mls::from_bf16(A16[i]);
    for (size_t i = 0; i < B.size(); ++i) B16[i] = mls::to_bf16(B[i]), B[i] = mls::from_bf16(B16[i]);
    cu::DeviceArray<std::uint16_t> dA(A.size()), dB(B.size());
    cu::to_device(dA.get(), A16.data(), A16.size());
    cu::to_device(dB.get(), B16.data(), B16.size());
    cu::gemm_bf16(name, M, N, K, alpha, dA.get(), dB.get(), beta, dC.get());
    cu::synchronize();
  }
  cu::to_host(C.data(), dC.get(), C.size());
  const std::string what = (precision == Precision::bf16 ? "bf16 " : "") + name + " C M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K);
  MLS_ORACLE(const auto ref = kernels_test::reference_sgemm(false, false, M, N, K, alpha, A.data(), K, B.data(), N, beta,
                                                            C_before.data(), N);)
  // Tensor cores add in fp32 with truncation rather than round-to-nearest (Fasi et al., "Numerical
  // behavior of NVIDIA tensor cores", 2021): allow twice the round-to-nearest bound, and twice again.
  const double slack = precision == Precision::bf16 ? 4.0 : 1.0;
  double tol = 0;  // within twice the widest bound (the reference's build sets it)
  MLS_ORACLE(for (double b : ref.bound) tol = std::max(tol, slack * b);)
  mls::testing::observe(what, C, {0.0, 2 * tol});
  MLS_ORACLE_CHECK(long bad = 0; for (size_t i = 0; i < C.size(); ++i) {
    if (!(std::fabs(C[i] - ref.value[i]) <= slack * ref.bound[i])) {
      if (bad++ < 3) UNSCOPED_INFO(what << ": C[" << i << "]=" << C[i] << " expected " << ref.value[i]);
    }
  } CHECK(bad == 0));
}
}  // namespace

TEST_CASE("cuda sgemm: every kernel on awkward sizes", "[lab4][gpu][cuda_sgemm]") {
  REQUIRE_GPU();
  const int sizes[][3] = {{1, 1, 1}, {7, 7, 7}, {31, 33, 17}, {33, 31, 65}, {127, 129, 257},
                          {256, 128, 64}, {257, 260, 300}, {1, 256, 512}};
  auto kernels = cu::sgemm_kernels();
  for (const auto& shape : cu::sgemm_warptile_shapes()) kernels.push_back(shape);  // each block tile of warptile
  for (const auto& name : kernels) {
    for (const auto& s : sizes) {
      check_sgemm(name, s[0], s[1], s[2], 1.5f, -0.5f);
      check_sgemm(name, s[0], s[1], s[2], 1.0f, 0.0f);
    }
  }
}

TEST_CASE("cuda bf16 gemm on the tensor cores: every kernel on awkward and aligned sizes", "[lab4][gpu][cuda_bf16]") {
  REQUIRE_GPU();
  // awkward sizes take the element-wise loads; multiples of 8 take cp.async (several K slices,
  // several block tiles, partial ones at the edges; 1100 rows: mma's rasterization panels of 8 tile
  // rows and a partial one); empty M, N or K (C = beta * C)
  const int sizes[][3] = {{1, 1, 1},       {7, 7, 7},     {31, 33, 17},  {33, 31, 65},
                          {127, 129, 257}, {256, 128, 64}, {136, 264, 200}, {1, 256, 512},
                          {300, 8, 96},    {1100, 72, 40}, {0, 5, 3},     {5, 0, 3},
                          {4, 6, 0}};
  auto kernels = cu::gemm_bf16_kernels();
  for (const auto& shape : cu::gemm_bf16_shapes()) kernels.push_back(shape);  // the benchmark's other shapes
  for (const auto& name : kernels) {
    for (const auto& s : sizes) {
      check_sgemm(name, s[0], s[1], s[2], 1.5f, -0.5f, Precision::bf16);
      check_sgemm(name, s[0], s[1], s[2], 1.0f, 0.0f, Precision::bf16);
    }
  }
}

TEST_CASE("cuda sgemm: bad arguments throw", "[lab4][gpu][cuda_errors]") {
  REQUIRE_GPU();
  CHECK_THROWS_WITH(cu::sgemm("tile9d", 1, 1, 1, 1.0f, nullptr, nullptr, 0.0f, nullptr),
                    Catch::Matchers::Contains("unknown kernel 'tile9d'"));
  CHECK_THROWS_WITH(cu::sgemm("warptile_32x32", 1, 1, 1, 1.0f, nullptr, nullptr, 0.0f, nullptr),
                    Catch::Matchers::Contains("unknown kernel 'warptile_32x32'") &&
                        Catch::Matchers::Contains("warptile_64x64"));
  CHECK_THROWS_WITH(cu::sgemm("naive", -1, 1, 1, 1.0f, nullptr, nullptr, 0.0f, nullptr),
                    Catch::Matchers::Contains("M=-1"));
  CHECK_THROWS_WITH(cu::gemm_bf16("mma9", 1, 1, 1, 1.0f, nullptr, nullptr, 0.0f, nullptr),
                    Catch::Matchers::Contains("unknown kernel 'mma9'"));
  CHECK_THROWS_WITH(cu::gemm_bf16("wmma", 2, -3, 1, 1.0f, nullptr, nullptr, 0.0f, nullptr),
                    Catch::Matchers::Contains("N=-3"));
}

TEST_CASE("cuda softmax, layernorm and bias+gelu match the references", "[lab4][gpu][cuda_fused]") {
  REQUIRE_GPU();
  const double eps = std::numeric_limits<float>::epsilon();
  // (a warp per row up to 1024 columns, a block per row up to 8192 when cols % 4 == 0, the
  // general kernels otherwise)
  for (auto [rows, cols] : {std::pair{1, 1}, {3, 7}, {33, 128}, {17, 1000}, {4, 3000}, {2, 8192}, {5, 4097}, {2, 8196}}) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto x = random_vec(n, 9, "x"), w = random_vec(cols, 9, "w"), b = random_vec(cols, 9, "b");
    cu::DeviceBuffer dx(n), dy(n), dw(cols), db(cols), dm(rows), dr(rows);
    cu::to_device(dx.get(), x.data(), n);
    cu::to_device(dw.get(), w.data(), cols);
    cu::to_device(db.get(), b.data(), cols);
    std::vector<float> y(n);

    cu::softmax_forward(dy.get(), dx.get(), rows, cols);
    cu::to_host(y.data(), dy.get(), n);
    mls::testing::observe("softmax " + std::to_string(rows) + "x" + std::to_string(cols), y, {2 * (cols + 16) * eps, 1e-37});
    MLS_ORACLE_CHECK(for (int r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (int c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(x[r * cols + c]));
      for (int c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      for (int c = 0; c < cols; ++c) {
        const double want = std::exp(x[r * cols + c] - mx) / sum;
        CHECK(std::fabs(y[r * cols + c] - want) <= (cols + 16) * eps * want);
      }
    });

    cu::layernorm_forward(dy.get(), dm.get(), dr.get(), dx.get(), dw.get(), db.get(), rows, cols, 1e-5f);
    cu::to_host(y.data(), dy.get(), n);
    // (rstd is at most 1/sqrt(1e-5) ~ 316: the bound below, at its widest)
    mls::testing::observe("layernorm " + std::to_string(rows) + "x" + std::to_string(cols), y,
                          {0.0, 2 * (cols + 16) * eps * 4 * 317 * 4});
    MLS_ORACLE_CHECK(for (int r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (int c = 0; c < cols; ++c) m += x[r * cols + c];
      m /= cols;
      for (int c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
      const double rs = 1.0 / std::sqrt(v / cols + 1e-5);
      for (int c = 0; c < cols; ++c) {
        const double norm = (x[r * cols + c] - m) * rs;
        CHECK(std::fabs(y[r * cols + c] - (norm * w[c] + b[c])) <= (cols + 16) * eps * 4 * (1 + rs));
      }
    });

    cu::bias_gelu_forward(dy.get(), dx.get(), db.get(), rows, cols);
    cu::to_host(y.data(), dy.get(), n);
    mls::testing::observe("bias+gelu " + std::to_string(rows) + "x" + std::to_string(cols), y, {0.0, 2 * 16 * eps * 12});
    MLS_ORACLE_CHECK(for (size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(x[i]) + b[i % cols];
      const double want = 0.5 * v * (1 + std::tanh(mls::kGeluK * (v + mls::kGeluC * v * v * v)));
      CHECK(std::fabs(y[i] - want) <= 16 * eps * (1 + std::fabs(v)));
    });
  }
}

TEST_CASE("cuda flash attention forward equals the CPU flash kernel", "[lab4][gpu][cuda_flash]") {
  REQUIRE_GPU();
  const double eps = std::numeric_limits<float>::epsilon();
  struct Case {
    int B, T, H, hs;
    bool causal;
  };
  for (const Case c : {Case{2, 1, 2, 5, true}, {1, 3, 3, 7, true}, {2, 17, 2, 13, true}, {1, 64, 2, 64, true},
                       {2, 255, 1, 17, true}, {1, 1024, 2, 128, true}, {2, 2048, 2, 33, true}, {2, 37, 3, 11, false}}) {
    const int C = c.H * c.hs;
    const size_t n_in = static_cast<size_t>(c.B) * c.T * 3 * C, n_out = static_cast<size_t>(c.B) * c.T * C,
                 n_lse = static_cast<size_t>(c.B) * c.H * c.T;
    const auto inp = random_vec(n_in, 41 + c.T, "qkv");
    // the CPU kernel first (lab 4's flash_attention_forward: the online softmax is the student's)
    std::vector<float> want(n_out), want_lse(n_lse);
    mls::kernels::flash_attention_forward(want.data(), want_lse.data(), inp.data(), c.B, c.T, C, c.H, c.causal);
    cu::DeviceBuffer din(n_in), dout(n_out), dlse(n_lse);
    cu::to_device(din.get(), inp.data(), n_in);
    cu::flash_attention_forward(dout.get(), dlse.get(), din.get(), c.B, c.T, C, c.H, c.causal);
    cu::synchronize();
    std::vector<float> got(n_out), got_lse(n_lse);
    cu::to_host(got.data(), dout.get(), n_out);
    cu::to_host(got_lse.data(), dlse.get(), n_lse);
    // both are float32 attentions of the same inputs: each within (hs + T + 16) eps (times 2 for
    // the blocked orders) of the exact value (test_attention.cpp), so within twice that of each
    // other; __expf adds 2 ulp per probability.
    const double tol = 4 * (c.hs + c.T + 16) * eps;
    const std::string what = "cuda flash_attention_forward T=" + std::to_string(c.T) + " hs=" + std::to_string(c.hs) +
                             (c.causal ? "" : " (no mask)");
    mls::testing::observe(what + ": out", got, {0.0, 2 * tol});
    mls::testing::observe(what + ": lse", got_lse, {2 * tol, 2 * tol});
    double err = 0, lerr = 0;
    for (size_t i = 0; i < n_out; ++i) err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
    for (size_t i = 0; i < n_lse; ++i)
      lerr = std::max(lerr, std::fabs(got_lse[i] - want_lse[i]) / (1.0 + std::fabs(want_lse[i])));
    INFO(what << ": largest difference out " << err << ", lse " << lerr << ", bound " << tol);
    CHECK(err <= tol);
    CHECK(lerr <= tol);
  }
  cu::DeviceBuffer d(3 * 2 * 256);
  mls::testing::require_error([&] { cu::flash_attention_forward(d.get(), d.get(), d.get(), 1, 2, 258, 1); },
                              "head size C / H = 258, expected at most 128");
  mls::testing::require_error([&] { cu::flash_attention_forward(d.get(), d.get(), d.get(), 1, 0, 4, 1); },
                              "T = 0");
  mls::testing::require_error([&] { cu::flash_attention_forward(d.get(), d.get(), d.get(), 1, 2, 6, 4); },
                              "C = 6 is not a multiple of H = 4");
}

TEST_CASE("cuda flash attention backward equals the CPU flash kernel's gradients", "[lab4][gpu][cuda_flash]") {
  REQUIRE_GPU();
  const double eps = std::numeric_limits<float>::epsilon();
  struct Case {
    int B, T, H, hs;
    bool causal;
  };
  // T across the tiles' edges (1, 15-17, 33, 255), head sizes from 1 to 128 (odd, past 32 and 64,
  // 128 needs more than 48 KiB of shared memory), no mask
  for (const Case c : {Case{2, 1, 2, 5, true}, {1, 3, 3, 7, true}, {2, 17, 2, 13, true}, {1, 15, 1, 1, true},
                       {1, 64, 2, 64, true}, {2, 255, 1, 17, true}, {1, 33, 2, 128, true}, {1, 1024, 2, 128, true},
                       {2, 2048, 1, 33, true}, {2, 37, 3, 11, false}, {1, 100, 2, 96, false}}) {
    const int C = c.H * c.hs;
    const size_t n_in = static_cast<size_t>(c.B) * c.T * 3 * C, n_out = static_cast<size_t>(c.B) * c.T * C,
                 n_lse = static_cast<size_t>(c.B) * c.H * c.T;
    const auto inp = random_vec(n_in, 43 + c.T, "qkv");
    const auto dout = random_vec(n_out, 44 + c.T, "dout");
    // the CPU kernels first (the online softmax is the student's): out, lse, then the gradients,
    // added to 0.25 everywhere (both add to dinp)
    std::vector<float> out(n_out), lse(n_lse), want(n_in, 0.25f);
    mls::kernels::flash_attention_forward(out.data(), lse.data(), inp.data(), c.B, c.T, C, c.H, c.causal);
    mls::kernels::flash_attention_backward(want.data(), dout.data(), inp.data(), out.data(), lse.data(), c.B, c.T,
                                           C, c.H, c.causal);
    cu::DeviceBuffer din(n_in), ddout(n_out), dout_f(n_out), dlse(n_lse), dgrad(n_in);
    cu::to_device(din.get(), inp.data(), n_in);
    cu::to_device(ddout.get(), dout.data(), n_out);
    cu::to_device(dout_f.get(), out.data(), n_out);
    cu::to_device(dlse.get(), lse.data(), n_lse);
    const std::vector<float> start(n_in, 0.25f);
    cu::to_device(dgrad.get(), start.data(), n_in);
    cu::flash_attention_backward(dgrad.get(), ddout.get(), din.get(), dout_f.get(), dlse.get(), c.B, c.T, C, c.H,
                                 c.causal);
    cu::synchronize();
    std::vector<float> got(n_in);
    cu::to_host(got.data(), dgrad.get(), n_in);
    // both are float32 gradients of the same inputs, each within 4x the forward's bound of the
    // exact value (test_attention.cpp: two more reductions, dP and D), so within twice that of
    // each other, relative to the largest gradient; __expf adds 2 ulp per probability
    const double tol = 2 * 4 * 2 * (c.hs + c.T + 16) * eps;
    const std::string what = "cuda flash_attention_backward T=" + std::to_string(c.T) + " hs=" + std::to_string(c.hs) +
                             (c.causal ? "" : " (no mask)");
    mls::testing::observe(what + ": dinp", got, {2 * tol, 2 * tol});
    double err = 0, mag = 1;
    for (size_t i = 0; i < n_in; ++i) {
      err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
      mag = std::max(mag, static_cast<double>(std::fabs(want[i])));
    }
    INFO(what << ": largest difference " << err << " (largest gradient " << mag << "), bound " << tol);
    CHECK(err / mag <= tol);
  }
  cu::DeviceBuffer d(3 * 2 * 256);
  mls::testing::require_error(
      [&] { cu::flash_attention_backward(d.get(), d.get(), d.get(), d.get(), d.get(), 1, 2, 258, 1); },
      "cuda::flash_attention_backward: head size C / H = 258, expected at most 128");
  mls::testing::require_error(
      [&] { cu::flash_attention_backward(d.get(), d.get(), d.get(), d.get(), d.get(), 1, 0, 4, 1); }, "T = 0");
  mls::testing::require_error(
      [&] { cu::flash_attention_backward(d.get(), d.get(), d.get(), d.get(), d.get(), 1, 2, 6, 4); },
      "C = 6 is not a multiple of H = 4");
  mls::testing::require_error(
      [&] { cu::flash_attention_backward(d.get(), d.get(), d.get(), d.get(), d.get(), 300, 2, 256, 256); },
      "B * H = 76800, expected at most 65535");
}
