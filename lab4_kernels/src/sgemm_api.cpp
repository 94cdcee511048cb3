// The checked entry point of the lab 4 kernels and their registration with the common registry.
#include <algorithm>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/kernels.hpp"
#include "mls/kernels/sgemm.hpp"

namespace mls::kernels {

const std::vector<CpuKernel>& cpu_kernels() {
  static const std::vector<CpuKernel> kernels = {
      {"lab4_naive", &sgemm_naive, -10, "lab 4 step 1: naive i-j-k triple loop"},
      {"lab4_reordered", &sgemm_reordered, 1, "lab 4 step 2: loop order i-k-j"},
      {"lab4_blocked", &sgemm_blocked, 2, "lab 4 step 3: cache-blocked i-k-j"},
      {"lab4_packed", &sgemm_packed, 30,
       "lab 4 step 4: Goto/BLIS packing + SIMD micro-kernel, one thread"},
      {"lab4_packed_mt", &sgemm_packed_mt, 40,
       "lab 4 step 5: packed kernel on mls::num_threads() threads"},
  };
  return kernels;
}

namespace {

const CpuKernel* find_kernel(std::string_view name) {
  for (const auto& k : cpu_kernels()) {
    const std::string_view full = k.name;
    if (name == full || name == full.substr(5)) return &k;  // with or without "lab4_"
  }
  return nullptr;
}

std::string kernel_names() {
  std::string s;
  for (const auto& k : cpu_kernels()) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

}  // namespace

void check_sgemm_args(std::string_view name, bool trans_a, bool trans_b, long M, long N, long K,
                      const float* A, long lda, const float* B, long ldb, const float* C,
                      long ldc) {
  MLS_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm[", name, "]: sizes must be >= 0, got M=", M,
            " N=", N, " K=", K);
  const long min_lda = std::max(1L, trans_a ? M : K);
  const long min_ldb = std::max(1L, trans_b ? K : N);
  const long min_ldc = std::max(1L, N);
  MLS_CHECK(lda >= min_lda, "sgemm[", name, "]: lda=", lda, " is too small: A is ",
            trans_a ? "K x M (trans_a)" : "M x K", " with M=", M, " K=", K,
            ", so lda must be >= ", min_lda);
  MLS_CHECK(ldb >= min_ldb, "sgemm[", name, "]: ldb=", ldb, " is too small: B is ",
            trans_b ? "N x K (trans_b)" : "K x N", " with K=", K, " N=", N,
            ", so ldb must be >= ", min_ldb);
  MLS_CHECK(ldc >= min_ldc, "sgemm[", name, "]: ldc=", ldc, " is too small: C is M x N with N=",
            N, ", so ldc must be >= ", min_ldc);
  MLS_CHECK(A != nullptr || M == 0 || K == 0, "sgemm[", name, "]: A is null but op(A) is ", M,
            " x ", K);
  MLS_CHECK(B != nullptr || K == 0 || N == 0, "sgemm[", name, "]: B is null but op(B) is ", K,
            " x ", N);
  MLS_CHECK(C != nullptr || M == 0 || N == 0, "sgemm[", name, "]: C is null but C is ", M, " x ",
            N);
}

void sgemm(std::string_view name, bool trans_a, bool trans_b, long M, long N, long K, float alpha,
           const float* A, long lda, const float* B, long ldb, float beta, float* C, long ldc) {
  const CpuKernel* k = find_kernel(name);
  if (!k) {  // another kernel of the common registry ("tuned", the autotuner's): by its exact name
    for (const auto& r : sgemm_kernels()) {
      if (r.name != name) continue;
      check_sgemm_args(r.name, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
      if (M == 0 || N == 0) return;
      return r.fn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  }
  MLS_CHECK(k != nullptr, "sgemm: unknown kernel '", name, "'; lab 4 has: ", kernel_names());
  check_sgemm_args(k->name, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
  if (M == 0 || N == 0) return;
  k->fn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace detail {

void register_implemented(int priority_offset, bool keep_existing) {
  std::vector<SgemmKernel> existing;
  if (keep_existing) existing = sgemm_kernels();
  for (const auto& k : cpu_kernels()) {
    if (std::any_of(existing.begin(), existing.end(), [&](const SgemmKernel& e) { return e.name == k.name; })) {
      continue;
    }
    // A kernel of the handout that is not written yet throws NotImplemented: leave it out.
    const float a = 1.0f, b = 1.0f;
    float c = 0.0f;
    try {
      k.fn(false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    } catch (const mls::NotImplemented&) {
      continue;
    }
    register_sgemm({k.name, k.fn, k.priority + priority_offset, k.description});
  }
}

}  // namespace detail

void register_kernels() { detail::register_implemented(0, false); }

}  // namespace mls::kernels
