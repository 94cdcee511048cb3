// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4: tiled (flash) attention on the CPU (see mls/kernels/attention.hpp).
//
// Every product of the two passes is one shape, C (M, N) += A (M, K) · B (K, N) with N a multiple
// of 16 (gemm_acc): the scores S = q · kᵀ (B = kᵀ of the key block), the outputs P · v, and in the
// backward pass dP = dout · vᵀ, dq += dS · k, dk += dSᵀ · q, dv += Pᵀ · dout. Its register tile is
// 4 rows × up to 4 vectors of 16 floats, each B vector loaded once for the 4 rows. Rows of the
// head's q, k, v, dout are copied into buffers padded to a multiple of 16 floats with zeros, so
// every head size (odd ones too) runs the same full-vector loops; key blocks are padded the same
// way (padded keys are masked: their probabilities are set to 0 before P · v).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/fastmath.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/attention.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLS_CLONES
#endif

namespace mls::kernels {

namespace {

constexpr long kLanes = 16;
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));  // GCC vector extension

long round16(long n) { return (n + kLanes - 1) / kLanes * kLanes; }

/// C[0:R, 0:16 NC] (row stride ldc) += A[0:R, 0:K] (lda) · B[0:K, 0:16 NC] (ldb), in registers.
template <int R, int NC>
[[gnu::always_inline]] inline void gemm_tile(float* C, long ldc, const float* A, long lda,
                                             const float* B, long ldb, long K) {
  Lanes acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) std::memcpy(&acc[r][c], C + r * ldc + c * kLanes, sizeof(Lanes));
  for (long k = 0; k < K; ++k) {
    Lanes b[NC];
    for (int c = 0; c < NC; ++c) std::memcpy(&b[c], B + k * ldb + c * kLanes, sizeof(Lanes));
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int c = 0; c < NC; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) std::memcpy(C + r * ldc + c * kLanes, &acc[r][c], sizeof(Lanes));
}

/// The columns of one row block: vectors of 16 in tiles of 4, then 2, then 1.
template <int R>
[[gnu::always_inline]] inline void gemm_rows(float* C, long ldc, const float* A, long lda,
                                             const float* B, long ldb, long K, long N) {
  long c = 0;
  for (; c + 4 * kLanes <= N; c += 4 * kLanes) gemm_tile<R, 4>(C + c, ldc, A, lda, B + c, ldb, K);
  for (; c + 2 * kLanes <= N; c += 2 * kLanes) gemm_tile<R, 2>(C + c, ldc, A, lda, B + c, ldb, K);
  for (; c < N; c += kLanes) gemm_tile<R, 1>(C + c, ldc, A, lda, B + c, ldb, K);
}

/// C (M, N) += A (M, K) · B (K, N); N a multiple of 16; row strides ldc, lda, ldb.
[[gnu::always_inline]] inline void gemm_acc(float* C, long ldc, const float* A, long lda,
                                            const float* B, long ldb, long M, long K, long N) {
  long m = 0;
  for (; m + 4 <= M; m += 4) gemm_rows<4>(C + m * ldc, ldc, A + m * lda, lda, B, ldb, K, N);
  for (; m < M; ++m) gemm_rows<1>(C + m * ldc, ldc, A + m * lda, lda, B, ldb, K, N);
}

/// dst (n, ldd) = rows of a head inside qkv: src + t * C3 for t < n, hs floats each, zero padded
/// to ldd, times `scale`.
void copy_rows(float* dst, long ldd, const float* src, long C3, long n, long hs, float scale) {
  for (long t = 0; t < n; ++t) {
    float* d = dst + t * ldd;
    const float* s = src + t * C3;
    for (long j = 0; j < hs; ++j) d[j] = s[j] * scale;
    for (long j = hs; j < ldd; ++j) d[j] = 0.f;
  }
}

/// dst (hs, ldd) = the transpose of n rows of a head (src + t * C3), zero padded to ldd columns.
void copy_transposed(float* dst, long ldd, const float* src, long C3, long n, long hs) {
  for (long j = 0; j < hs; ++j) {
    float* d = dst + j * ldd;
    for (long t = 0; t < n; ++t) d[t] = src[t * C3 + j];
    for (long t = n; t < ldd; ++t) d[t] = 0.f;
  }
}

void check_shapes(const char* op, long B, long T, long C, long H, long block_q, long block_k) {
  MLS_CHECK(B > 0 && T > 0 && C > 0 && H > 0, op, ": B = ", B, ", T = ", T, ", C = ", C,
            ", H = ", H, ", expected all > 0");
  MLS_CHECK(C % H == 0, op, ": C = ", C, " is not a multiple of H = ", H,
            " (expected head size C / H)");
  MLS_CHECK(block_q > 0 && block_k > 0, op, ": block_q = ", block_q, ", block_k = ", block_k,
            ", expected both >= 1");
}

/// Keys of row t that a key block [k0, k0 + nk) holds (causal: those <= t; 0 if none).
long keys_in_block(bool causal, long t, long k0, long nk) {
  return causal ? std::clamp(t - k0 + 1, 0L, nk) : nk;
}

/// Query block `k` of a head in the order 0, nq-1, 1, nq-2, ...: causal blocks cost in
/// proportion to their index, so every contiguous range of tasks (parallel_for's chunks) gets
/// about the same work.
long zigzag(long k, long nq) { return k % 2 == 0 ? k / 2 : nq - 1 - k / 2; }

/// Scratch of one thread of the forward pass (thread-local, grown as needed: fwd_scratch).
struct FwdScratch {
  std::vector<float> q, o, kt, v, s, m, l;
  void reserve(long bq, long bk, long hs) {
    const long hsp = round16(hs), bkp = round16(bk);
    auto grow = [](std::vector<float>& x, long n) {
      if (static_cast<long>(x.size()) < n) x.resize(static_cast<std::size_t>(n));
    };
    grow(q, bq * hsp);
    grow(o, bq * hsp);
    grow(kt, hs * bkp);
    grow(v, bk * hsp);
    grow(s, bq * bkp);
    grow(m, bq);
    grow(l, bq);
  }
};

/// This thread's forward scratch for blocks of bq queries and bk keys, head size hs.
FwdScratch& fwd_scratch(long bq, long bk, long hs) {
  thread_local FwdScratch w;
  w.reserve(bq, bk, hs);
  return w;
}

/// One query block of one head: rows [q0, q0 + nr). base: q of (b, t = 0, head h) inside qkv
/// (B, T, 3C); out: y of (b, 0, h) inside (B, T, C); lse: (T,) of this head.
MLS_CLONES void flash_forward_block(float* out, float* lse, const float* base, FwdScratch& w,
                                    long T, long C, long hs, long q0, long nr, bool causal,
                                    long block_k, float scale) {
  const long C3 = 3 * C, hsp = round16(hs);
  float *qb = w.q.data(), *ob = w.o.data(), *kt = w.kt.data(), *vb = w.v.data(), *s = w.s.data();
  float *m = w.m.data(), *l = w.l.data();
  copy_rows(qb, hsp, base + q0 * C3, C3, nr, hs, scale);  // (nr, hsp), scaled: S = qb · kᵀ
  std::fill(ob, ob + nr * hsp, 0.f);                      // (nr, hsp) unnormalised output
  std::fill(m, m + nr, -INFINITY);
  std::fill(l, l + nr, 0.f);
  const long kend = causal ? q0 + nr : T;
  for (long k0 = 0; k0 < kend; k0 += block_k) {
    const long nk = std::min(block_k, kend - k0), nkp = round16(nk);
    copy_transposed(kt, nkp, base + k0 * C3 + C, C3, nk, hs);  // (hs, nkp)
    copy_rows(vb, hsp, base + k0 * C3 + 2 * C, C3, nk, hs, 1.f);  // (nk, hsp)
    std::fill(s, s + nr * nkp, 0.f);
    gemm_acc(s, nkp, qb, hsp, kt, nkp, nr, hs, nkp);  // (nr, nkp) scores
    for (long r = 0; r < nr; ++r) {
      float* sr = s + r * nkp;
      const long n = keys_in_block(causal, q0 + r, k0, nk);
      if (n > 0) {
        const float alpha = online_softmax_update(sr, n, m[r], l[r]);
        if (alpha != 1.f) {
          float* o = ob + r * hsp;
          for (long j = 0; j < hsp; ++j) o[j] *= alpha;
        }
      }
      std::fill(sr + n, sr + nkp, 0.f);  // masked and padded keys: probability 0
    }
    gemm_acc(ob, hsp, s, nkp, vb, hsp, nr, nk, hsp);  // o += P · v
  }
  for (long r = 0; r < nr; ++r) {
    const long t = q0 + r;
    const float inv = 1.f / l[r];
    float* y = out + t * C;
    for (long j = 0; j < hs; ++j) y[j] = ob[r * hsp + j] * inv;
    lse[t] = m[r] + std::log(l[r]);
  }
}

/// Scratch of one thread of the backward pass (sized once per thread, reused for every head).
struct BwdScratch {
  std::vector<float> q, dO, dq, D;   // the head: (T, hsp), (T, hsp), (T, hsp), (T,)
  std::vector<float> kt, vt, kb;     // a key block: (hs, bkp), (hs, bkp), (bk, hsp)
  std::vector<float> dk, dv;         // its gradients: (bk, hsp)
  std::vector<float> p, dp;          // (bq, bkp)
  std::vector<float> pT, dsT;        // (bk, bqp): P and dS transposed
  BwdScratch(long T, long bq, long bk, long hs) {
    const long hsp = round16(hs), bkp = round16(bk), bqp = round16(bq);
    for (auto* v : {&q, &dO, &dq}) v->resize(static_cast<std::size_t>(T * hsp));
    D.resize(static_cast<std::size_t>(T));
    for (auto* v : {&kt, &vt}) v->resize(static_cast<std::size_t>(hs * bkp));
    for (auto* v : {&kb, &dk, &dv}) v->resize(static_cast<std::size_t>(bk * hsp));
    for (auto* v : {&p, &dp}) v->resize(static_cast<std::size_t>(bq * bkp));
    for (auto* v : {&pT, &dsT}) v->resize(static_cast<std::size_t>(bk * bqp));
  }
};

/// The backward pass of one head. base/dbase: q of (b, 0, h) inside qkv/dqkv (B, T, 3C); dout,
/// out: (b, 0, h) inside (B, T, C); lse: (T,) of this head.
MLS_CLONES void flash_backward_head(float* dbase, const float* dout, const float* base,
                                    const float* out, const float* lse, BwdScratch& w, long T,
                                    long C, long hs, bool causal, long block_q, long block_k,
                                    float scale) {
  const long C3 = 3 * C, hsp = round16(hs);
  std::vector<float>&q = w.q, &dO = w.dO, &dq = w.dq, &D = w.D, &kt = w.kt, &vt = w.vt, &kb = w.kb,
                     &dk = w.dk, &dv = w.dv, &p = w.p, &dp = w.dp, &pT = w.pT, &dsT = w.dsT;
  std::fill(dq.begin(), dq.end(), 0.f);
  copy_rows(q.data(), hsp, base, C3, T, hs, scale);  // scaled, as in the forward pass
  copy_rows(dO.data(), hsp, dout, C, T, hs, 1.f);
  for (long t = 0; t < T; ++t) {  // D = rowsum(dout ⊙ out)
    float acc = 0.f;
    for (long j = 0; j < hs; ++j) acc += dout[t * C + j] * out[t * C + j];
    D[t] = acc;
  }
  for (long k0 = 0; k0 < T; k0 += block_k) {
    const long nk = std::min(block_k, T - k0), nkp = round16(nk);
    copy_transposed(kt.data(), nkp, base + k0 * C3 + C, C3, nk, hs);      // (hs, nkp)
    copy_transposed(vt.data(), nkp, base + k0 * C3 + 2 * C, C3, nk, hs);  // (hs, nkp)
    copy_rows(kb.data(), hsp, base + k0 * C3 + C, C3, nk, hs, 1.f);       // (nk, hsp)
    std::fill(dk.begin(), dk.end(), 0.f);
    std::fill(dv.begin(), dv.end(), 0.f);
    for (long q0 = causal ? k0 : 0; q0 < T; q0 += block_q) {
      const long nr = std::min(block_q, T - q0), nrp = round16(block_q);
      const float* qi = q.data() + q0 * hsp;
      const float* doi = dO.data() + q0 * hsp;
      std::fill(p.begin(), p.begin() + nr * nkp, 0.f);
      std::fill(dp.begin(), dp.begin() + nr * nkp, 0.f);
      gemm_acc(p.data(), nkp, qi, hsp, kt.data(), nkp, nr, hs, nkp);   // S
      gemm_acc(dp.data(), nkp, doi, hsp, vt.data(), nkp, nr, hs, nkp);  // dP = dout · vᵀ
      for (long r = 0; r < nr; ++r) {
        const long t = q0 + r, n = keys_in_block(causal, t, k0, nk);
        float* pr = p.data() + r * nkp;
        float* dpr = dp.data() + r * nkp;
        const float lr = lse[t], dr = D[t];
        for (long j = 0; j < n; ++j) {
          const float pj = mls::fast_expf(pr[j] - lr);  // P = exp(S - lse)
          pr[j] = pj;
          dpr[j] = pj * (dpr[j] - dr);  // dS
        }
        for (long j = n; j < nk; ++j) pr[j] = dpr[j] = 0.f;
        for (long j = 0; j < nk; ++j) {
          pT[j * nrp + r] = pr[j];
          dsT[j * nrp + r] = dpr[j];
        }
      }
      gemm_acc(dv.data(), hsp, pT.data(), nrp, doi, hsp, nk, nr, hsp);   // dv += Pᵀ · dout
      gemm_acc(dk.data(), hsp, dsT.data(), nrp, qi, hsp, nk, nr, hsp);   // dk += dSᵀ · (q s)
      gemm_acc(dq.data() + q0 * hsp, hsp, dp.data(), nkp, kb.data(), hsp, nr, nk, hsp);  // dS · k
    }
    for (long j = 0; j < nk; ++j) {
      float* dkr = dbase + (k0 + j) * C3 + C;
      float* dvr = dbase + (k0 + j) * C3 + 2 * C;
      for (long d = 0; d < hs; ++d) {
        dkr[d] += dk[j * hsp + d];
        dvr[d] += dv[j * hsp + d];
      }
    }
  }
  for (long t = 0; t < T; ++t)
    for (long d = 0; d < hs; ++d) dbase[t * C3 + d] += dq[t * hsp + d] * scale;
}

/// The tasks [i0, i1) of the forward pass: task i is query block zigzag(i % nq) of head i / nq.
/// Nothing in it, nor in its caller, has a destructor to run (the scratch is thread-local): GCC 12
/// treats a call to a target_clones function (flash_forward_block, online_softmax_update) as one
/// that cannot throw, and so does every caller of such calls only; an exception through them
/// (the handout's "not implemented") ends the program in a frame with something to clean up,
/// and passes a frame without.
[[gnu::noinline]] void forward_tasks(float* out, float* lse, const float* inp, std::int64_t i0,
                                     std::int64_t i1, long nq, long T, long C, long H, bool causal,
                                     long block_q, long block_k) {
  const long hs = C / H;
  FwdScratch& w = fwd_scratch(std::min(block_q, T), std::min(block_k, T), hs);
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  for (std::int64_t i = i0; i < i1; ++i) {
    const long bh = i / nq, b = bh / H, h = bh % H, q0 = zigzag(i % nq, nq) * block_q;
    flash_forward_block(out + b * T * C + h * hs, lse + bh * T, inp + b * T * 3 * C + h * hs, w, T,
                        C, hs, q0, std::min(block_q, T - q0), causal, std::min(block_k, T), scale);
  }
}

}  // namespace

MLS_CLONES float online_softmax_update(float* s, long n, float& m, float& l) {
  // BEGIN SOLUTION
  float mx = m;
  for (long j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  if (mx == -INFINITY) {  // nothing but masked scores so far: the row stays empty
    for (long j = 0; j < n; ++j) s[j] = 0.f;
    return 1.f;
  }
  float sum = 0.f;
  for (long j = 0; j < n; ++j) {
    s[j] = mls::fast_expf(s[j] - mx);
    sum += s[j];
  }
  const float alpha = m == -INFINITY ? 0.f : mls::fast_expf(m - mx);
  l = l * alpha + sum;
  m = mx;
  return alpha;
  // END SOLUTION
}

void flash_attention_forward(float* out, float* lse, const float* inp, long B, long T, long C,
                             long H, bool causal, long block_q, long block_k) {
  check_shapes("flash_attention_forward", B, T, C, H, block_q, block_k);
  const long nq = (T + block_q - 1) / block_q;
  parallel_for(0, B * H * nq, 1, [&](std::int64_t i0, std::int64_t i1) {
    forward_tasks(out, lse, inp, i0, i1, nq, T, C, H, causal, block_q, block_k);
  });
}

void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, long B, long T, long C, long H, bool causal,
                              long block_q, long block_k) {
  check_shapes("flash_attention_backward", B, T, C, H, block_q, block_k);
  const long hs = C / H;
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  const long bq = std::min(block_q, T), bk = std::min(block_k, T);
  parallel_for(0, B * H, 1, [&](std::int64_t i0, std::int64_t i1) {
    BwdScratch w(T, bq, bk, hs);
    for (std::int64_t bh = i0; bh < i1; ++bh) {
      const long b = bh / H, h = bh % H;
      flash_backward_head(dinp + b * T * 3 * C + h * hs, dout + b * T * C + h * hs,
                          inp + b * T * 3 * C + h * hs, out + b * T * C + h * hs, lse + bh * T, w,
                          T, C, hs, causal, bq, bk, scale);
    }
  });
}

}  // namespace mls::kernels
