#pragma once
/// Lab 4 part 2, ML compilation: run-time compilation of generated CUDA source (built only where CUDA
/// is found: library mls_kernels_nvrtc). generate_cuda's source (mls/kernels/codegen_cuda.hpp) is
/// compiled by NVRTC into PTX, which the CUDA driver loads (cuModuleLoadData, cuModuleGetFunction)
/// and launches (cuLaunchKernel) on device arrays:
///
///     CudaJitKernel k = compile_cuda(lower(s, "matmul"));   // NVRTC, then the driver
///     k.run({a, b, c});                                      // host spans in the order of f.args
///
/// NVRTC needs no GPU: nvrtc_compile checks a source on any machine with the CUDA toolkit (for
/// compute_80 there). Loading and running need one (cuda::available()). The driver's functions are
/// reached through the CUDA runtime (cudaGetDriverEntryPointByVersion), so programs linked with this
/// library start on machines without a driver, where available() says why there is no GPU.
/// Every failure is an mls::Error: "nvrtc: ..." for a compile error (the options, NVRTC's log and
/// the source with numbered lines), "cuda_jit: <call>: <CUDA's message>" for a driver error.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mls/kernels/codegen_cuda.hpp"
#include "mls/kernels/te.hpp"

namespace mls::kernels::te {

/// How NVRTC compiles.
struct NvrtcOptions {
  /// --gpu-architecture: "compute_XY" (PTX for that architecture). Empty: default_nvrtc_arch().
  std::string arch;
  /// --fmad: contract a*b + c into one FMA (faster; results then differ from the interpreter by
  /// rounding). false: every product and sum rounded as the IR writes it.
  bool fmad = true;
  /// More NVRTC options, last on the line (e.g. "-lineinfo").
  std::vector<std::string> extra;
};

/// "NVRTC 13.0".
std::string nvrtc_version();
/// compute_<major><minor> of device 0 where a GPU is usable, else compute_80 (what a compile here
/// checks without a GPU).
std::string default_nvrtc_arch();
/// Whether NVRTC compiles a one-line kernel; otherwise false and, if `why` is given, NVRTC's reason
/// (e.g. its builtins library missing).
bool nvrtc_usable(std::string* why = nullptr);

/// A compiled program: its PTX, the architecture it targets and NVRTC's log (warnings).
struct Ptx {
  std::string text;
  std::string arch;
  std::string log;
};

/// The NVRTC options of `options` in command-line order ("--gpu-architecture=compute_80",
/// "--std=c++17", "--fmad=true", extra...).
std::vector<std::string> nvrtc_flags(const NvrtcOptions& options);

/// Compiles CUDA `source` (called `program` in messages, e.g. "matmul.cu") to PTX with NVRTC. No GPU
/// needed. mls::Error "nvrtc: cannot compile '<program>' (<options>): <log>" followed by the source
/// with numbered lines, on a compile error; "nvrtc: <call>: <message>" on any other failure.
Ptx nvrtc_compile(const std::string& source, const std::string& program, const NvrtcOptions& options = {});

/// A generated CUDA function compiled and loaded on device 0 (its kernels, launched in order).
/// Copies share the loaded module.
class CudaJitKernel {
 public:
  CudaJitKernel() = default;
  /// What it was made from.
  const LoweredFunc& func() const { return func_; }
  const CudaSource& cuda() const { return cuda_; }
  const Ptx& ptx() const { return ptx_; }
  explicit operator bool() const { return module_ != nullptr; }

  /// Runs on device arrays: one pointer per argument of func() (placeholders, then outputs), each of
  /// its buffer's size. The workspace (intermediates) is allocated for the call. Returns when the
  /// kernels are done; synchronize = false: as soon as they are enqueued on the default stream (for
  /// timing; a function with a workspace is refused then). mls::Error "CudaJitKernel::run: ..." for a
  /// wrong count of pointers or an empty kernel; "cuda_jit: cuLaunchKernel: ..." naming the kernel
  /// and its launch for a failed launch.
  void run_device(std::span<float* const> args, bool synchronize = true) const;
  /// Runs on host arrays: copies each to the device, runs, copies every argument back (an input
  /// comes back unchanged). One span per argument, each exactly its buffer's size.
  void run(std::span<const std::span<float>> args) const;
  /// The same with the arguments found in `buffers` (each must be bound).
  void run(const Bindings& buffers) const;

 private:
  friend CudaJitKernel compile_cuda(const LoweredFunc& f, const NvrtcOptions& options);
  LoweredFunc func_;
  CudaSource cuda_;
  Ptx ptx_;
  std::shared_ptr<void> module_;    // the CUmodule
  std::vector<void*> functions_;    // a CUfunction per kernel of cuda_
};

/// generate_cuda + nvrtc_compile + the driver's module and functions (device 0). mls::Error
/// "compile_cuda: no usable GPU: <why>" without one, and the errors of each step.
CudaJitKernel compile_cuda(const LoweredFunc& f, const NvrtcOptions& options = {});

/// compile_cuda(f, options).run(buffers): `interpret(f, buffers)`'s GPU twin.
void run_cuda(const LoweredFunc& f, const Bindings& buffers, const NvrtcOptions& options = {});

}  // namespace mls::kernels::te
