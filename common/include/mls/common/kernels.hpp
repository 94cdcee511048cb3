#pragma once
/// The kernel registry: the seam through which faster kernels plug into the tensor library.
///
/// Lab 1's `matmul` asks `sgemm_kernel()` for a function and calls it on each 2-D problem. Lab 1
/// registers its reference kernel ("lab1_reference") and OpenBLAS ("openblas") when built with
/// it; lab 4 registers its ladder ("lab4_naive", "lab4_blocked", "lab4_packed", ...) in every
/// program linked with it, through a provider (see `add_sgemm_provider`). `MLS_MATMUL=<name>` or
/// `set_sgemm_kernel` picks one by name; by default the registered kernel with the highest
/// priority is used.
#include <string>
#include <vector>

namespace mls {

/// C = alpha * op(A) * op(B) + beta * C, single precision, row-major with leading dimensions.
/// op(A) is M x K (A is M x K with lda >= K, or K x M with lda >= M when trans_a);
/// op(B) is K x N; C is M x N with ldc >= N. When beta == 0, C is not read.
using SgemmFn = void (*)(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                         const float* A, long lda, const float* B, long ldb, float beta, float* C,
                         long ldc);

struct SgemmKernel {
  std::string name;
  SgemmFn fn = nullptr;
  int priority = 0;  // higher wins when no kernel is chosen by name
  std::string description;
};

/// Adds (or replaces, by name) a kernel.
void register_sgemm(SgemmKernel kernel);
/// Adds a provider: a function that registers kernels, called once, the first time the registry
/// is read (`sgemm_kernels`, `sgemm_kernel`). Safe to call from a static initialiser, so a library
/// linked into a program can offer its kernels without every `main` calling it.
void add_sgemm_provider(void (*provider)());
/// All registered kernels, highest priority first.
std::vector<SgemmKernel> sgemm_kernels();
/// The kernel in use: the one named by `set_sgemm_kernel` or `MLS_MATMUL`, else the highest
/// priority. Throws `mls::Error` listing the registered names when the chosen name is unknown.
SgemmKernel sgemm_kernel();
/// Chooses a kernel by name ("" returns to the default choice).
void set_sgemm_kernel(const std::string& name);

}  // namespace mls
