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
//
// The backward pass (FlashAttention-2's, without atomics) recomputes each tile of probabilities
// P = exp(S - lse) from q, k and the saved lse, in two kernels that write disjoint parts of dinp:
//   dk, dv: one block per 16 keys of a (batch, head) (4 warps, 4 keys each); the query rows
//           stream through shared memory 32 at a time (one per lane): lane j computes row j's
//           score, probability, dP = dout_j · v and dS = P (dP - D_j) for each of the warp's
//           keys, then the 32 values are broadcast by shuffles and every lane adds its head
//           dimensions of P · dout and dS · q to the keys' accumulators in registers.
//   dq:     one block per 16 query rows (the forward kernel's layout): the keys stream past 32 at
//           a time, lane j computes dS for key j, and each lane adds its dimensions of dS · k.
// D = rowsum(dout ⊙ out) is recomputed where it is needed (per tile of rows: no workspace).
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

/// The block's threads copy rows [t0, t0 + rows) of one head's (T, hs) slice, whose row t starts
/// at src + t * stride, into shared memory `ld` floats per row, times `scale`; rows past T are 0.
__device__ __forceinline__ void att_load_rows(float* dst, int ld, const float* src, long stride, int t0, int rows,
                                              int T, int hs, float scale = 1.f) {
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x) {
    const int j = i / hs, d = i % hs, t = t0 + j;
    dst[j * ld + d] = t < T ? src[t * stride + d] * scale : 0.f;
  }
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
  att_load_rows(q_s, hs, base, C3, q0, kRows, T, hs, scale);
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
    att_load_rows(k_s, hs + 1, base + C, C3, k0, kKeys, T, hs);
    att_load_rows(v_s, hs + 1, base + 2 * C, C3, k0, kKeys, T, hs);
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

constexpr int kKeysPerWarp = 4;                   // keys per warp in the dk/dv kernel
constexpr int kKeyRows = kWarps * kKeysPerWarp;   // keys per block (16)
constexpr int kQueries = 32;                      // query rows per tile: one per lane

/// dk, dv of keys k0 .. k0 + 15 of one (batch, head): grid (ceil(T / kKeyRows), B * H), block
/// kWarps * 32 threads, dynamic shared memory (2 * kKeyRows * hs + 2 * kQueries * (hs + 1) +
/// 2 * kQueries) floats: the block's keys and values, a tile of query rows (scaled) and of dout
/// (rows padded by one float: lane j reads row j), and the tile's lse and D.
__global__ void __launch_bounds__(kWarps * 32)
    flash_backward_dkdv_kernel(float* dinp, const float* dout, const float* inp, const float* out,
                               const float* lse, int T, int C, int H, int hs, bool causal, float scale) {
  extern __shared__ float smem[];
  float* k_s = smem;                         // (kKeyRows, hs)
  float* v_s = k_s + kKeyRows * hs;          // (kKeyRows, hs)
  float* q_s = v_s + kKeyRows * hs;          // (kQueries, hs + 1), scaled
  float* do_s = q_s + kQueries * (hs + 1);   // (kQueries, hs + 1)
  float* l_s = do_s + kQueries * (hs + 1);   // (kQueries) lse of the tile's rows
  float* d_s = l_s + kQueries;               // (kQueries) D = rowsum(dout ⊙ out)
  const int bh = blockIdx.y, b = bh / H, h = bh % H, k0 = blockIdx.x * kKeyRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long C3 = 3L * C;
  const float* base = inp + static_cast<long>(b) * T * C3 + static_cast<long>(h) * hs;
  const float* dob = dout + static_cast<long>(b) * T * C + static_cast<long>(h) * hs;
  const float* ob = out + static_cast<long>(b) * T * C + static_cast<long>(h) * hs;
  att_load_rows(k_s, hs, base + C, C3, k0, kKeyRows, T, hs);
  att_load_rows(v_s, hs, base + 2 * C, C3, k0, kKeyRows, T, hs);
  float dk[kKeysPerWarp][kDimsPerLane], dv[kKeysPerWarp][kDimsPerLane];
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk)
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) dk[kk][i] = dv[kk][i] = 0.f;
  // causal: rows before k0 see none of these keys; start at the tile holding row k0
  const int tstart = causal ? k0 / kQueries * kQueries : 0;
  for (int t0 = tstart; t0 < T; t0 += kQueries) {
    __syncthreads();  // the previous tile is done with (and k_s, v_s written, the first time)
    att_load_rows(q_s, hs + 1, base, C3, t0, kQueries, T, hs, scale);
    att_load_rows(do_s, hs + 1, dob, C, t0, kQueries, T, hs);
    if (threadIdx.x < kQueries) {
      const int t = t0 + threadIdx.x;
      float acc = 0.f;
      if (t < T)
        for (int d = 0; d < hs; ++d) acc += dob[t * C + d] * ob[t * C + d];
      d_s[threadIdx.x] = acc;
      l_s[threadIdx.x] = t < T ? lse[static_cast<long>(bh) * T + t] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const int key = warp * kKeysPerWarp + kk, t2 = k0 + key, t = t0 + lane;
      if (t2 >= T) continue;  // the whole warp agrees
      float p = 0.f, ds = 0.f;
      if (t < T && (!causal || t2 <= t)) {  // lane: query row t against key t2
        const float* q = q_s + lane * (hs + 1);
        const float* o = do_s + lane * (hs + 1);
        const float* k = k_s + key * hs;
        const float* v = v_s + key * hs;
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < hs; ++d) {
          s += q[d] * k[d];
          dp += o[d] * v[d];
        }
        p = __expf(s - l_s[lane]);    // P = exp(S - lse)
        ds = p * (dp - d_s[lane]);    // dS = P (dP - D)
      }
      for (int j = 0; j < kQueries; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
        const float* q = q_s + j * (hs + 1);
        const float* o = do_s + j * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) {
            dv[kk][i] += pj * o[d];   // dv += Pᵀ dout
            dk[kk][i] += dsj * q[d];  // dk += dSᵀ (q / sqrt(hs))
          }
        }
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    const int t2 = k0 + warp * kKeysPerWarp + kk;
    if (t2 >= T) continue;
    float* g = dinp + (static_cast<long>(b) * T + t2) * C3 + static_cast<long>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) {
        g[C + d] += dk[kk][i];
        g[2 * C + d] += dv[kk][i];
      }
    }
  }
}

/// dq of query rows q0 .. q0 + 15 of one (batch, head): grid (ceil(T / kRows), B * H), block
/// kWarps * 32 threads, dynamic shared memory (2 * kRows * hs + 2 * kKeys * (hs + 1)) floats: the
/// block's q rows (scaled) and dout rows, a K tile and a V tile (padded rows).
__global__ void __launch_bounds__(kWarps * 32)
    flash_backward_dq_kernel(float* dinp, const float* dout, const float* inp, const float* out,
                             const float* lse, int T, int C, int H, int hs, bool causal, float scale) {
  extern __shared__ float smem[];
  float* q_s = smem;                      // (kRows, hs), scaled
  float* do_s = q_s + kRows * hs;         // (kRows, hs)
  float* k_s = do_s + kRows * hs;         // (kKeys, hs + 1)
  float* v_s = k_s + kKeys * (hs + 1);    // (kKeys, hs + 1)
  const int bh = blockIdx.y, b = bh / H, h = bh % H, q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long C3 = 3L * C;
  const float* base = inp + static_cast<long>(b) * T * C3 + static_cast<long>(h) * hs;
  const float* dob = dout + static_cast<long>(b) * T * C + static_cast<long>(h) * hs;
  const float* ob = out + static_cast<long>(b) * T * C + static_cast<long>(h) * hs;
  att_load_rows(q_s, hs, base, C3, q0, kRows, T, hs, scale);
  att_load_rows(do_s, hs, dob, C, q0, kRows, T, hs);
  float lr[kRowsPerWarp], dr[kRowsPerWarp], dq[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + warp * kRowsPerWarp + r;
    float acc = 0.f;  // D = rowsum(dout ⊙ out): the lanes' dimensions, then the warp's sum
    if (t < T)
      for (int d = lane; d < hs; d += 32) acc += dob[t * C + d] * ob[t * C + d];
    dr[r] = att_warp_sum(acc);
    lr[r] = t < T ? lse[static_cast<long>(bh) * T + t] : 0.f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) dq[r][i] = 0.f;
  }
  const int kend = causal ? min(T, q0 + kRows) : T;
  for (int k0 = 0; k0 < kend; k0 += kKeys) {
    __syncthreads();  // the previous tile is done with (and q_s, do_s written, the first time)
    att_load_rows(k_s, hs + 1, base + C, C3, k0, kKeys, T, hs);
    att_load_rows(v_s, hs + 1, base + 2 * C, C3, k0, kKeys, T, hs);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r, t = q0 + row, t2 = k0 + lane;
      if (t >= T) continue;  // the whole warp agrees
      float ds = 0.f;
      if (t2 < T && (!causal || t2 <= t)) {  // lane: key t2 against query row t
        const float* q = q_s + row * hs;
        const float* o = do_s + row * hs;
        const float* k = k_s + lane * (hs + 1);
        const float* v = v_s + lane * (hs + 1);
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < hs; ++d) {
          s += q[d] * k[d];
          dp += o[d] * v[d];
        }
        ds = __expf(s - lr[r]) * (dp - dr[r]);
      }
      for (int j = 0; j < kKeys; ++j) {
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
        const float* k = k_s + j * (hs + 1);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) dq[r][i] += dsj * k[d];  // dq += dS k (times 1 / sqrt(hs) below)
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + warp * kRowsPerWarp + r;
    if (t >= T) continue;
    float* g = dinp + (static_cast<long>(b) * T + t) * C3 + static_cast<long>(h) * hs;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) g[d] += dq[r][i] * scale;
    }
  }
}

/// Checks the sizes of the forward and backward entry points (`op` names the function).
int checked_head_size(const char* op, int B, int T, int C, int H) {
  MLS_CHECK(B > 0 && T > 0 && C > 0 && H > 0, op, ": B = ", B, ", T = ", T, ", C = ", C, ", H = ", H,
            ", expected all > 0");
  MLS_CHECK(C % H == 0, op, ": C = ", C, " is not a multiple of H = ", H, " (expected head size C / H)");
  const int hs = C / H;
  MLS_CHECK(hs <= kMaxHs, op, ": head size C / H = ", hs, ", expected at most ", kMaxHs);
  MLS_CHECK(static_cast<long>(B) * H <= 65535, op, ": B * H = ", static_cast<long>(B) * H,
            ", expected at most 65535 (the grid's y dimension)");
  return hs;
}

/// Launch configuration of a kernel with `smem` bytes of dynamic shared memory: above the 48 KiB
/// every GPU gives by default (head sizes near 128), the kernel asks for more first.
template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t smem) {
  if (smem > 48 * 1024)
    MLS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

}  // namespace

int flash_attention_max_head_size() { return kMaxHs; }

void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int H, bool causal) {
  const int hs = checked_head_size("cuda::flash_attention_backward", B, T, C, H);
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const size_t smem_kv = sizeof(float) * (2 * kKeyRows * hs + 2 * kQueries * (hs + 1) + 2 * kQueries);
  const size_t smem_q = sizeof(float) * (2 * kRows * hs + 2 * kKeys * (hs + 1));
  allow_shared_memory(flash_backward_dkdv_kernel, smem_kv);
  allow_shared_memory(flash_backward_dq_kernel, smem_q);
  // the two kernels write disjoint parts of dinp (k|v and q): no atomics, no order between them
  flash_backward_dkdv_kernel<<<dim3((T + kKeyRows - 1) / kKeyRows, B * H), kWarps * 32, smem_kv>>>(
      dinp, dout, inp, out, lse, T, C, H, hs, causal, scale);
  MLS_CUDA_CHECK(cudaGetLastError());
  flash_backward_dq_kernel<<<dim3((T + kRows - 1) / kRows, B * H), kWarps * 32, smem_q>>>(
      dinp, dout, inp, out, lse, T, C, H, hs, causal, scale);
  MLS_CUDA_CHECK(cudaGetLastError());
}

void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int H,
                             bool causal) {
  const int hs = checked_head_size("cuda::flash_attention_forward", B, T, C, H);
  const size_t smem = sizeof(float) * (kRows * hs + 2 * kKeys * (hs + 1));
  const dim3 grid((T + kRows - 1) / kRows, B * H);
  flash_forward_kernel<<<grid, kWarps * 32, smem>>>(out, lse, inp, T, C, H, hs, causal,
                                                    1.f / std::sqrt(static_cast<float>(hs)));
  MLS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mls::kernels::cuda
