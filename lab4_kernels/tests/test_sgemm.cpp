// Lab 4: every SGEMM kernel of the ladder against a double-precision reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/sgemm.hpp"
#include "reference.hpp"

using lab4_test::random_vec;
using lab4_test::reference_sgemm;

namespace {

struct Case {
  long M, N, K;
};

// Awkward sizes: 1, primes, one off a power of two or a register tile, non-square, K past one
// cache block (256) of the packed kernel.
const Case kCases[] = {{1, 1, 1},     {7, 7, 7},     {1, 33, 7},     {31, 33, 17},  {33, 31, 65},
                       {127, 1, 33},  {1, 127, 257}, {13, 35, 300},  {66, 97, 31},  {127, 127, 127},
                       {257, 257, 257}};

/// Runs kernel `name` on one problem with padded leading dimensions and compares every element
/// with the reference; returns the number of elements out of bounds.
long run_case(const std::string& name, bool ta, bool tb, Case c, float alpha, float beta,
              std::uint64_t seed) {
  const long M = c.M, N = c.N, K = c.K;
  const long lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;  // lda > K etc.
  const auto A = random_vec((ta ? K : M) * lda, seed, "A");
  const auto B = random_vec((tb ? N : K) * ldb, seed, "B");
  auto C = random_vec(M * ldc, seed, "C");
  if (beta == 0.0f) {
    for (auto& x : C) x = std::numeric_limits<float>::quiet_NaN();  // must not be read
  }
  const auto ref = reference_sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta,
                                   C.data(), ldc);
  const auto C_before = C;
  mls::lab4::sgemm(name, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  long bad = 0;
  for (long i = 0; i < M; ++i) {
    for (long j = 0; j < N; ++j) {
      const double got = C[i * ldc + j];
      const double err = std::fabs(got - ref.value[i * N + j]);
      if (!(err <= ref.bound[i * N + j])) {
        if (bad < 3) {
          UNSCOPED_INFO(name << " ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                             << " K=" << K << " C(" << i << "," << j << ")=" << got
                             << " expected " << ref.value[i * N + j] << " +- "
                             << ref.bound[i * N + j]);
        }
        ++bad;
      }
    }
    for (long j = N; j < ldc; ++j) {  // padding past N must be untouched
      const float before = C_before[i * ldc + j], after = C[i * ldc + j];
      if (!(before == after || (std::isnan(before) && std::isnan(after)))) ++bad;
    }
  }
  return bad;
}

/// The whole battery for one kernel: all sizes, all four transposes, alpha/beta != 1/0, and
/// beta == 0 with NaN in C.
void check_kernel(const std::string& name) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      CHECK(run_case(name, ta, tb, c, 1.5f, -0.75f, seed++) == 0);
      CHECK(run_case(name, ta, tb, c, -0.5f, 0.0f, seed++) == 0);
    }
  }
  CHECK(run_case(name, false, false, {9, 11, 13}, 1.0f, 1.0f, seed++) == 0);
  CHECK(run_case(name, true, true, {9, 11, 13}, 0.0f, 2.0f, seed++) == 0);  // alpha = 0
}

/// Degenerate sizes: M, N or K of 0.
void check_degenerate(const std::string& name) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  const float a = 1, b = 1;
  // K == 0: C = beta * C.
  mls::lab4::sgemm(name, false, false, 2, 3, 0, 1.0f, &a, 1, &b, 3, 2.0f, C.data(), 3);
  CHECK(C == std::vector<float>{2, 4, 6, 8, 10, 12});
  mls::lab4::sgemm(name, true, true, 2, 3, 0, 1.0f, &a, 2, &b, 1, 0.0f, C.data(), 3);
  CHECK(C == std::vector<float>{0, 0, 0, 0, 0, 0});
  // M == 0 or N == 0: nothing happens, even with null pointers.
  mls::lab4::sgemm(name, false, false, 0, 3, 4, 1.0f, nullptr, 4, &b, 3, 0.0f, nullptr, 3);
  mls::lab4::sgemm(name, false, false, 2, 0, 4, 1.0f, &a, 4, nullptr, 1, 0.0f, nullptr, 1);
  SUCCEED();
}

}  // namespace

TEST_CASE("sgemm lab4_naive: awkward sizes, transposes, alpha/beta", "[lab4][sgemm][naive]") {
  check_kernel("lab4_naive");
  check_degenerate("lab4_naive");
}

TEST_CASE("sgemm lab4_reordered: awkward sizes, transposes, alpha/beta",
          "[lab4][sgemm][reordered]") {
  check_kernel("lab4_reordered");
  check_degenerate("lab4_reordered");
}

TEST_CASE("sgemm lab4_blocked: awkward sizes, transposes, alpha/beta", "[lab4][sgemm][blocked]") {
  check_kernel("lab4_blocked");
  check_degenerate("lab4_blocked");
  // Past every block of the tiling (64 x 256 x 512).
  CHECK(run_case("lab4_blocked", false, true, {130, 515, 260}, 1.0f, 0.5f, 99) == 0);
}

TEST_CASE("sgemm lab4_packed: every micro-kernel this CPU has", "[lab4][sgemm][packed]") {
  const std::string saved = mls::lab4::packed_isa();
  for (const auto& isa : mls::lab4::packed_isas()) {
    INFO("micro-kernel " << isa);
    mls::lab4::set_packed_isa(isa);
    check_kernel("lab4_packed");
    check_degenerate("lab4_packed");
  }
  mls::lab4::set_packed_isa(saved);
}

TEST_CASE("sgemm lab4_packed: small cache blocks exercise every loop", "[lab4][sgemm][packed_blocks]") {
  const std::string saved = mls::lab4::packed_isa();
  ::setenv("MLS_LAB4_BLOCKS", "24,16,64", 1);  // mc, kc, nc: many jc, pc and ic iterations
  for (const auto& isa : mls::lab4::packed_isas()) {
    INFO("micro-kernel " << isa);
    mls::lab4::set_packed_isa(isa);
    for (int t = 0; t < 4; ++t) {
      CHECK(run_case("lab4_packed", t & 1, t & 2, {97, 131, 75}, 0.5f, 1.25f, 7 + t) == 0);
      CHECK(run_case("lab4_packed", t & 1, t & 2, {50, 200, 33}, 1.0f, 0.0f, 17 + t) == 0);
    }
  }
  ::unsetenv("MLS_LAB4_BLOCKS");
  mls::lab4::set_packed_isa(saved);
}

TEST_CASE("sgemm lab4_packed_mt: 1, 2 and 3 threads", "[lab4][sgemm][packed_mt]") {
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    mls::ThreadCountGuard guard(threads);
    check_kernel("lab4_packed_mt");
    check_degenerate("lab4_packed_mt");
    // Wide (split by columns) and tall (split by rows) problems above the threading threshold.
    CHECK(run_case("lab4_packed_mt", false, false, {40, 700, 200}, 1.0f, 0.5f, 5) == 0);
    CHECK(run_case("lab4_packed_mt", true, true, {700, 40, 200}, 1.0f, 0.0f, 6) == 0);
  }
}

TEST_CASE("sgemm: bad arguments throw mls::Error naming the kernel and the values",
          "[lab4][sgemm][errors]") {
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64, 0.0f);
  using Catch::Matchers::Contains;
  auto call = [&](const char* name, bool ta, bool tb, long M, long N, long K, const float* a,
                  long lda, const float* b, long ldb, float* c, long ldc) {
    mls::lab4::sgemm(name, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  };
  for (const auto& k : mls::lab4::cpu_kernels()) {
    const char* n = k.name;
    CHECK_THROWS_WITH(call(n, false, false, -1, 2, 2, A.data(), 2, B.data(), 2, C.data(), 2),
                      Contains(n) && Contains("M=-1"));
    CHECK_THROWS_WITH(call(n, false, false, 2, 2, -3, A.data(), 2, B.data(), 2, C.data(), 2),
                      Contains("K=-3"));
    CHECK_THROWS_WITH(call(n, false, false, 4, 4, 4, A.data(), 3, B.data(), 4, C.data(), 4),
                      Contains(n) && Contains("lda=3") && Contains(">= 4"));
    CHECK_THROWS_WITH(call(n, true, false, 5, 4, 2, A.data(), 4, B.data(), 4, C.data(), 4),
                      Contains("lda=4") && Contains(">= 5"));
    CHECK_THROWS_WITH(call(n, false, true, 4, 4, 6, A.data(), 6, B.data(), 5, C.data(), 4),
                      Contains("ldb=5") && Contains(">= 6"));
    CHECK_THROWS_WITH(call(n, false, false, 4, 4, 4, A.data(), 4, B.data(), 4, C.data(), 3),
                      Contains("ldc=3"));
    CHECK_THROWS_WITH(call(n, false, false, 2, 2, 2, nullptr, 2, B.data(), 2, C.data(), 2),
                      Contains(n) && Contains("A is null"));
    CHECK_THROWS_WITH(call(n, false, false, 2, 2, 2, A.data(), 2, nullptr, 2, C.data(), 2),
                      Contains("B is null"));
    CHECK_THROWS_WITH(call(n, false, false, 2, 2, 2, A.data(), 2, B.data(), 2, nullptr, 2),
                      Contains("C is null"));
  }
  CHECK_THROWS_AS(call("lab4_nope", false, false, 1, 1, 1, A.data(), 1, B.data(), 1, C.data(), 1),
                  mls::Error);
  CHECK_THROWS_WITH(call("lab4_nope", false, false, 1, 1, 1, A.data(), 1, B.data(), 1, C.data(), 1),
                    Contains("unknown kernel 'lab4_nope'") && Contains("lab4_packed"));
  CHECK_THROWS_AS(mls::lab4::set_packed_isa("sse9"), mls::Error);
}

TEST_CASE("sgemm: register_kernels puts the ladder in the common registry",
          "[lab4][sgemm][registry]") {
  mls::lab4::register_kernels();
  mls::lab4::register_kernels();  // twice is harmless
  const auto ks = mls::sgemm_kernels();
  for (const auto& k : mls::lab4::cpu_kernels()) {
    int found = 0;
    for (const auto& r : ks) found += r.name == k.name;
    INFO(k.name);
    CHECK(found == 1);
  }
  // Through the registry, like lab 1's matmul: 2x2 example.
  const float A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
  float C[4];
  for (const auto& k : mls::lab4::cpu_kernels()) {
    mls::set_sgemm_kernel(k.name);
    mls::sgemm_kernel().fn(false, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    CHECK(C[0] == 19.0f);
    CHECK(C[1] == 22.0f);
    CHECK(C[2] == 43.0f);
    CHECK(C[3] == 50.0f);
  }
  mls::set_sgemm_kernel("");
}
