#pragma once
// A CPU stand-in for a GPU, for tests of generate_cuda's source where there is none: the source is
// compiled as C++ by the JIT (mls/kernels/jit.hpp) after a prelude that makes CUDA's spellings C++
// (__global__ and __device__ vanish, __shared__ arrays are static: one block runs at a time), and
// each block runs as one std::thread per CUDA thread, __syncthreads() being a std::barrier of the
// block's threads. So the cooperative fills, the barriers, the guards and the index arithmetic run
// for real, threads racing as on a GPU; only speed and CUDA's float functions (expf within 2 ulp
// there, the C library's here) differ.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/kernels/codegen_cuda.hpp"
#include "mls/kernels/jit.hpp"

namespace kernels_test {

namespace te = mls::kernels::te;

inline const char* cuda_emulator_prelude() {
  return R"(// CUDA spelled in C++: a CPU emulation for tests (lab4_kernels/tests/cuda_emulator.hpp).
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

struct mls_emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local mls_emu_dim3 threadIdx, blockIdx;
static std::barrier<>* mls_emu_barrier = nullptr;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline void __syncthreads() { mls_emu_barrier->arrive_and_wait(); }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }

typedef void (*mls_emu_kernel)(float* const* params);
// Runs `kernel` on a grid of blocks, one block at a time, each as its threads side by side.
extern "C" void mls_emu_launch(mls_emu_kernel kernel, float* const* params, const long long* grid,
                               const long long* block) {
    const long long threads = block[0] * block[1] * block[2];
    for (long long bz = 0; bz < grid[2]; ++bz)
        for (long long by = 0; by < grid[1]; ++by)
            for (long long bx = 0; bx < grid[0]; ++bx) {
                std::barrier<> bar(threads);
                mls_emu_barrier = &bar;
                std::vector<std::thread> ts;
                for (long long t = 0; t < threads; ++t)
                    ts.emplace_back([=] {
                        blockIdx = {unsigned(bx), unsigned(by), unsigned(bz)};
                        threadIdx = {unsigned(t % block[0]), unsigned(t / block[0] % block[1]),
                                     unsigned(t / (block[0] * block[1]))};
                        kernel(params);
                    });
                for (auto& th : ts) th.join();
            }
}

)";
}

/// `source` (CUDA C++ without CUDA's headers) behind the emulator's prelude, and `wrappers` after it
/// (functions `extern "C" void NAME(float* const* params)` that call its kernels), compiled by the JIT.
inline mls::kernels::jit::LoadedModule compile_emulated(const std::string& source, const std::string& wrappers) {
  const std::string unit = cuda_emulator_prelude() + source + "\n// Launch wrappers: the parameters as an array.\n" + wrappers;
  mls::kernels::jit::CompileOptions options;
  // #pragma unroll is CUDA's; a float4 load reads floats through a float4 pointer, as CUDA does
  options.extra_flags = {"-Wno-unused-parameter", "-Wno-unknown-pragmas", "-pthread", "-fno-strict-aliasing"};
  options.opt_level = "-O1";
  return mls::kernels::jit::compile_shared(unit, options);
}

/// Runs wrapper `name` of `module` (compile_emulated) on a grid of blocks, one block at a time, each
/// as its threads side by side.
inline void launch_emulated(const mls::kernels::jit::LoadedModule& module, const std::string& name,
                            float* const* params, const std::array<std::int64_t, 3>& grid,
                            const std::array<std::int64_t, 3>& block) {
  using Launch = void (*)(void (*)(float* const*), float* const*, const long long*, const long long*);
  const auto launch = module.symbol<Launch>("mls_emu_launch");
  const auto fn = module.symbol<void(float* const*)>(name);
  const long long g[3] = {grid[0], grid[1], grid[2]};
  const long long b[3] = {block[0], block[1], block[2]};
  launch(fn, params, g, b);
}

/// Runs the kernels of `cu` on host arrays (one span per argument, in order; the workspace is made
/// here), emulated on the CPU (see the top of this file).
inline void emulate_cuda(const te::CudaSource& cu, std::span<const std::span<float>> args) {
  MLS_CHECK(args.size() == cu.num_args, "emulate_cuda: '", cu.func, "' takes ", cu.num_args, " arrays, got ", args.size());
  std::string wrappers;
  for (const auto& k : cu.kernels) {
    wrappers += "extern \"C\" void mls_emu_" + k.name + "(float* const* p) { " + k.name + "(";
    for (std::size_t i = 0; i < cu.params.size(); ++i) wrappers += (i ? ", " : "") + std::string("p[") + std::to_string(i) + "]";
    wrappers += "); }\n";
  }
  const auto module = compile_emulated(cu.source, wrappers);
  std::vector<std::vector<float>> workspace;
  std::vector<float*> params;
  for (const auto& a : args) params.push_back(a.data());
  for (std::size_t i = cu.num_args; i < cu.params.size(); ++i) {
    std::size_t n = 1;
    for (auto e : cu.params[i]->shape) n *= static_cast<std::size_t>(e);
    workspace.emplace_back(n, 0.0f);
    params.push_back(workspace.back().data());
  }
  for (const auto& k : cu.kernels) launch_emulated(module, "mls_emu_" + k.name, params.data(), k.dims.grid, k.dims.block);
}

}  // namespace kernels_test
