#pragma once
/// Lab 4: CUDA kernels (built only where CUDA is found; run where a GPU is present).
///
/// All matrices are float32, row-major, dense (lda = K, ldb = N, ldc = N), op = no transpose:
///     C (M x N) = alpha * A (M x K) * B (K x N) + beta * C      (beta == 0: C not read)
/// Pointers are device pointers. Every CUDA/cuBLAS call is checked; a failure throws
/// `mls::Error` naming the call, the file:line and CUDA's message.
///
/// | kernel     | what it teaches                                                       |
/// |------------|-----------------------------------------------------------------------|
/// | naive      | one thread per C element; threadIdx.x walks rows: uncoalesced loads    |
/// | coalesced  | threadIdx.x walks columns: a warp reads 32 consecutive floats of B     |
/// | smem       | 32x32 tiles of A and B staged in shared memory                         |
/// | tile1d     | 64x64 block tile, each thread computes 8 elements of a column (TM=8)   |
/// | tile2d     | 128x128 block tile, each thread an 8x8 register tile (outer products)  |
/// | vec4       | tile2d with float4 global loads and a transposed A tile (needs N%4 == 0 and K%4 == 0; falls back to tile2d otherwise) |
/// | warptile   | block tile -> warp tile -> thread tile (128x128 -> 64x64 -> 2x2 of 8x4), double-buffered shared memory: the next K slice loads while this one multiplies (float4 where N%4 == 0, K%4 == 0 and the pointers are 16-byte aligned). The block tile is chosen by the grid it yields: 128x128, else 64x128 (warps of 32x64), else 64x64 (warps of 32x32), the largest that gives every multiprocessor a block (src/warptile_layout.hpp); `warptile_<BM>x<BN>` (sgemm_warptile_shapes) runs one shape |
/// | cublas     | the peer: cublasSgemm, default math mode (no TF32)                    |
///
/// Tensor cores (`gemm_bf16`): C (fp32) = alpha * A (bf16) * B (bf16) + beta * C, products and
/// sums in fp32. bf16 values travel as their 16-bit patterns (`mls::to_bf16`, mls/common/bf16.hpp).
///
/// | kernel     | what it teaches                                                       |
/// |------------|-----------------------------------------------------------------------|
/// | wmma       | 128x128 block tile, K slices of 64, 4 warps of 64x64 (4x4 WMMA 16x16x16 bf16 fragments, fp32 accumulators); the slices copied with cp.async into a 3-deep shared-memory ring (the best of 7 shapes on an H200) (K%8 == 0, N%8 == 0, 16-byte aligned; plain loads otherwise). Needs compute capability 8.0+ |
/// | mma        | mma.sync m16n8k16 bf16 in inline PTX, fragments loaded by ldmatrix (.trans for B), fp32 accumulators in registers and an epilogue straight from them; 128x256 block tile, 8 warps of 64x64, K slices of 32 in a 4-deep cp.async ring, rows padded against bank conflicts, fragments double-buffered across the 16-deep steps, blocks rasterized in panels of 8 tile rows for L2 reuse (src/mma_layout.hpp: the fragment layouts). Same fallbacks as wmma; compute capability 8.0+ |
/// | cublas     | the peer: cublasGemmEx, bf16 inputs, fp32 output and compute (CUBLAS_COMPUTE_32F) |
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mls::kernels::cuda {

/// True when a CUDA device can be used; otherwise false and, if `why` is given, the reason
/// (e.g. "cudaGetDeviceCount: no CUDA-capable device is detected").
bool available(std::string* why = nullptr);
/// Name of device 0 (e.g. "NVIDIA H100 80GB HBM3").
std::string device_name();

/// Kernel names, in ladder order, ending with "cublas".
std::vector<std::string> sgemm_kernels();
/// The warptile rung with one block tile, whatever the problem: "warptile_128x128",
/// "warptile_64x128", "warptile_64x64" (for tests and sweeps; "warptile" picks one by the grid).
std::vector<std::string> sgemm_warptile_shapes();
/// Runs SGEMM kernel `name` (sgemm_kernels() or sgemm_warptile_shapes(); asynchronously on the
/// default stream). Throws on an unknown name or negative sizes.
void sgemm(std::string_view name, int M, int N, int K, float alpha, const float* A,
           const float* B, float beta, float* C);
/// Average milliseconds of `reps` runs of `sgemm(name, ...)` after a warm-up of as many, timed with
/// CUDA events (time_batches_ms with one batch of `reps`).
double time_sgemm_ms(std::string_view name, int M, int N, int K, const float* A, const float* B,
                     float* C, int reps);

/// Tensor-core kernel names, ending with "cublas" (cublasGemmEx in bf16).
std::vector<std::string> gemm_bf16_kernels();
/// The other tile shapes of the wmma and mma kernels, named wmma_<BM>x<BN>x<BK>x<stages> and
/// mma_<BM>x<BN>x<BK>x<stages>, for sweeps (mls-cuda-sgemm-bench --bf16 mma,mma_256x128x32x4,...).
std::vector<std::string> gemm_bf16_shapes();
/// C = alpha * A * B + beta * C with A (M x K) and B (K x N) in bf16 (bit patterns, row-major,
/// device), C fp32. Asynchronous on the default stream. Throws on an unknown name, negative sizes,
/// or a GPU below compute capability 8.0 for "wmma" and "mma". K == 0 (A and B may be null): C = beta * C.
void gemm_bf16(std::string_view name, int M, int N, int K, float alpha, const std::uint16_t* A,
               const std::uint16_t* B, float beta, float* C);
/// Average milliseconds of `reps` runs of `gemm_bf16(name, ...)`, as time_sgemm_ms.
double time_gemm_bf16_ms(std::string_view name, int M, int N, int K, const std::uint16_t* A,
                         const std::uint16_t* B, float* C, int reps);

/// Row-wise softmax, inp/out (rows, cols) on the device; one block per row.
void softmax_forward(float* out, const float* inp, int rows, int cols);
/// Layernorm forward (see fused.hpp); one warp per row. mean, rstd: (rows,).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int rows, int cols, float eps);
/// out[r, c] = gelu_tanh(inp[r, c] + bias[c]) in one pass. inp, out: (rows, cols); bias: (cols,).
void bias_gelu_forward(float* out, const float* inp, const float* bias, int rows, int cols);

/// Tiled (flash) attention forward, causal or full, on the device (src/attention_cuda.cu), the
/// same computation as the CPU kernel kernels::flash_attention_forward (mls/kernels/attention.hpp):
/// inp (B, T, 3C) packed q|k|v, out (B, T, C), lse (B, H, T); device pointers, asynchronous on
/// the default stream. Blocks of 16 query rows (4 warps), keys and values streamed through shared
/// memory 32 at a time, the online softmax per row in registers; never a (T, T) matrix.
/// Throws mls::Error for non-positive sizes, C % H != 0, a head size above
/// flash_attention_max_head_size() or B·H > 65535.
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int H,
                             bool causal = true);
/// Backward of flash_attention_forward on the device: dinp (B, T, 3C) += the gradients of q, k
/// and v, given dout (B, T, C) and the forward's inp, out and lse (device pointers, asynchronous
/// on the default stream); the formulas of the CPU kernels::flash_attention_backward. The
/// probabilities are recomputed tile by tile from q, k and lse (P = exp(S - lse)), never a
/// (T, T) matrix: one kernel per 16 keys accumulates dk and dv over the query rows, another per
/// 16 query rows accumulates dq over the keys (disjoint writes, no atomics; D = rowsum(dout ⊙
/// out) recomputed per tile, no workspace). The same checks as the forward pass.
void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int H, bool causal = true);
/// The largest head size C / H flash_attention_forward and _backward take (128).
int flash_attention_max_head_size();

/// Timing of work on the default stream with CUDA events (src/cuda_timing.cu), for benchmarks:
/// one untimed batch (the warm-up), then `reps` batches of `batch` back-to-back calls of `fn`
/// (which enqueues work on the default stream), each batch between two events, all enqueued
/// before one synchronisation, so the GPU never waits for the host between calls. Returns the
/// milliseconds of one call in each batch (`reps` values; report their median). reps < 1 or
/// batch < 1 is an mls::Error.
std::vector<double> time_batches_ms(const std::function<void()>& fn, int reps, int batch);
/// Copies `count` floats from `src` to `dst`, both on the device, with cudaMemcpyAsync on the
/// default stream (returns before the copy is done): the peer of the memory-bound kernels.
void copy_device_async(float* dst, const float* src, std::size_t count);

/// Device memory helpers for tests and benchmarks (checked).
void* device_alloc_bytes(std::size_t bytes);
void device_free_bytes(void* p);  // never throws (destructors)
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
inline float* device_alloc(std::size_t count) { return static_cast<float*>(device_alloc_bytes(count * sizeof(float))); }
inline void device_free(float* p) { device_free_bytes(p); }
template <class T>
void to_device(T* dst, const T* src, std::size_t count) { copy_to_device(dst, src, count * sizeof(T)); }
template <class T>
void to_host(T* dst, const T* src, std::size_t count) { copy_to_host(dst, src, count * sizeof(T)); }
void synchronize();

/// Owns `count` elements of type T in device memory.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : ptr_(static_cast<T*>(device_alloc_bytes(count * sizeof(T)))), count_(count) {}
  ~DeviceArray() { device_free_bytes(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }

 private:
  T* ptr_;
  std::size_t count_;
};
using DeviceBuffer = DeviceArray<float>;

}  // namespace mls::kernels::cuda
