#pragma once
/// Lab 4 part 2, ML compilation: CUDA code generation. A lowered loop nest whose loops are bound to
/// GPU indices (`Stage::bind`, mls/kernels/schedule.hpp) becomes CUDA C++ source, which NVRTC
/// compiles where CUDA is found (mls/kernels/cuda_jit.hpp). This header and generate_cuda are
/// plain C++ (no CUDA headers): the source can be generated and read on any machine.
///
///     Schedule s({C});
///     auto [io, ii] = s[C].split(C.axis(0), 16);
///     auto [jo, ji] = s[C].split(C.axis(1), 16);
///     auto [ko, ki] = s[C].split(C.reduce_axis(0), 16);
///     s[C].reorder({io, jo, ii, ji, ko, ki});
///     s[C].bind(io, ThreadTag::BlockY);   s[C].bind(jo, ThreadTag::BlockX);
///     s[C].bind(ii, ThreadTag::ThreadY);  s[C].bind(ji, ThreadTag::ThreadX);
///     s.cache_read(A, s[C], ko, Scope::Shared);   // A_shared: the block's 16 x 16 tile of A
///     s.cache_read(B, s[C], ko, Scope::Shared);
///     CudaSource cu = generate_cuda(lower(s, "matmul"));
///
/// What the source holds:
///   - one `extern "C" __global__` function per top-level loop nest of the function (one per stage
///     computed at the root), launched in order on one stream: a stage that reads another's result
///     sees all of it (the launches are the grid-wide barrier). One nest: the kernel is called
///     c_identifier(f.name); several: <name>_<the buffer the nest writes>.
///   - every kernel takes the same parameters, `float* __restrict__` each: the function's arguments
///     (placeholders, then outputs), then its workspace (the intermediates of Scope::Global, which
///     the launcher allocates on the device).
///   - the bound loops of a nest are its launch: a loop bound to blockIdx.x of extent n is n blocks
///     along x (gridDim.x = n), one bound to threadIdx.x of extent n is n threads (blockDim.x = n);
///     the loop variable is the index (`const long long io = blockIdx.y;`). The IR's tail guards stay
///     `if`s around the statements they guard. An index without a bound loop is 1.
///   - a Scope::Shared tile is a `__shared__` array of the window's shape, filled by all the threads
///     of the block together (a loop strided by the block's size over the window's elements), then
///     `__syncthreads()` before any thread reads it, and `__syncthreads()` after the statements that
///     read it, before the next fill. Every thread reaches both barriers: the guards of the loops
///     around a fill (a tail of a thread index) are moved inside, onto the statements that are not
///     fills.
///   - Local tiles are per-thread arrays; loops of kind Serial, Unrolled (`#pragma unroll`),
///     Parallel and Vectorized are serial loops of each thread.
/// Every float operation is the IR's, in its order; NVRTC contracts a*b + c into an FMA unless told
/// not to (NvrtcOptions::fmad), and expf is CUDA's (within 2 ulp), so results may differ from the
/// interpreter by rounding.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mls/kernels/loop_ir.hpp"

namespace mls::kernels::te {

/// A kernel's launch: blocks of the grid and threads of a block, along x, y, z.
struct LaunchDims {
  std::array<std::int64_t, 3> grid{1, 1, 1};
  std::array<std::int64_t, 3> block{1, 1, 1};
  /// Threads of one block (block[0] * block[1] * block[2]).
  std::int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
  /// "grid (4, 3, 1) x block (16, 16, 1)".
  std::string to_string() const;
};

/// The launch of the bound loops `bound` (each a tag and the loop's extent) of `kernel`: each
/// blockIdx tag sets the grid's extent along its axis, each threadIdx tag the block's.
/// mls::Error "generate_cuda: ..." naming the kernel and the loop for ThreadTag::None, an extent < 1,
/// a tag given twice, more than 1024 threads in a block, blockDim.z > 64, gridDim.y or .z > 65535,
/// gridDim.x > 2^31 - 1 (CUDA's limits).
LaunchDims launch_dims(const std::vector<std::pair<ThreadTag, std::int64_t>>& bound, const std::string& kernel);

/// One __global__ function of a CudaSource.
struct CudaKernelInfo {
  std::string name;                 ///< its symbol (extern "C")
  LaunchDims dims;                  ///< its launch
  std::int64_t shared_bytes = 0;    ///< its static __shared__ memory
  std::vector<std::string> writes;  ///< the buffers it stores into (a comment, the kernel's name)
};

/// The CUDA translation unit of a LoweredFunc and how to launch it.
struct CudaSource {
  std::string func;                     ///< the LoweredFunc's name
  std::string source;                   ///< CUDA C++ (no #include: NVRTC compiles it as it is)
  std::vector<CudaKernelInfo> kernels;  ///< launched in this order
  std::vector<Buffer> params;           ///< every kernel's parameters: the arguments, then the workspace
  std::size_t num_args = 0;             ///< params[0, num_args) are the LoweredFunc's arguments
};

/// The CUDA source of `f` (see the top of this file). mls::Error "generate_cuda: ..." naming the
/// kernel and the loop or buffer for: a loop bound to a GPU index inside an unbound loop or another
/// statement of its nest (bound loops must be the outermost: compute stages at the innermost bound
/// loop or inside it), a bound loop with a non-constant extent or a nonzero start, one tag bound
/// twice in a nest, launch dims over CUDA's limits (launch_dims), over 48 KiB of __shared__ memory,
/// threads of a nest that write the same element of a global buffer (a store whose indices do not
/// read a bound variable, and are not proven disjoint), a tensorized tile (intrinsics are CPU code), a buffer used outside its
/// allocation, an intermediate of Scope::Global allocated elsewhere than at the top, a shared tile's
/// fill that is not a plain loop nest around one store.
CudaSource generate_cuda(const LoweredFunc& f);

}  // namespace mls::kernels::te
