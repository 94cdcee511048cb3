#pragma once
// Lab 4, the `warptile` rung of the CUDA ladder: its kernel, included by src/kernels_cuda.cu (which
// launches it, choosing the block tile: warptile_layout::choose_shape) and, compiled as C++ behind the
// CUDA emulator's prelude (tests/cuda_emulator.hpp: a std::thread per CUDA thread, __syncthreads() a
// barrier), by tests/test_warptile_emulated.cpp, which runs every block tile on awkward sizes against
// a naive product with no GPU. Plain CUDA C++ with no header of CUDA's: float4, make_float4,
// threadIdx, blockIdx and __syncthreads are the compiler's (or the emulator's).
#include "warptile_layout.hpp"

namespace mls::kernels::cuda {

/// C = alpha * acc + beta * C (beta == 0: C not read).
__device__ __forceinline__ float epilogue(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

// 7. warp tiling (the last FP32 rung): the block tile (BM x BN) is split into warp tiles
// (WM x WN), and a warp's 32 lanes, as 4 rows x 8 columns, each own a TM x TN thread tile
// repeated WMITER x WNITER times inside the warp tile. A warp then reads a compact part of shared
// memory (broadcasts, no bank conflicts), and every thread keeps (WMITER*TM) x (WNITER*TN) sums
// in registers. Shared memory is double-buffered: the next BK slice of A and B travels from
// global memory into registers while this slice is multiplied, then into the other buffer (one
// __syncthreads per slice). kVec: float4 global loads and stores (N % 4 == 0, K % 4 == 0, 16-byte
// aligned pointers); otherwise scalar, bounds-checked loads. The index maps (which float4 of a slice a
// thread loads, which outputs it owns) are src/warptile_layout.hpp's, checked on the host; the block
// tile is chosen per problem there too (warptile_layout::choose_shape: 128x128, 64x128 or 64x64).
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, bool kVec>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    sgemm_warptile(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                   float* C) {
  namespace W = warptile_layout;
  constexpr int kWarpsN = BN / WN, kThreads = (BM / WM) * kWarpsN * 32;
  constexpr int kSubM = W::kLaneRows * TM, kSubN = W::kLaneCols * TN;
  constexpr int WMITER = WM / kSubM, WNITER = WN / kSubN;
  constexpr int kLoadA = BM * BK / 4 / kThreads, kLoadB = BK * BN / 4 / kThreads;  // float4s
  static_assert(WM % kSubM == 0 && WN % kSubN == 0 && TM % 4 == 0 && TN % 4 == 0, "tile shapes");
  static_assert(kLoadA * 4 * kThreads == BM * BK && kLoadB * 4 * kThreads == BK * BN, "loads");
  __shared__ __align__(16) float As[2][BK][BM];  // transposed: a column of the A slice is contiguous
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // This thread's tile in sub-tile (0, 0); sub-tile (wm, wn) is kSubM * wm rows and kSubN * wn columns on.
  const W::RowCol t0 = W::thread_tile(warp, lane, 0, 0, BN, WM, WN, TM, TN);
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

  float4 pa[kLoadA], pb[kLoadB];  // the slice in flight
  auto fetch = [&](int k0) {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const W::RowCol e = W::load_element(tid + l * kThreads, BK);
      const int gr = row0 + e.row, gc = k0 + e.col;
      if (kVec) {
        pa[l] = (gr < M && gc < K) ? *reinterpret_cast<const float4*>(&A[static_cast<size_t>(gr) * K + gc])
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        const float* a = &A[static_cast<size_t>(gr) * K + gc];
        const bool in = gr < M;
        pa[l] = make_float4(in && gc < K ? a[0] : 0.f, in && gc + 1 < K ? a[1] : 0.f,
                            in && gc + 2 < K ? a[2] : 0.f, in && gc + 3 < K ? a[3] : 0.f);
      }
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const W::RowCol e = W::load_element(tid + l * kThreads, BN);
      const int gr = k0 + e.row, gc = col0 + e.col;
      if (kVec) {
        pb[l] = (gr < K && gc < N) ? *reinterpret_cast<const float4*>(&B[static_cast<size_t>(gr) * N + gc])
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
      } else {
        const float* b = &B[static_cast<size_t>(gr) * N + gc];
        const bool in = gr < K;
        pb[l] = make_float4(in && gc < N ? b[0] : 0.f, in && gc + 1 < N ? b[1] : 0.f,
                            in && gc + 2 < N ? b[2] : 0.f, in && gc + 3 < N ? b[3] : 0.f);
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const W::RowCol e = W::load_element(tid + l * kThreads, BK);
      As[buf][e.col + 0][e.row] = pa[l].x;
      As[buf][e.col + 1][e.row] = pa[l].y;
      As[buf][e.col + 2][e.row] = pa[l].z;
      As[buf][e.col + 3][e.row] = pa[l].w;
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const W::RowCol e = W::load_element(tid + l * kThreads, BN);
      *reinterpret_cast<float4*>(&Bs[buf][e.row][e.col]) = pb[l];
    }
  };

  float acc[WMITER * TM][WNITER * TN] = {};
  float ra[WMITER * TM], rb[WNITER * TN];
  fetch(0);
  stash(0);
  __syncthreads();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) fetch(k0 + BK);  // in flight during the multiply below
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
      for (int wm = 0; wm < WMITER; ++wm) {
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
          const float4 v = *reinterpret_cast<const float4*>(&As[buf][k][t0.row + wm * kSubM + i]);
          ra[wm * TM + i] = v.x, ra[wm * TM + i + 1] = v.y, ra[wm * TM + i + 2] = v.z, ra[wm * TM + i + 3] = v.w;
        }
      }
#pragma unroll
      for (int wn = 0; wn < WNITER; ++wn) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const float4 v = *reinterpret_cast<const float4*>(&Bs[buf][k][t0.col + wn * kSubN + j]);
          rb[wn * TN + j] = v.x, rb[wn * TN + j + 1] = v.y, rb[wn * TN + j + 2] = v.z, rb[wn * TN + j + 3] = v.w;
        }
      }
#pragma unroll
      for (int i = 0; i < WMITER * TM; ++i) {
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] += ra[i] * rb[j];
      }
    }
    // Nobody reads buffer buf^1 now: every thread finished its multiply of it before the
    // __syncthreads that ended the previous slice.
    if (more) stash(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }

#pragma unroll
  for (int wm = 0; wm < WMITER; ++wm) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = row0 + t0.row + wm * kSubM + i;
      if (r >= M) continue;
#pragma unroll
      for (int wn = 0; wn < WNITER; ++wn) {
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const int c = col0 + t0.col + wn * kSubN + j;
          const float* s = &acc[wm * TM + i][wn * TN + j];
          float* dst = &C[static_cast<size_t>(r) * N + c];
          if (kVec) {
            if (c >= N) continue;  // N % 4 == 0: the 4 columns are all in or all out
            float4 out = make_float4(alpha * s[0], alpha * s[1], alpha * s[2], alpha * s[3]);
            if (beta != 0.0f) {
              const float4 old = *reinterpret_cast<const float4*>(dst);
              out.x += beta * old.x, out.y += beta * old.y, out.z += beta * old.z, out.w += beta * old.w;
            }
            *reinterpret_cast<float4*>(dst) = out;
          } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              if (c + q < N) dst[q] = epilogue(s[q], alpha, beta, &dst[q]);
            }
          }
        }
      }
    }
  }
}

}  // namespace mls::kernels::cuda
