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
#include "sgemm_check.hpp"

using kernels_test::check_degenerate;
using kernels_test::check_kernel;
using kernels_test::run_case;

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
  run_case("lab4_blocked", false, true, {130, 515, 260}, 1.0f, 0.5f, 99);
}

TEST_CASE("sgemm lab4_packed: every micro-kernel this CPU has", "[lab4][sgemm][packed]") {
  const std::string saved = mls::kernels::packed_isa();
  for (const auto& isa : mls::kernels::packed_isas()) {
    INFO("micro-kernel " << isa);
    mls::kernels::set_packed_isa(isa);
    check_kernel("lab4_packed");
    check_degenerate("lab4_packed");
    // N > 512: op(A) packed (not read in place), K over three balanced KC blocks, edge tiles.
    run_case("lab4_packed", false, false, {60, 530, 1100}, 1.0f, 0.5f, 11);
    run_case("lab4_packed", true, true, {37, 600, 1030}, -1.0f, 0.0f, 12);
  }
  mls::kernels::set_packed_isa(saved);
}

TEST_CASE("sgemm lab4_packed_mt: 1, 2 and 3 threads", "[lab4][sgemm][packed_mt]") {
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    mls::ThreadCountGuard guard(threads);
    check_kernel("lab4_packed_mt");
    check_degenerate("lab4_packed_mt");
    // Wide (split by columns) and tall (split by rows) problems above the threading threshold.
    run_case("lab4_packed_mt", false, false, {40, 700, 200}, 1.0f, 0.5f, 5);
    run_case("lab4_packed_mt", true, true, {700, 40, 200}, 1.0f, 0.0f, 6);
    // Transformer shapes (split by rows, op(B) packed once and shared; K over one KC block).
    run_case("lab4_packed_mt", false, true, {768, 384, 130}, 1.0f, 1.0f, 7);
    run_case("lab4_packed_mt", true, false, {512, 128, 600}, 1.0f, 1.0f, 8);
    run_case("lab4_packed_mt", false, false, {500, 96, 520}, -0.5f, 0.0f, 9);
    // Square-ish, N > 512: op(A) packed per thread, op(B) shared, K in balanced KC blocks.
    run_case("lab4_packed_mt", true, false, {100, 530, 1030}, 1.0f, 1.0f, 10);
  }
}

TEST_CASE("sgemm lab4_packed_mt: the same bits at every intra-op budget", "[lab4][sgemm][packed_mt]") {
  // Lab 3's parallel executor runs nodes side by side, each with a share of the threads
  // (mls::IntraOpBudget); its outputs must equal the sequential executor's bit for bit, so a
  // product may not depend on how many threads share it. num_threads() stays 4 throughout.
  mls::ThreadCountGuard guard(4);
  using kernels_test::Case;
  for (const Case c : {Case{40, 700, 200}, Case{700, 40, 200}, Case{100, 530, 1030}, Case{13, 17, 1}}) {
    const auto A = kernels_test::random_vec(c.M * c.K, 31, "A"), B = kernels_test::random_vec(c.K * c.N, 31, "B");
    auto product = [&] {
      std::vector<float> C(static_cast<std::size_t>(c.M * c.N), 0.0f);
      mls::kernels::sgemm("lab4_packed_mt", false, false, c.M, c.N, c.K, 1.0f, A.data(), c.K, B.data(), c.N, 0.0f, C.data(), c.N);
      return C;
    };
    const std::vector<float> full = product();
    const std::string what = "lab4_packed_mt C M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
    mls::testing::observe(what + " at budget 4", full, {1e-4, 1e-4});
    for (int budget : {1, 2, 3}) {
      INFO(what << ", budget " << budget);
      mls::IntraOpBudget cap(budget);
      const bool same = product() == full;
      mls::testing::observe(what + " same bits at budget " + std::to_string(budget), same);
      CHECK(same);
    }
  }
}

TEST_CASE("sgemm: bad arguments throw mls::Error naming the kernel and the values",
          "[lab4][sgemm][errors]") {
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64, 0.0f);
  using Catch::Matchers::Contains;
  auto call = [&](const char* name, bool ta, bool tb, long M, long N, long K, const float* a,
                  long lda, const float* b, long ldb, float* c, long ldc) {
    mls::kernels::sgemm(name, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  };
  for (const auto& k : mls::kernels::cpu_kernels()) {
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
  mls::testing::observe("C after the refused calls", C);  // none of them wrote
  CHECK_THROWS_AS(mls::kernels::set_packed_isa("sse9"), mls::Error);
}

TEST_CASE("sgemm: register_kernels puts the ladder in the common registry",
          "[lab4][sgemm][registry]") {
  // Every kernel of the ladder directly first (a kernel not written yet throws "not
  // implemented" here, and register_kernels() would leave it out of the registry).
  const float A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
  float C[4];
  for (const auto& k : mls::kernels::cpu_kernels()) {
    INFO(k.name);
    mls::kernels::sgemm(k.name, false, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    mls::testing::observe(std::string("C ") + k.name, std::vector<float>(C, C + 4));
    MLS_ORACLE_CHECK(CHECK(C[0] == 19.0f); CHECK(C[3] == 50.0f));
  }
  mls::kernels::register_kernels();
  mls::kernels::register_kernels();  // twice is harmless
  const auto ks = mls::sgemm_kernels();
  for (const auto& k : mls::kernels::cpu_kernels()) {
    int found = 0;
    for (const auto& r : ks) found += r.name == k.name;
    INFO(k.name);
    CHECK(found == 1);
  }
  // Through the registry, like lab 1's matmul: 2x2 example.
  for (const auto& k : mls::kernels::cpu_kernels()) {
    mls::set_sgemm_kernel(k.name);
    mls::sgemm_kernel().fn(false, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    mls::testing::observe(std::string("C through the registry ") + k.name, std::vector<float>(C, C + 4));
    MLS_ORACLE_CHECK(CHECK(C[0] == 19.0f); CHECK(C[1] == 22.0f); CHECK(C[2] == 43.0f); CHECK(C[3] == 50.0f));
  }
  mls::set_sgemm_kernel("");
}
