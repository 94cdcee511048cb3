#pragma once
/// The kernel registries: the seams through which faster kernels plug into earlier labs.
///
/// SGEMM.
/// Lab 1's `matmul` asks `sgemm_kernel()` for a function and calls it on each 2-D problem. Lab 1
/// registers its reference kernel ("lab1_reference") and OpenBLAS ("openblas") when built with
/// it; lab 4 registers its ladder ("lab4_naive", "lab4_blocked", "lab4_packed", ...) in every
/// program linked with it, through a provider (see `add_sgemm_provider`). `MLS_MATMUL=<name>` or
/// `set_sgemm_kernel` picks one by name; by default the registered kernel with the highest
/// priority is used.
///
/// Conv2d (below). Lab 2's float32 `conv2d` forward asks `conv2d_kernel()` for a kernel and runs
/// it when one is registered (and the problem is not empty), else its own im2col + matmul path.
/// Lab 3 registers its `conv2d_bias` kernel ("lab3_conv2d_bias", no bias) in every program
/// linked with it, so lab 3's programs, folded or not, run every float32 conv on it.
/// `MLS_CONV2D=im2col` or `set_conv2d_kernel("im2col")` forces lab 2's own path; another name
/// picks a registered kernel.
///
/// Row operators (below): softmax, layernorm forward and backward on row-major (rows, cols) arrays.
/// Lab 6's GPT runs its layernorms through `rowops_kernel()`: the chosen kernel's function where it
/// has one, else its own path (lab 4's hand-written kernels, mls/kernels/fused.hpp). Lab 4 registers
/// "tuned" (its autotuner's operator templates, mls/kernels/tune_ops.hpp) in every program linked
/// with it. Nothing is chosen by default: `MLS_ROWOPS=tuned` or `set_rowops_kernel("tuned")` picks
/// it; `MLS_ROWOPS=fused` (kRowOpsFallback) is the caller's own path, the default.
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

/// One float32 2-D cross-correlation, NCHW, every array compact (row-major, no gaps):
/// y[n, o, oy, ox] = bias[o] + sum_{c, i, j} x[n, c, oy*stride - pad + i, ox*stride - pad + j] * w[o, c, i, j]
/// (x is zero outside the image; no bias term when `bias` is null).
struct Conv2dProblem {
  long n, c, h, w;  // x: [n, c, h, w]
  long o, kh, kw;   // w: [o, c, kh, kw]
  long stride, pad;
  long oh, ow;      // y: [n, o, oh, ow], oh = (h + 2 pad - kh) / stride + 1 (ow likewise)
};
using Conv2dFn = void (*)(const Conv2dProblem& p, const float* x, const float* w, const float* bias, float* y);

struct Conv2dKernel {
  std::string name;
  Conv2dFn fn = nullptr;  // null: no kernel, the caller's own path (see `conv2d_kernel`)
  int priority = 0;       // higher wins when no kernel is chosen by name
  std::string description;
};

/// The name that chooses the caller's own path (lab 2's im2col + matmul) over every kernel.
inline constexpr const char* kConv2dFallback = "im2col";

/// Adds (or replaces, by name) a kernel. Safe to call from a static initialiser.
void register_conv2d(Conv2dKernel kernel);
/// Removes the kernel of that name; returns whether there was one.
bool unregister_conv2d(const std::string& name);
/// All registered kernels, highest priority first.
std::vector<Conv2dKernel> conv2d_kernels();
/// The kernel to use: the one named by `set_conv2d_kernel` or `MLS_CONV2D`, else the highest
/// priority. A kernel with a null `fn` (named `kConv2dFallback`) when none is registered or the
/// fallback is chosen: the caller runs its own path. Throws `mls::Error` listing the registered
/// names when the chosen name is unknown.
Conv2dKernel conv2d_kernel();
/// Chooses a kernel by name: "" returns to the default choice, `kConv2dFallback` forces the
/// caller's own path.
void set_conv2d_kernel(const std::string& name);

/// out[r, :] = softmax(inp[r, :]); (rows, cols), out may be inp.
using SoftmaxRowsFn = void (*)(float* out, const float* inp, long rows, long cols);
/// out = (x - mean) rstd weight + bias per row, mean and rstd (rows,) saved; as fused.hpp's.
using LayerNormFwdFn = void (*)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, long rows, long cols, float eps);
/// Its backward, ACCUMULATING (+=) into dinp (rows, cols), dweight and dbias (cols,); as fused.hpp's.
using LayerNormBwdFn = void (*)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                const float* weight, const float* mean, const float* rstd, long rows, long cols);

struct RowOpsKernel {
  std::string name;
  SoftmaxRowsFn softmax = nullptr;            // null: the caller's own path for this operator
  LayerNormFwdFn layernorm_forward = nullptr;
  LayerNormBwdFn layernorm_backward = nullptr;
  int priority = 0;  // the order of rowops_kernels(), highest first (no kernel is chosen by default)
  std::string description;
};

/// The name of the caller's own path (lab 4's hand-written kernels), the default.
inline constexpr const char* kRowOpsFallback = "fused";

/// Adds (or replaces, by name) a kernel. Safe to call from a static initialiser.
void register_rowops(RowOpsKernel kernel);
/// All registered kernels, highest priority first.
std::vector<RowOpsKernel> rowops_kernels();
/// The kernel to use: the one named by `set_rowops_kernel` or `MLS_ROWOPS`; else (or for
/// `kRowOpsFallback`) one with no functions, named kRowOpsFallback: the caller's own path. Throws
/// `mls::Error` listing the registered names when the chosen name is unknown.
RowOpsKernel rowops_kernel();
/// Chooses a kernel by name: "" returns to the default (the caller's own path).
void set_rowops_kernel(const std::string& name);

}  // namespace mls
