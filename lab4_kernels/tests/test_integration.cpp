// Lab 4's kernels reach lab 1's Tensor::matmul through the kernel registry (the seam lab 1
// left): after register_kernels(), MLS_MATMUL / set_sgemm_kernel can pick any of them.
#include <catch2/catch.hpp>

#include "mls/common/kernels.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/tensor/tensor.hpp"
#include "mls/testing.hpp"  // MLS_ORACLE

TEST_CASE("lab 1 matmul runs on every lab 4 kernel through the registry", "[lab4][sgemm][registry]") {
  // Every kernel of the ladder directly first: one not written yet throws "not implemented"
  // here (register_kernels() would silently leave it out of the registry).
  const float A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
  float C[4];
  for (const auto& k : mls::kernels::cpu_kernels()) {
    INFO("kernel " << k.name);
    mls::kernels::sgemm(k.name, true, false, 2, 2, 2, 1.0f, A, 2, B, 2, 0.0f, C, 2);
    mls::testing::observe(std::string("C ") + k.name, std::vector<float>(C, C + 4));
    MLS_ORACLE_CHECK(CHECK(C[0] == 26.0f); CHECK(C[3] == 44.0f));  // op(A) = A^T = [[1, 3], [2, 4]]
  }
  mls::register_matmul_kernels();
  mls::kernels::register_kernels();
  mls::Rng rng(44);
  // A strided, batched problem: the transpose reaches the kernel as a trans flag.
  const mls::Tensor a = mls::Tensor::randn({3, 33, 17}, rng);
  const mls::Tensor b = mls::Tensor::randn({3, 31, 17}, rng).transpose(-2, -1);
  int lab4_kernels = 0;
  for (const auto& k : mls::sgemm_kernels()) {
    if (k.name.rfind("lab4_", 0) != 0) continue;
    ++lab4_kernels;
    INFO("kernel " << k.name);
    mls::set_sgemm_kernel(k.name);
    const mls::Tensor got = mls::matmul(a, b);
    mls::testing::observe_values(k.name, got, {2e-4, 2e-4});
    // The float64 product through lab 1's reference loop, computed after the kernel ran.
    MLS_ORACLE_CHECK(mls::set_sgemm_kernel("lab1_reference");
                     const mls::Tensor expected = mls::matmul(a.to(mls::DType::Float64), b.to(mls::DType::Float64));
                     CHECK(mls::allclose(got.to(mls::DType::Float64), expected, 1e-4, 1e-4)));
  }
  mls::set_sgemm_kernel("");
  CHECK(lab4_kernels >= 4);
  // With no choice made, the highest priority kernel is a lab 4 one (packed beats OpenBLAS's 10).
  CHECK(mls::sgemm_kernel().name.rfind("lab4_", 0) == 0);
}
