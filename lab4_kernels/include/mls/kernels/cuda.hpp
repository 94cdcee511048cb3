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
/// | cublas     | the peer: cublasSgemm, default math mode (no TF32)                    |
#include <cstddef>
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
/// Runs SGEMM kernel `name` (asynchronously on the default stream). Throws on an unknown name
/// or negative sizes.
void sgemm(std::string_view name, int M, int N, int K, float alpha, const float* A,
           const float* B, float beta, float* C);
/// Average milliseconds of `reps` runs of `sgemm(name, ...)` after one warm-up, timed with CUDA
/// events.
double time_sgemm_ms(std::string_view name, int M, int N, int K, const float* A, const float* B,
                     float* C, int reps);

/// Row-wise softmax, inp/out (rows, cols) on the device; one block per row.
void softmax_forward(float* out, const float* inp, int rows, int cols);
/// Layernorm forward (see fused.hpp); one warp per row. mean, rstd: (rows,).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int rows, int cols, float eps);
/// out[r, c] = gelu_tanh(inp[r, c] + bias[c]) in one pass. inp, out: (rows, cols); bias: (cols,).
void bias_gelu_forward(float* out, const float* inp, const float* bias, int rows, int cols);

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
float* device_alloc(std::size_t count);
void device_free(float* p);
void to_device(float* dst, const float* src, std::size_t count);
void to_host(float* dst, const float* src, std::size_t count);
void synchronize();

/// Owns `count` floats of device memory.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t count) : ptr_(device_alloc(count)), count_(count) {}
  ~DeviceBuffer() { device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return ptr_; }
  std::size_t size() const { return count_; }

 private:
  float* ptr_;
  std::size_t count_;
};

}  // namespace mls::kernels::cuda
