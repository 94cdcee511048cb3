// Lab 4: tiled (flash) attention forward on the GPU (see mls/kernels/cuda.hpp and, for the
// algorithm, the CPU kernel's mls/kernels/attention.hpp). Given code, not a student file.
//
// One block of 4 warps per 16 query rows of one (batch, head): each warp owns 4 rows. The keys
// and values stream through shared memory 32 at a time (one per lane of a warp): lane j computes
// the score of key j for a row, the warp reduces the block's max and sum with shuffles (the
// online softmax: running max m and sum l per row, the output rescaled by exp(m_old - m_new)),
// then each lane accumulates head dimensions lane, lane + 32, ... of the row's output with the
// 32 probabilities broadcast by shuffles. Nothing of size T × T exists; the output and the
// log-sum-exp lse = m + log l are written once per row.
#include <cuda_runtime.h>

#include <cmath>

#include "mls/common/error.hpp"
#include "cuda_check.cuh"  // MLS_CUDA_CHECK
#include "mls/kernels/cuda.hpp"


namespace mls::kernels::cuda {

namespace {

constexpr int kWarps = 4;            // warps per block
constexpr int kRowsPerWarp = 4;      // query rows per warp
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block (16)
constexpr int kKeys = 32;            // keys per tile: one per lane
constexpr int kMaxHs = 128;          // head size limit: kMaxHs / 32 output values per lane and row
constexpr int kDimsPerLane = kMaxHs / 32;

__device__ __forceinline__ float att_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float att_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// grid (ceil(T / kRows), B * H), block kWarps * 32 threads, dynamic shared memory
/// (kRows * hs + 2 * kKeys * (hs + 1)) floats: the block's q rows (scaled), a K tile and a V
/// tile (rows padded by one float: lane j reads row j, so consecutive lanes hit different banks).
__global__ void __launch_bounds__(kWarps * 32)
    flash_forward_kernel(float* out, float* lse, const float* inp, int T, int C, int H, int hs,
                         bool causal, float scale) {
  extern __shared__ float smem[];
  float* q_s = smem;                      // (kRows, hs)
  float* k_s = q_s + kRows * hs;          // (kKeys, hs + 1)
  float* v_s = k_s + kKeys * (hs + 1);    // (kKeys, hs + 1)
  const int bh = blockIdx.y, b = bh / H, h = bh % H, q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long C3 = 3L * C;
  const float* base = inp + static_cast<long>(b) * T * C3 + static_cast<long>(h) * hs;
  for (int i = threadIdx.x; i < kRows * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs, t = q0 + r;
    q_s[i] = t < T ? base[t * C3 + d] * scale : 0.f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) o[r][i] = 0.f;
  }
  const int kend = causal ? min(T, q0 + kRows) : T;
  for (int k0 = 0; k0 < kend; k0 += kKeys) {
    __syncthreads();  // the previous tile is done with (and q_s written, the first time)
    for (int i = threadIdx.x; i < kKeys * hs; i += blockDim.x) {
      const int j = i / hs, d = i % hs, t2 = k0 + j;
      k_s[j * (hs + 1) + d] = t2 < T ? base[t2 * C3 + C + d] : 0.f;
      v_s[j * (hs + 1) + d] = t2 < T ? base[t2 * C3 + 2 * C + d] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r, t = q0 + row, t2 = k0 + lane;
      if (t >= T) continue;  // the whole warp agrees (t does not depend on the lane)
      float s = -INFINITY;
      if (t2 < T && (!causal || t2 <= t)) {
        const float* q = q_s + row * hs;
        const float* k = k_s + lane * (hs + 1);
        float acc = 0.f;
        for (int d = 0; d < hs; ++d) acc += q[d] * k[d];
        s = acc;
      }
      // online softmax: fold this tile into the row's running max and sum
      const float m_new = fmaxf(m[r], att_warp_max(s));
      if (m_new == -INFINITY) continue;  // nothing visible yet (cannot happen with k0 <= t)
      const float p = s == -INFINITY ? 0.f : __expf(s - m_new);
      const float alpha = m[r] == -INFINITY ? 0.f : __expf(m[r] - m_new);
      l[r] = l[r] * alpha + att_warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) o[r][i] *= alpha;
      for (int j = 0; j < kKeys; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float* v = v_s + j * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) o[r][i] += pj * v[d];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= T) continue;
    const float inv = 1.f / l[r];
    float* y = out + (static_cast<long>(b) * T + t) * C + static_cast<long>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) y[d] = o[r][i] * inv;
    }
    if (lane == 0) lse[static_cast<long>(bh) * T + t] = m[r] + logf(l[r]);
  }
}

}  // namespace

int flash_attention_max_head_size() { return kMaxHs; }

void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int H,
                             bool causal) {
  MLS_CHECK(B > 0 && T > 0 && C > 0 && H > 0, "cuda::flash_attention_forward: B = ", B, ", T = ", T,
            ", C = ", C, ", H = ", H, ", expected all > 0");
  MLS_CHECK(C % H == 0, "cuda::flash_attention_forward: C = ", C, " is not a multiple of H = ", H,
            " (expected head size C / H)");
  const int hs = C / H;
  MLS_CHECK(hs <= kMaxHs, "cuda::flash_attention_forward: head size C / H = ", hs,
            ", expected at most ", kMaxHs);
  MLS_CHECK(B * H <= 65535, "cuda::flash_attention_forward: B * H = ", B * H,
            ", expected at most 65535 (the grid's y dimension)");
  const size_t smem = sizeof(float) * (kRows * hs + 2 * kKeys * (hs + 1));
  const dim3 grid((T + kRows - 1) / kRows, B * H);
  flash_forward_kernel<<<grid, kWarps * 32, smem>>>(out, lse, inp, T, C, H, hs, causal,
                                                    1.f / std::sqrt(static_cast<float>(hs)));
  MLS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mls::kernels::cuda
