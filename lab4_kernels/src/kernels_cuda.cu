// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4: CUDA SGEMM ladder, softmax, layernorm and fused bias+GELU (see mls/kernels/cuda.hpp).
// Row-major, dense, no transposes. Every CUDA and cuBLAS call goes through MLS_CUDA_CHECK /
// MLS_CUBLAS_CHECK, which throw mls::Error with the call, the place and CUDA's message.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/fastmath.hpp"  // kGeluK, kGeluC
#include "cuda_check.cuh"  // MLS_CUDA_CHECK, MLS_CUDA_CHECK_LAUNCH
#include "mls/kernels/cuda.hpp"
#include "mma_layout.hpp"  // the fragment layouts of the mma rung
#include "sgemm_warptile.cuh"  // the warptile rung (and `epilogue`), its shapes and index maps

#define MLS_CUBLAS_CHECK(call)                                                                \
  do {                                                                                        \
    const cublasStatus_t st_ = (call);                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                       \
      ::mls::fail("cublas: ", #call, " failed at ", __FILE__, ":", __LINE__, ": status ",     \
                  static_cast<int>(st_), " (", cublasGetStatusString(st_), ")");              \
    }                                                                                         \
  } while (0)


namespace mls::kernels::cuda {

namespace {

// 1. naive: threadIdx.x walks rows, so a warp reads 32 different rows of A (fine, broadcast
// per k) but writes/reads C and B 32 rows apart: uncoalesced.
__global__ void sgemm_naive(int M, int N, int K, float alpha, const float* A, const float* B,
                            float beta, float* C) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const int col = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = epilogue(acc, alpha, beta, &C[row * N + col]);
  }
}

// 2. coalesced: threadIdx.x walks columns: a warp reads 32 consecutive floats of B and C.
__global__ void sgemm_coalesced(int M, int N, int K, float alpha, const float* A, const float* B,
                                float beta, float* C) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = epilogue(acc, alpha, beta, &C[row * N + col]);
  }
}

// 3. shared-memory tiling: each 32x32 tile of A and B is read from global memory once per block
// instead of once per thread.
constexpr int kTile = 32;
__global__ void sgemm_smem(int M, int N, int K, float alpha, const float* A, const float* B,
                           float beta, float* C) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = epilogue(acc, alpha, beta, &C[row * N + col]);
}

// 4./5. register tiling: a BM x BN block tile, staged through shared memory BK columns at a
// time; each thread keeps a TM x TN tile of C in registers and does outer products of a TM
// column of As and a TN row of Bs. TN == 1 is the 1-D version. Bounds-checked (zero fill).
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_regtile(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                  float* C) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  __shared__ float As[BK][BM];  // transposed: a column of the A tile is contiguous
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += kThreads) {
      const int r = i / BK, c = i % BK, gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? A[gr * K + gc] : 0.0f;
    }
    for (int i = tid; i < BK * BN; i += kThreads) {
      const int r = i / BN, c = i % BN, gr = k0 + r, gc = col0 + c;
      Bs[r][c] = (gr < K && gc < N) ? B[gr * N + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = As[k][trow * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = Bs[k][tcol * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = row0 + trow * TM + i;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = col0 + tcol * TN + j;
      if (r < M && c < N) C[r * N + c] = epilogue(acc[i][j], alpha, beta, &C[r * N + c]);
    }
  }
}

// 6. vectorised: the 2-D register tile with float4 global loads and stores and float4 reads of
// shared memory. Needs N % 4 == 0, K % 4 == 0 and 16-byte aligned pointers.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_vec4(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
               float* C) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[TM][TN] = {};
  float ra[TM], rb[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK / 4; i += kThreads) {
      const int r = i / (BK / 4), c = (i % (BK / 4)) * 4, gr = row0 + r, gc = k0 + c;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gr < M && gc < K) v = *reinterpret_cast<const float4*>(&A[gr * K + gc]);
      As[c + 0][r] = v.x;
      As[c + 1][r] = v.y;
      As[c + 2][r] = v.z;
      As[c + 3][r] = v.w;
    }
    for (int i = tid; i < BK * BN / 4; i += kThreads) {
      const int r = i / (BN / 4), c = (i % (BN / 4)) * 4, gr = k0 + r, gc = col0 + c;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (gr < K && gc < N) v = *reinterpret_cast<const float4*>(&B[gr * N + gc]);
      *reinterpret_cast<float4*>(&Bs[r][c]) = v;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&As[k][trow * TM + i]);
        ra[i] = v.x, ra[i + 1] = v.y, ra[i + 2] = v.z, ra[i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < TN; j += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[k][tcol * TN + j]);
        rb[j] = v.x, rb[j + 1] = v.y, rb[j + 2] = v.z, rb[j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = row0 + trow * TM + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; j += 4) {
      const int c = col0 + tcol * TN + j;
      if (c >= N) continue;  // N % 4 == 0: the 4 columns are all in or all out
      float4* dst = reinterpret_cast<float4*>(&C[r * N + c]);
      float4 out = make_float4(alpha * acc[i][j], alpha * acc[i][j + 1], alpha * acc[i][j + 2],
                               alpha * acc[i][j + 3]);
      if (beta != 0.0f) {
        const float4 old = *dst;
        out.x += beta * old.x, out.y += beta * old.y, out.z += beta * old.z, out.w += beta * old.w;
      }
      *dst = out;
    }
  }
}

// 7. warp tiling (the last FP32 rung): sgemm_warptile, in src/sgemm_warptile.cuh (its index maps in
// src/warptile_layout.hpp), where a host test compiles it as C++ behind the CUDA emulator.

// ---- tensor cores: bf16 inputs, fp32 accumulation -----------------------------------------

// 8. WMMA: each warp multiplies 16x16x16 bf16 fragments on the tensor cores (wmma::mma_sync)
// into fp32 accumulator fragments. A block computes a BM x BN tile of C from K slices of 32; its
// warps each own a WM x WN warp tile = (WM/16) x (WN/16) fragments (64 x 64: 16 accumulators, and
// 8 fragment loads feed 16 mma per 16-deep step). The A and B slices go global -> shared memory
// with cp.async (no registers in between) into a kStages-deep ring: slices s+1 .. s+kStages-1 are
// in flight while slice s is multiplied, with one __syncthreads per slice. Rows of the shared
// tiles are padded by 8 bf16 (16 bytes) against bank conflicts. The accumulators leave through a
// per-warp 16x16 fp32 scratch in shared memory, so the epilogue (alpha, beta, bounds) is plain
// code. kAsync: 16-byte cp.async copies (K % 8 == 0, N % 8 == 0, 16-byte aligned pointers);
// otherwise element-wise loads with bounds checks.

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = in ? 16 : 0;  // 0: fill the 16 bytes with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
#else
  (void)smem, (void)gmem, (void)in;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

/// One K slice (columns k0 .. k0+BK-1 of A, rows k0 .. k0+BK-1 of B) of a bf16 GEMM into one stage
/// of a shared-memory ring: A's BM x BK block at row0 (rows of kLdA elements in `as`) and B's BK x BN
/// block at col0 (rows of kLdB in `bs`), zero outside the matrices. kAsync: 16-byte cp.async chunks
/// of 8 bf16 (K % 8 == 0, N % 8 == 0, 16-byte aligned A and B: a chunk is all in or all out);
/// otherwise element-wise loads, bounds-checked. Shared by the wmma and mma rungs.
template <int BM, int BN, int BK, int kLdA, int kLdB, int kThreads, bool kAsync>
__device__ __forceinline__ void load_bf16_slice(__nv_bfloat16* as, __nv_bfloat16* bs, const __nv_bfloat16* A,
                                                const __nv_bfloat16* B, int M, int N, int K, int row0, int col0,
                                                int k0) {
  if (kAsync) {
    // chunks of 8 bf16: the A slice is BM rows x BK/8, the B slice BK rows x BN/8; every thread
    // copies the same number of chunks (a fixed trip count: the loops unroll)
    static_assert(BM * (BK / 8) % kThreads == 0 && BK * (BN / 8) % kThreads == 0, "chunks per thread");
#pragma unroll
    for (int l = 0; l < BM * (BK / 8) / kThreads; ++l) {
      const int i = threadIdx.x + l * kThreads, r = i / (BK / 8), c = (i % (BK / 8)) * 8;
      const bool in = row0 + r < M && k0 + c < K;
      cp_async16(&as[r * kLdA + c], in ? &A[static_cast<size_t>(row0 + r) * K + k0 + c] : A, in);
    }
#pragma unroll
    for (int l = 0; l < BK * (BN / 8) / kThreads; ++l) {
      const int i = threadIdx.x + l * kThreads, r = i / (BN / 8), c = (i % (BN / 8)) * 8;
      const bool in = k0 + r < K && col0 + c < N;
      cp_async16(&bs[r * kLdB + c], in ? &B[static_cast<size_t>(k0 + r) * N + col0 + c] : B, in);
    }
  } else {
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    for (int i = threadIdx.x; i < BM * BK; i += kThreads) {
      const int r = i / BK, c = i % BK;
      as[r * kLdA + c] = (row0 + r < M && k0 + c < K) ? A[static_cast<size_t>(row0 + r) * K + k0 + c] : zero;
    }
    for (int i = threadIdx.x; i < BK * BN; i += kThreads) {
      const int r = i / BN, c = i % BN;
      bs[r * kLdB + c] = (k0 + r < K && col0 + c < N) ? B[static_cast<size_t>(k0 + r) * N + col0 + c] : zero;
    }
  }
}

template <int BM, int BN, int BK, int WM, int WN, int kStages>
struct WmmaShape {
  static constexpr int kWarps = (BM / WM) * (BN / WN), kThreads = kWarps * 32;
  static constexpr int kPadA = BK + 8, kPadB = BN + 8;
  static constexpr int kStageA = BM * kPadA, kStageB = BK * kPadB;  // bf16 per stage
  static constexpr int kSmemBytes = kStages * (kStageA + kStageB) * 2;
  static_assert(kWarps * 256 * 4 <= kSmemBytes, "the epilogue's scratch reuses the ring");
};

template <int BM, int BN, int BK, int WM, int WN, int kStages, bool kAsync>
__global__ void __launch_bounds__(WmmaShape<BM, BN, BK, WM, WN, kStages>::kThreads)
    gemm_bf16_wmma(int M, int N, int K, float alpha, const __nv_bfloat16* A,
                   const __nv_bfloat16* B, float beta, float* C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  using S = WmmaShape<BM, BN, BK, WM, WN, kStages>;
  constexpr int kThreads = S::kThreads, kPadA = S::kPadA, FM = WM / 16, FN = WN / 16;
  extern __shared__ __align__(16) unsigned char wmma_smem[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(wmma_smem);
  __nv_bfloat16* Bs = As + kStages * S::kStageA;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wrow = (warp / (BN / WN)) * WM, wcol = (warp % (BN / WN)) * WN;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

  auto load = [&](int stage, int k0) {
    load_bf16_slice<BM, BN, BK, kPadA, S::kPadB, kThreads, kAsync>(As + stage * S::kStageA, Bs + stage * S::kStageB,
                                                                    A, B, M, N, K, row0, col0, k0);
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[FM];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[FN];

  const int slices = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, s * BK);
    cp_async_commit();  // (an empty group past the end keeps the count uniform)
  }
  for (int s = 0; s < slices; ++s) {
    cp_async_wait<kStages - 2>();  // groups 0..s have landed: slice s is here
    __syncthreads();               // ... for every thread; and everyone is done with slice s-1
    const int next = s + kStages - 1;
    if (next < slices) load(next % kStages, next * BK);  // into the stage slice s-1 used
    cp_async_commit();
    const __nv_bfloat16* as = As + (s % kStages) * S::kStageA;
    const __nv_bfloat16* bs = Bs + (s % kStages) * S::kStageB;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(fa[i], &as[(wrow + i * 16) * kPadA + kk], kPadA);
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(fb[j], &bs[kk * S::kPadB + wcol + j * 16], S::kPadB);
#pragma unroll
      for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: the epilogue's scratch reuses it

  float* scratch = reinterpret_cast<float*>(wmma_smem) + warp * 16 * 16;
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = row0 + wrow + i * 16 + e / 16, c = col0 + wcol + j * 16 + e % 16;
        if (r < M && c < N) {
          float* dst = &C[static_cast<size_t>(r) * N + c];
          *dst = epilogue(scratch[e], alpha, beta, dst);
        }
      }
      __syncwarp();
    }
  }
#else
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)B, (void)beta, (void)C;
#endif
}

/// Launches a bf16 tensor-core kernel: its cp.async instance (`async`) or its element-wise one.
/// The first launch of each pair raises their dynamic shared memory limit above the default 48 KiB.
template <auto kAsyncKernel, auto kPlainKernel>
void launch_bf16(dim3 grid, int threads, int smem_bytes, bool async, int M, int N, int K, float alpha,
                 const __nv_bfloat16* A, const __nv_bfloat16* B, float beta, float* C) {
  static std::once_flag once;
  std::call_once(once, [smem_bytes] {
    MLS_CUDA_CHECK(cudaFuncSetAttribute(kAsyncKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    MLS_CUDA_CHECK(cudaFuncSetAttribute(kPlainKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  });
  auto* kernel = async ? kAsyncKernel : kPlainKernel;
  kernel<<<grid, threads, smem_bytes>>>(M, N, K, alpha, A, B, beta, C);
}

/// Launches one WMMA configuration.
template <int BM, int BN, int BK, int WM, int WN, int kStages>
void launch_wmma(int M, int N, int K, float alpha, const __nv_bfloat16* A, const __nv_bfloat16* B,
                 float beta, float* C, bool async) {
  using S = WmmaShape<BM, BN, BK, WM, WN, kStages>;
  const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  launch_bf16<gemm_bf16_wmma<BM, BN, BK, WM, WN, kStages, true>, gemm_bf16_wmma<BM, BN, BK, WM, WN, kStages, false>>(
      grid, S::kThreads, S::kSmemBytes, async, M, N, K, alpha, A, B, beta, C);
}

// 9. mma.sync: the tensor-core instruction under WMMA, issued directly (inline PTX), with the
// fragments loaded by ldmatrix. What WMMA hides, and what this rung controls:
//  - mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: one warp multiplies a 16x16 bf16 A by a
//    16x8 bf16 B into a 16x8 fp32 accumulator; each lane holds 4 registers of A (8 bf16), 2 of B
//    (4 bf16) and 4 fp32 of C. The layout (g = lane / 4, t = lane % 4): lane holds C at rows g and
//    g + 8, columns 2t and 2t + 1; the exact maps are in src/mma_layout.hpp, tested on the host by
//    emulating ldmatrix and mma with them (tests/test_mma_layout.cpp).
//  - ldmatrix.sync.aligned.m8n8.x4.shared.b16: the warp loads four 8x8 bf16 matrices from shared
//    memory, each lane giving the address of one 16-byte row (lanes 8m .. 8m+7: matrix m) and
//    receiving one register per matrix, already in the fragment layout mma wants: one ldmatrix is a
//    whole A fragment (16x16), one ldmatrix .trans (B is row-major [K][N], mma wants it "col") is
//    the B fragments of two n8 tiles (16 k x 16 n).
//  - the accumulators never leave registers: the epilogue (alpha, beta, bounds) writes each lane's
//    pairs of C straight to global memory (float2 where N is even).
// The block tile is BM x BN with 8 warps (128x256: 2 x 4 warps), each a 64x64 warp tile = 4 m16 x 8
// n8 accumulator tiles (128 fp32 registers per lane): per 16-deep step a warp issues 4 ldmatrix for
// A, 4 ldmatrix .trans for B and 32 mma. The K slices (BK = 32) go global -> shared memory with
// cp.async.cg (16 bytes, as the wmma rung) into a kStages-deep ring with one __syncthreads per slice.
// The fragments are double-buffered across the 16-deep steps: while step kg's 32 mma run, step
// kg + 1's ldmatrix fill the other buffer (at a slice's last step, the next slice's first), and the
// barrier sits one step before a slice ends, so the last step's fragments are already in
// registers when the next slice's copy may overwrite the oldest stage. That is what took this rung
// from WMMA's 0.30 of cuBLAS to 0.52 (H200, n = 4096; handouts/lab4/README.md).
// Shared rows are padded by 8 bf16: with BK = 32 an A row is 80 bytes, and the 8 rows of an ldmatrix
// matrix land on 8 distinct groups of 4 banks (offsets 0, 20, 8, 28, 16, 4, 24, 12 words mod 32);
// B rows (BN + 8 bf16) step by 4 banks likewise. Blocks are rasterized in panels of 8 tile rows
// (mma_layout::block_tile) so the blocks resident together reuse A and B from L2.
template <int BM, int BN, int BK, int WM, int WN, int kStages>
struct MmaShape {
  static constexpr int kWarps = (BM / WM) * (BN / WN), kThreads = kWarps * 32;
  static constexpr int kLdA = BK + 8, kLdB = BN + 8;  // padded rows (bf16)
  static constexpr int kStageA = BM * kLdA, kStageB = BK * kLdB;  // bf16 per stage
  static constexpr int kSmemBytes = kStages * (kStageA + kStageB) * 2;
  static constexpr int FM = WM / 16, FN = WN / 8;  // m16 x n8 accumulator tiles per warp
  static constexpr int kGroup = 8;                 // tile rows per rasterization panel
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "tile shapes");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one block (sm_80+: 227 KiB at most)");
};

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  (void)r, (void)addr;
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  (void)r, (void)addr;
#endif
}
/// d += a * b on one m16n8k16 tile (a: 4 x .b32, b: 2 x .b32, d: 4 x f32).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
#endif
}

template <int BM, int BN, int BK, int WM, int WN, int kStages, bool kAsync>
__global__ void __launch_bounds__(MmaShape<BM, BN, BK, WM, WN, kStages>::kThreads, 1)
    gemm_bf16_mma(int M, int N, int K, float alpha, const __nv_bfloat16* A, const __nv_bfloat16* B, float beta,
                  float* C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace L = mma_layout;
  using S = MmaShape<BM, BN, BK, WM, WN, kStages>;
  constexpr int FM = S::FM, FN = S::FN, kLdA = S::kLdA, kLdB = S::kLdB;
  extern __shared__ __align__(16) unsigned char mma_smem[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(mma_smem);  // kStages x [BM][kLdA]
  __nv_bfloat16* Bs = As + kStages * S::kStageA;                      // kStages x [BK][kLdB]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wrow = (warp / (BN / WN)) * WM, wcol = (warp % (BN / WN)) * WN;
  const L::RowCol tile = L::block_tile(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, S::kGroup);
  const int row0 = tile.row * BM, col0 = tile.col * BN;
  auto load = [&](int stage, int k0) {
    load_bf16_slice<BM, BN, BK, kLdA, kLdB, S::kThreads, kAsync>(As + stage * S::kStageA, Bs + stage * S::kStageB, A,
                                                                  B, M, N, K, row0, col0, k0);
  };

  float acc[FM][FN][4];  // (FM x 16) x (FN x 8) of C, in the m16n8 accumulator layout
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  }

  // Fragments double-buffered across the 16-deep steps: step kg multiplies fa/fb[kg % 2] while
  // step kg + 1's are read from shared memory into the other buffer (the next slice's first step
  // during a slice's last one), so no mma waits for an ldmatrix it could have overlapped.
  constexpr int KG = BK / 16;  // 16-deep steps per slice (even: the buffers alternate in step)
  static_assert(KG % 2 == 0, "BK must be a multiple of 32");
  unsigned fa[2][FM][4], fb[2][FN / 2][4];  // A: one 16x16 fragment per m16; B: two n8 tiles per ldmatrix
  auto load_fragments = [&](int buf, int stage, int kk) {
    const unsigned as = smem_u32(As + stage * S::kStageA), bs = smem_u32(Bs + stage * S::kStageB);
#pragma unroll
    for (int i = 0; i < FM; ++i) ldmatrix_x4(fa[buf][i], as + 2 * L::ldmatrix_x4_offset(lane, wrow + 16 * i, kk, kLdA));
#pragma unroll
    for (int j = 0; j < FN / 2; ++j) {
      ldmatrix_x4_trans(fb[buf][j], bs + 2 * L::ldmatrix_x4_offset(lane, kk, wcol + 16 * j, kLdB));
    }
  };

  const int slices = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load(s, s * BK);
    cp_async_commit();  // (an empty group past the end keeps the count uniform)
  }
  cp_async_wait<kStages - 2>();  // group 0 has landed: slice 0 is here
  __syncthreads();
  load_fragments(0, 0, 0);
  for (int s = 0; s < slices; ++s) {
    const int stage = s % kStages, following = (s + 1) % kStages;
#pragma unroll
    for (int kg = 0; kg < KG; ++kg) {
      // the next step's fragments: this slice's, or at the last step the next slice's first ones
      // (past the last slice: stale shared memory, never multiplied)
      if (kg + 1 < KG) load_fragments((kg + 1) % 2, stage, 16 * (kg + 1));
      else load_fragments(0, following, 0);
      if (kg == 0) {  // slice s + kStages - 1 into the stage slice s - 1 used (read before the last barrier)
        const int next = s + kStages - 1;
        if (next < slices) load(next % kStages, next * BK);
      }
#pragma unroll
      for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
          mma_bf16_16816(acc[i][j], fa[kg % 2][i], fb[kg % 2][j / 2][2 * (j % 2)], fb[kg % 2][j / 2][2 * (j % 2) + 1]);
        }
      }
      if (kg == KG - 2) {
        // Slice s + 1 must be in shared memory (for every thread) before the last step reads its
        // first fragments; the last step's own fragments are in registers already, so after this
        // barrier nobody reads slice s's stage, and the next iteration may overwrite it.
        cp_async_commit();
        cp_async_wait<kStages - 2>();  // groups 0 .. s+1 have landed
        __syncthreads();
      }
    }
  }
  cp_async_wait<0>();  // (only empty groups can be left; nothing reads the ring after this)

  const bool pairs = N % 2 == 0 && reinterpret_cast<std::uintptr_t>(C) % 8 == 0;  // float2 stores
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // accumulators 2h, 2h+1: one row, two adjacent columns
        const L::RowCol e = L::c_element(lane, 2 * h);
        const int r = row0 + wrow + 16 * i + e.row, c = col0 + wcol + 8 * j + e.col;
        if (r >= M || c >= N) continue;
        float* dst = &C[static_cast<size_t>(r) * N + c];
        const float v0 = epilogue(acc[i][j][2 * h], alpha, beta, dst);
        if (pairs) {  // N even: c + 1 < N too
          *reinterpret_cast<float2*>(dst) = make_float2(v0, epilogue(acc[i][j][2 * h + 1], alpha, beta, dst + 1));
        } else {
          *dst = v0;
          if (c + 1 < N) dst[1] = epilogue(acc[i][j][2 * h + 1], alpha, beta, dst + 1);
        }
      }
    }
  }
#else
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)B, (void)beta, (void)C;
#endif
}

/// Launches one mma.sync configuration: a 1-D grid of tiles (rasterized in the kernel).
template <int BM, int BN, int BK, int WM, int WN, int kStages>
void launch_mma(int M, int N, int K, float alpha, const __nv_bfloat16* A, const __nv_bfloat16* B, float beta,
                float* C, bool async) {
  using S = MmaShape<BM, BN, BK, WM, WN, kStages>;
  const long tiles = static_cast<long>((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  MLS_CHECK(tiles < (1L << 31), "cuda::gemm_bf16[mma]: ", tiles, " block tiles exceed the grid limit (2^31 - 1)");
  launch_bf16<gemm_bf16_mma<BM, BN, BK, WM, WN, kStages, true>, gemm_bf16_mma<BM, BN, BK, WM, WN, kStages, false>>(
      dim3(static_cast<unsigned>(tiles)), S::kThreads, S::kSmemBytes, async, M, N, K, alpha, A, B, beta, C);
}

// ---- memory-bound kernels ------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Block-wide reduction of 256 threads (8 warps) through shared memory; every thread gets it.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  return v;
}

__global__ void softmax_kernel(float* out, const float* inp, int cols) {
  __shared__ float shared[32];
  const float* x = inp + static_cast<size_t>(blockIdx.x) * cols;
  float* y = out + static_cast<size_t>(blockIdx.x) * cols;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, x[c]);
  mx = block_reduce<true>(mx, shared);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(x[c] - mx);
  sum = block_reduce<false>(sum, shared);
  const float inv = 1.0f / sum;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = expf(x[c] - mx) * inv;
}

__global__ void layernorm_kernel(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int rows, int cols,
                                 float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* x = inp + static_cast<size_t>(row) * cols;
  float s = 0.0f;
  for (int c = lane; c < cols; c += 32) s += x[c];
  const float m = warp_sum(s) / cols;
  float v = 0.0f;
  for (int c = lane; c < cols; c += 32) v += (x[c] - m) * (x[c] - m);
  const float rs = rsqrtf(warp_sum(v) / cols + eps);
  float* y = out + static_cast<size_t>(row) * cols;
  for (int c = lane; c < cols; c += 32) y[c] = (x[c] - m) * rs * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// Rows held in registers: a row is read from global memory once and written once (the kernels
// above read it two or three times). kThreads threads share a row (32: a warp, reductions with
// shuffles; 256: a block, reductions through shared memory), each holding kVec float4s:
// element c of the row is at v[c / (4 * kThreads)] of thread (c / 4) % kThreads, so a warp's
// float4 loads are contiguous. Needs cols % 4 == 0, 16-byte aligned rows, and
// cols <= 4 * kThreads * kVec.
template <int kThreads, bool kMax>
__device__ __forceinline__ float row_reduce(float v, float* shared) {
  if constexpr (kThreads == 32) {
    return kMax ? warp_max(v) : warp_sum(v);
  } else {
    return block_reduce<kMax>(v, shared);
  }
}

template <int kThreads, int kVec>
__device__ __forceinline__ void load_row(float4 (&v)[kVec], const float* x, int cols, int t, float fill) {
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int c = (q * kThreads + t) * 4;
    v[q] = c < cols ? *reinterpret_cast<const float4*>(&x[c]) : make_float4(fill, fill, fill, fill);
  }
}

template <int kThreads, int kVec>
__global__ void __launch_bounds__(256) softmax_rows_kernel(float* out, const float* inp, int rows, int cols) {
  __shared__ float shared[32];
  const int row = blockIdx.x * (blockDim.x / kThreads) + threadIdx.x / kThreads, t = threadIdx.x % kThreads;
  if (row >= rows) return;  // kThreads == 256: the whole block; 32: the whole warp
  const float* x = inp + static_cast<size_t>(row) * cols;
  float4 v[kVec];
  load_row<kThreads>(v, x, cols, t, -INFINITY);
  float mx = -INFINITY;
#pragma unroll
  for (int q = 0; q < kVec; ++q) mx = fmaxf(mx, fmaxf(fmaxf(v[q].x, v[q].y), fmaxf(v[q].z, v[q].w)));
  mx = row_reduce<kThreads, true>(mx, shared);
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    v[q] = make_float4(expf(v[q].x - mx), expf(v[q].y - mx), expf(v[q].z - mx), expf(v[q].w - mx));
    if ((q * kThreads + t) * 4 < cols) sum += (v[q].x + v[q].y) + (v[q].z + v[q].w);
  }
  sum = row_reduce<kThreads, false>(sum, shared);
  const float inv = 1.0f / sum;
  float* y = out + static_cast<size_t>(row) * cols;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int c = (q * kThreads + t) * 4;
    if (c < cols) *reinterpret_cast<float4*>(&y[c]) = make_float4(v[q].x * inv, v[q].y * inv, v[q].z * inv, v[q].w * inv);
  }
}

template <int kThreads, int kVec>
__global__ void __launch_bounds__(256) layernorm_rows_kernel(float* out, float* mean, float* rstd, const float* inp,
                                                             const float* weight, const float* bias, int rows,
                                                             int cols, float eps) {
  __shared__ float shared[32];
  const int row = blockIdx.x * (blockDim.x / kThreads) + threadIdx.x / kThreads, t = threadIdx.x % kThreads;
  if (row >= rows) return;
  float4 v[kVec];
  load_row<kThreads>(v, inp + static_cast<size_t>(row) * cols, cols, t, 0.0f);
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) s += (v[q].x + v[q].y) + (v[q].z + v[q].w);
  const float m = row_reduce<kThreads, false>(s, shared) / cols;
  float var = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    if ((q * kThreads + t) * 4 < cols) {
      const float a = v[q].x - m, b = v[q].y - m, c = v[q].z - m, d = v[q].w - m;
      var += (a * a + b * b) + (c * c + d * d);
    }
  }
  const float rs = rsqrtf(row_reduce<kThreads, false>(var, shared) / cols + eps);
  float* y = out + static_cast<size_t>(row) * cols;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int c = (q * kThreads + t) * 4;
    if (c < cols) {
      const float4 w = *reinterpret_cast<const float4*>(&weight[c]);
      const float4 b = *reinterpret_cast<const float4*>(&bias[c]);
      *reinterpret_cast<float4*>(&y[c]) =
          make_float4((v[q].x - m) * rs * w.x + b.x, (v[q].y - m) * rs * w.y + b.y,
                      (v[q].z - m) * rs * w.z + b.z, (v[q].w - m) * rs * w.w + b.w);
    }
  }
  if (t == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

/// Picks the row kernel for `cols` (cols % 4 == 0, aligned): a warp per row up to 1024 columns,
/// a 256-thread block per row up to 8192, with the fewest float4s per thread that hold the row.
/// Returns false when no row kernel fits (the caller falls back to the kernels above).
template <template <int, int> class Launch, class... Args>
bool launch_rows(int rows, int cols, Args... args) {
  const int rows_per_warp_block = 8;  // 256 threads = 8 warps = 8 rows
  const int warp_grid = (rows + rows_per_warp_block - 1) / rows_per_warp_block;
  if (cols <= 128) return Launch<32, 1>::run(warp_grid, args...), true;
  if (cols <= 256) return Launch<32, 2>::run(warp_grid, args...), true;
  if (cols <= 512) return Launch<32, 4>::run(warp_grid, args...), true;
  if (cols <= 1024) return Launch<32, 8>::run(warp_grid, args...), true;
  if (cols <= 2048) return Launch<256, 2>::run(rows, args...), true;
  if (cols <= 4096) return Launch<256, 4>::run(rows, args...), true;
  if (cols <= 8192) return Launch<256, 8>::run(rows, args...), true;
  return false;
}
template <int kThreads, int kVec>
struct SoftmaxRows {
  static void run(int grid, float* out, const float* inp, int rows, int cols) {
    softmax_rows_kernel<kThreads, kVec><<<grid, 256>>>(out, inp, rows, cols);
  }
};
template <int kThreads, int kVec>
struct LayernormRows {
  static void run(int grid, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                  const float* bias, int rows, int cols, float eps) {
    layernorm_rows_kernel<kThreads, kVec><<<grid, 256>>>(out, mean, rstd, inp, weight, bias, rows, cols, eps);
  }
};

/// bias + GELU on float4s (cols % 4 == 0, aligned): the 4 elements share one row.
__global__ void bias_gelu_vec4_kernel(float4* out, const float4* inp, const float4* bias, long n4, int cols4) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n4) return;
  const float4 x = inp[i], b = bias[i % cols4];
  auto gelu = [](float v) {
    const float u = static_cast<float>(mls::kGeluK) * (v + static_cast<float>(mls::kGeluC) * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
  };
  out[i] = make_float4(gelu(x.x + b.x), gelu(x.y + b.y), gelu(x.z + b.z), gelu(x.w + b.w));
}

__global__ void bias_gelu_kernel(float* out, const float* inp, const float* bias, int rows,
                                 int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i] + bias[i % cols];
    const float u = static_cast<float>(mls::kGeluK) * (x + static_cast<float>(mls::kGeluC) * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }
[[maybe_unused]] bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// Compute capability of device 0 as 10 * major + minor (e.g. 90 for an H100).
int compute_capability() {
  static const int cc = [] {
    cudaDeviceProp prop{};
    MLS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return 10 * prop.major + prop.minor;
  }();
  return cc;
}

cublasHandle_t cublas_handle() {
  static std::once_flag once;
  static cublasHandle_t handle = nullptr;
  std::call_once(once, [] {
    MLS_CUBLAS_CHECK(cublasCreate(&handle));
    MLS_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // FP32, no TF32
  });
  return handle;
}

/// Multiprocessors of device 0 (132 on an H100 SXM or an H200).
[[maybe_unused]] int multiprocessors() {
  static const int sms = [] {
    int n = 0;
    MLS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
    return n;
  }();
  return sms;
}

/// The index in warptile_layout::kShapes of the shape a name "warptile_<BM>x<BN>" gives (-1: none).
int warptile_shape_index(std::string_view name) {
  for (int s = 0; s < warptile_layout::kNumShapes; ++s) {
    const auto& t = warptile_layout::kShapes[s];
    if (name == "warptile_" + std::to_string(t.bm) + "x" + std::to_string(t.bn)) return s;
  }
  return -1;
}

/// sgemm_warptile with block tile BM x BN and warp tile WM x WN (4 warps), K slices of 16, thread
/// tiles of 8 x 4; float4 loads and stores when `vec`.
template <int BM, int BN, int WM, int WN>
[[maybe_unused]] void launch_warptile(bool vec, int M, int N, int K, float alpha, const float* A, const float* B,
                                      float beta, float* C) {
  namespace W = warptile_layout;
  static_assert((BM / WM) * (BN / WN) == 4, "4 warps");
  const dim3 grid(ceil_div(N, BN), ceil_div(M, BM));
  if (vec) {
    sgemm_warptile<BM, BN, W::kBK, WM, WN, W::kTM, W::kTN, true><<<grid, 128>>>(M, N, K, alpha, A, B, beta, C);
  } else {
    sgemm_warptile<BM, BN, W::kBK, WM, WN, W::kTM, W::kTN, false><<<grid, 128>>>(M, N, K, alpha, A, B, beta, C);
  }
  MLS_CUDA_CHECK_LAUNCH("sgemm_warptile");
}

}  // namespace

bool available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) {
      *why = err != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err)
                                : std::string("cudaGetDeviceCount: 0 devices");
    }
    cudaGetLastError();  // clear the sticky error of a failed query
    return false;
  }
  return true;
}

std::string device_name() {
  cudaDeviceProp prop{};
  MLS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.name;
}

std::vector<std::string> sgemm_kernels() {
  return {"naive", "coalesced", "smem", "tile1d", "tile2d", "vec4", "warptile", "cublas"};
}

std::vector<std::string> sgemm_warptile_shapes() {
  std::vector<std::string> out;
  for (const auto& t : warptile_layout::kShapes) out.push_back("warptile_" + std::to_string(t.bm) + "x" + std::to_string(t.bn));
  return out;
}

void sgemm(std::string_view name, int M, int N, int K, float alpha, const float* A,
           const float* B, float beta, float* C) {
  const auto known = sgemm_kernels();
  if (std::find(known.begin(), known.end(), name) == known.end() && warptile_shape_index(name) < 0) {
    fail("cuda::sgemm: unknown kernel '", name,
         "'; expected naive, coalesced, smem, tile1d, tile2d, vec4, warptile, warptile_128x128, warptile_64x128, "
         "warptile_64x64 or cublas");
  }
  MLS_CHECK(M >= 0 && N >= 0 && K >= 0, "cuda::sgemm[", name, "]: sizes must be >= 0, got M=", M,
            " N=", N, " K=", K);
  MLS_CHECK((A && B && C) || M == 0 || N == 0, "cuda::sgemm[", name, "]: null device pointer");
  if (M == 0 || N == 0) return;
  if (name == "naive") {
    // BEGIN SOLUTION
    const dim3 block(32, 32), grid(ceil_div(M, 32), ceil_div(N, 32));
    sgemm_naive<<<grid, block>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_naive");
    // END SOLUTION
  } else if (name == "coalesced") {
    // BEGIN SOLUTION
    const dim3 block(32, 32), grid(ceil_div(N, 32), ceil_div(M, 32));
    sgemm_coalesced<<<grid, block>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_coalesced");
    // END SOLUTION
  } else if (name == "smem") {
    // BEGIN SOLUTION
    const dim3 block(kTile, kTile), grid(ceil_div(N, kTile), ceil_div(M, kTile));
    sgemm_smem<<<grid, block>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_smem");
    // END SOLUTION
  } else if (name == "tile1d") {
    // BEGIN SOLUTION
    const dim3 grid(ceil_div(N, 64), ceil_div(M, 64));
    sgemm_regtile<64, 64, 8, 8, 1><<<grid, (64 / 8) * 64>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_tile1d");
    // END SOLUTION
  } else if (name == "tile2d" || (name == "vec4" && (N % 4 != 0 || K % 4 != 0))) {
    // BEGIN SOLUTION
    const dim3 grid(ceil_div(N, 128), ceil_div(M, 128));
    sgemm_regtile<128, 128, 8, 8, 8><<<grid, 256>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_tile2d");
    // END SOLUTION
  } else if (name == "vec4") {
    // BEGIN SOLUTION
    const dim3 grid(ceil_div(N, 128), ceil_div(M, 128));
    sgemm_vec4<128, 128, 8, 8, 8><<<grid, 256>>>(M, N, K, alpha, A, B, beta, C);
    MLS_CUDA_CHECK_LAUNCH("sgemm_vec4");
    // END SOLUTION
  } else if (name == "warptile" || warptile_shape_index(name) >= 0) {
    // BEGIN SOLUTION
    // The block tile by the grid it yields (warptile_layout::choose_shape), or the one a name gives.
    const int shape = name == "warptile" ? warptile_layout::choose_shape(M, N, multiprocessors())
                                         : warptile_shape_index(name);
    const bool vec = N % 4 == 0 && K % 4 == 0 && aligned16(A) && aligned16(B) && aligned16(C);
    if (shape == 0) {
      launch_warptile<128, 128, 64, 64>(vec, M, N, K, alpha, A, B, beta, C);
    } else if (shape == 1) {
      launch_warptile<64, 128, 32, 64>(vec, M, N, K, alpha, A, B, beta, C);
    } else {
      launch_warptile<64, 64, 32, 32>(vec, M, N, K, alpha, A, B, beta, C);
    }
    // END SOLUTION
  } else if (name == "cublas") {
    // Row-major C = A B is column-major C^T = B^T A^T: swap the operands.
    MLS_CUBLAS_CHECK(cublasSgemm(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N,
                                 A, K, &beta, C, N));
  } else {
    fail("cuda::sgemm: unknown kernel '", name,
         "'; expected naive, coalesced, smem, tile1d, tile2d, vec4, warptile or cublas");
  }
}

std::vector<std::string> gemm_bf16_kernels() { return {"wmma", "mma", "cublas"}; }
std::vector<std::string> gemm_bf16_shapes() {
  return {"wmma_128x128x32x4", "wmma_128x128x32x3", "wmma_128x128x32x5", "wmma_128x128x64x4",
          "wmma_64x128x32x4",  "wmma_128x256x32x3", "mma_128x256x32x3",  "mma_128x256x32x5",
          "mma_256x128x32x4",  "mma_128x256x64x3",  "mma_128x128x32x4"};
}

void gemm_bf16(std::string_view name, int M, int N, int K, float alpha, const std::uint16_t* A,
               const std::uint16_t* B, float beta, float* C) {
  const bool wmma = name == "wmma" || name.rfind("wmma_", 0) == 0, mma = name == "mma" || name.rfind("mma_", 0) == 0;
  if (!wmma && !mma && name != "cublas") {
    fail("cuda::gemm_bf16: unknown kernel '", name, "'; expected wmma, mma or cublas");
  }
  MLS_CHECK(M >= 0 && N >= 0 && K >= 0, "cuda::gemm_bf16[", name, "]: sizes must be >= 0, got M=", M,
            " N=", N, " K=", K);
  // (K == 0: A and B are empty, C = beta * C)
  MLS_CHECK((C && ((A && B) || K == 0)) || M == 0 || N == 0, "cuda::gemm_bf16[", name, "]: null device pointer");
  if (M == 0 || N == 0) return;
  const auto* a = reinterpret_cast<const __nv_bfloat16*>(A);
  const auto* b = reinterpret_cast<const __nv_bfloat16*>(B);
  if (wmma || mma) {
    const int cc = compute_capability();
    MLS_CHECK(cc >= 80, "cuda::gemm_bf16[", name,
              "]: needs bf16 tensor cores (compute capability 8.0 or newer); this GPU is ", cc / 10, ".", cc % 10);
  }
  if (name == "wmma") {
    // BEGIN SOLUTION
    const bool async = K % 8 == 0 && N % 8 == 0 && aligned16(A) && aligned16(B);
    launch_wmma<128, 128, 64, 64, 64, 3>(M, N, K, alpha, a, b, beta, C, async);
    MLS_CUDA_CHECK_LAUNCH("gemm_bf16_wmma");
    // END SOLUTION
  } else if (name.rfind("wmma_", 0) == 0) {  // other shapes of the WMMA kernel (benchmarks: mls-cuda-sgemm-bench --bf16)
    const bool async = K % 8 == 0 && N % 8 == 0 && aligned16(A) && aligned16(B);
    if (name == "wmma_128x128x32x4") launch_wmma<128, 128, 32, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "wmma_128x128x32x3") launch_wmma<128, 128, 32, 64, 64, 3>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "wmma_128x128x32x5") launch_wmma<128, 128, 32, 64, 64, 5>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "wmma_128x128x64x4") launch_wmma<128, 128, 64, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "wmma_64x128x32x4") launch_wmma<64, 128, 32, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "wmma_128x256x32x3") launch_wmma<128, 256, 32, 64, 64, 3>(M, N, K, alpha, a, b, beta, C, async);
    else fail("cuda::gemm_bf16: unknown kernel '", name, "'");
    MLS_CUDA_CHECK_LAUNCH("gemm_bf16_wmma");
  } else if (mma) {
    // the ladder's last rung: reference code, shown (src/mma_layout.hpp, gemm_bf16_mma above); the
    // shapes mma_<BM>x<BN>x<BK>x<stages> are for the benchmark's sweeps (--bf16 mma,mma_...)
    const bool async = K % 8 == 0 && N % 8 == 0 && aligned16(A) && aligned16(B);
    if (name == "mma") launch_mma<128, 256, 32, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "mma_128x256x32x3") launch_mma<128, 256, 32, 64, 64, 3>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "mma_128x256x32x5") launch_mma<128, 256, 32, 64, 64, 5>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "mma_256x128x32x4") launch_mma<256, 128, 32, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "mma_128x256x64x3") launch_mma<128, 256, 64, 64, 64, 3>(M, N, K, alpha, a, b, beta, C, async);
    else if (name == "mma_128x128x32x4") launch_mma<128, 128, 32, 64, 64, 4>(M, N, K, alpha, a, b, beta, C, async);
    else fail("cuda::gemm_bf16: unknown kernel '", name, "'; expected mma, mma_128x256x32x3, mma_128x256x32x5, ",
              "mma_256x128x32x4, mma_128x256x64x3 or mma_128x128x32x4");
    MLS_CUDA_CHECK_LAUNCH("gemm_bf16_mma");
  } else {
    // Row-major C = A B is column-major C^T = B^T A^T: swap the operands. (K == 0: cuBLAS still
    // wants a leading dimension of A^T >= 1.)
    MLS_CUBLAS_CHECK(cublasGemmEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, b, CUDA_R_16BF, N, a,
                                  CUDA_R_16BF, std::max(K, 1), &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
  }
}


double time_gemm_bf16_ms(std::string_view name, int M, int N, int K, const std::uint16_t* A,
                         const std::uint16_t* B, float* C, int reps) {
  return time_batches_ms([&] { gemm_bf16(name, M, N, K, 1.0f, A, B, 0.0f, C); }, 1, reps).front();
}

double time_sgemm_ms(std::string_view name, int M, int N, int K, const float* A, const float* B,
                     float* C, int reps) {
  return time_batches_ms([&] { sgemm(name, M, N, K, 1.0f, A, B, 0.0f, C); }, 1, reps).front();
}

void softmax_forward(float* out, const float* inp, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  // BEGIN SOLUTION
  if (!(cols % 4 == 0 && aligned16(out) && aligned16(inp) && launch_rows<SoftmaxRows>(rows, cols, out, inp, rows, cols))) {
    softmax_kernel<<<rows, 256>>>(out, inp, cols);
  }
  MLS_CUDA_CHECK_LAUNCH("softmax_kernel");
  // END SOLUTION
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int rows, int cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  // BEGIN SOLUTION
  const bool vec = cols % 4 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias);
  if (!(vec && launch_rows<LayernormRows>(rows, cols, out, mean, rstd, inp, weight, bias, rows, cols, eps))) {
    layernorm_kernel<<<ceil_div(rows, 8), 256>>>(out, mean, rstd, inp, weight, bias, rows, cols, eps);
  }
  MLS_CUDA_CHECK_LAUNCH("layernorm_kernel");
  // END SOLUTION
}

void bias_gelu_forward(float* out, const float* inp, const float* bias, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  // BEGIN SOLUTION
  const long n = static_cast<long>(rows) * cols;
  if (cols % 4 == 0 && aligned16(out) && aligned16(inp) && aligned16(bias)) {
    const long n4 = n / 4;
    bias_gelu_vec4_kernel<<<static_cast<unsigned>((n4 + 255) / 256), 256>>>(
        reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(inp), reinterpret_cast<const float4*>(bias), n4,
        cols / 4);
  } else {
    const int blocks = static_cast<int>(std::min<long>((n + 255) / 256, 65535));
    bias_gelu_kernel<<<blocks, 256>>>(out, inp, bias, rows, cols);
  }
  MLS_CUDA_CHECK_LAUNCH("bias_gelu_kernel");
  // END SOLUTION
}

void* device_alloc_bytes(std::size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  MLS_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void device_free_bytes(void* p) {
  if (p) cudaFree(p);  // never throws (destructors)
}
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) MLS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) MLS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void synchronize() { MLS_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace mls::kernels::cuda
