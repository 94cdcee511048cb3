// Student file of lab 4: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 4, steps 4-5 of the CPU SGEMM ladder: Goto/BLIS packing with a SIMD register-blocked
// micro-kernel, then the same on several threads.
//
// Loop nest (BLIS names; the slides' "tiling", 001, and "vectorization", 002):
//
//   for jc in N step NC                     op(B) block  KC x NC  lives in L3
//     for pc in K step KC
//       pack op(B)(pc:pc+KC, jc:jc+NC) into NR-wide panels           (Bp)
//       for ic in M step MC                 op(A) block  MC x KC  lives in L2
//         pack op(A)(ic:ic+MC, pc:pc+KC) into MR-tall panels          (Ap)
//         for jr in NC step NR              B micro-panel KC x NR lives in L1
//           for ir in MC step MR
//             C(MR x NR) = alpha * Ap-panel * Bp-panel + beta' * C    (micro-kernel)
//
// beta' is the caller's beta for the first KC block and 1 afterwards.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "isa.hpp"
#include "mls/kernels/sgemm.hpp"

namespace mls::kernels {

// ---- run-time choice of the micro-kernel (given) ---------------------------------------------

namespace {

enum Isa { kAvx512 = 0, kAvx2 = 1, kScalar = 2 };
constexpr const char* kIsaNames[] = {"avx512", "avx2", "scalar"};

bool cpu_has(Isa isa) {
  switch (isa) {
    case kAvx512: return __builtin_cpu_supports("avx512f");
    case kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

Isa best_isa() {
  if (const char* env = std::getenv("MLS_LAB4_ISA"); env && *env) {
    for (int i = 0; i < 3; ++i) {
      if (std::string(env) == kIsaNames[i] && cpu_has(static_cast<Isa>(i))) return static_cast<Isa>(i);
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (cpu_has(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return kScalar;
}

std::atomic<int>& chosen_isa() {
  static std::atomic<int> isa{best_isa()};
  return isa;
}

/// 64-byte aligned float buffer that grows on demand (one per thread and per use).
struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> ptr{nullptr, &std::free};
  size_t size = 0;
  float* get(size_t n) {
    if (n > size) {
      const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      ptr.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      MLS_CHECK(ptr != nullptr, "sgemm_packed: cannot allocate ", bytes, " bytes for packing");
      size = n;
    }
    return ptr.get();
  }
};

}  // namespace

std::vector<std::string> packed_isas() {
  std::vector<std::string> out;
  for (int i = 0; i < 3; ++i) {
    if (cpu_has(static_cast<Isa>(i))) out.emplace_back(kIsaNames[i]);
  }
  return out;
}

std::string packed_isa() { return kIsaNames[chosen_isa().load()]; }

bool detail::use_avx512() { return chosen_isa().load(std::memory_order_relaxed) == kAvx512; }

void set_packed_isa(std::string_view isa) {
  if (isa.empty()) {
    chosen_isa().store(best_isa());
    return;
  }
  for (int i = 0; i < 3; ++i) {
    if (isa == kIsaNames[i]) {
      MLS_CHECK(cpu_has(static_cast<Isa>(i)), "set_packed_isa: this CPU does not support '", isa,
                "'");
      chosen_isa().store(i);
      return;
    }
  }
  fail("set_packed_isa: unknown instruction set '", isa, "', expected avx512, avx2 or scalar");
}

// ---- what students write ----------------------------------------------------------------------

/// A micro-kernel: C(MR x NR) = alpha * sum_k Ap[k*MR + i] * Bp[k*NR + j] + beta * C, where Ap is
/// a packed MR x kc panel of op(A) (column by column) and Bp a packed kc x NR panel of op(B)
/// (row by row). beta == 0: C is not read.
using MicroKernel = void (*)(long kc, const float* Ap, const float* Bp, float* C, long ldc,
                             float alpha, float beta);
/// A micro-kernel reading op(A) in place (A, lda) instead of from a packed panel.
using MicroKernelA = void (*)(long kc, const float* A, long lda, const float* Bp, float* C,
                              long ldc, float alpha, float beta);

/// Block sizes and micro-kernel of one instruction set.
struct PackedConfig {
  long mr, nr;      // register tile
  long mc, kc, nc;  // cache blocks (mc a multiple of mr, nc of nr)
  MicroKernel kernel;
  MicroKernelA kernel_a[2] = {nullptr, nullptr};  // in-place op(A): [trans_a]; null: always pack
};

/// The end of every AVX-512 micro-kernel: C(12 x 32) = alpha * acc + beta * C, where acc[i] holds
/// row i as two 16-float vectors; beta == 0: C is not read (it may hold NaN).
/// Hint: per row, two multiplies by alpha, two FMAs with beta * C unless beta == 0, two stores.
[[gnu::always_inline]] __attribute__((target("avx512f"))) static inline void store_tile_avx512(
    const __m512 (&acc)[12][2], float* C, long ldc, float alpha, float beta) {
  // BEGIN SOLUTION
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    float* c = C + i * ldc;
    __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c + 16), r1);
    }
    _mm512_storeu_ps(c, r0);
    _mm512_storeu_ps(c + 16, r1);
  }
  // END SOLUTION
}

/// AVX-512 micro-kernel, 12 x 32, reading op(A) where it lies: op(A)(i, k) = A[i*lda + k]
/// (kTransA false: 12 rows read along k) or A[k*lda + i] (kTransA true: 12 contiguous floats per
/// k; a packed panel Ap is this case with lda = MR). 24 zmm accumulators, 2 zmm for the row of Bp,
/// 1 broadcast. For the skinny shapes of a transformer (M a few hundred rows, K and N of
/// 128..512) packing op(A) costs a good part of the multiply, so full MR-row panels are read in
/// place (BLIS's "sup" idea); only a partial panel is packed.
/// Hint: per k, load two 16-float vectors of Bp, then for each of the 12 rows broadcast
/// op(A)(i, k) and do two FMAs; at the end scale by alpha, add beta * C (unless beta == 0), store.
template <bool kTransA>
[[maybe_unused]] __attribute__((target("avx512f"))) static void ukernel_avx512_a(
    long kc, const float* A, long lda, const float* Bp, float* C, long ldc, float alpha,
    float beta) {
  // BEGIN SOLUTION
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // Rows 3r, 3r+1, 3r+2 at a[r], a[r] + lda, a[r] + 2*lda: 4 base pointers and one index register.
  const float* a0 = A;
  const float* a1 = A + (kTransA ? 3 : 3 * lda);
  const float* a2 = A + (kTransA ? 6 : 6 * lda);
  const float* a3 = A + (kTransA ? 9 : 9 * lda);
  const long rs = kTransA ? 1 : lda, cs = kTransA ? lda : 1;
#pragma GCC unroll 2
  for (long k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(Bp);
    const __m512 b1 = _mm512_load_ps(Bp + 16);
    const float* rows[4] = {a0, a1, a2, a3};
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 3
      for (int u = 0; u < 3; ++u) {
        const __m512 a = _mm512_set1_ps(rows[r][u * rs]);
        acc[3 * r + u][0] = _mm512_fmadd_ps(a, b0, acc[3 * r + u][0]);
        acc[3 * r + u][1] = _mm512_fmadd_ps(a, b1, acc[3 * r + u][1]);
      }
    }
    a0 += cs;
    a1 += cs;
    a2 += cs;
    a3 += cs;
    Bp += 32;
  }
  store_tile_avx512(acc, C, ldc, alpha, beta);
  // END SOLUTION
}

/// AVX2/FMA version of ukernel_avx512_a, 6 x 16: 12 ymm accumulators, 2 for the row of Bp,
/// 1 broadcast (15 of the 16 ymm registers).
template <bool kTransA>
[[maybe_unused]] __attribute__((target("avx2,fma"))) static void ukernel_avx2_a(
    long kc, const float* A, long lda, const float* Bp, float* C, long ldc, float alpha,
    float beta) {
  // BEGIN SOLUTION
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* a0 = A;
  const float* a1 = A + (kTransA ? 3 : 3 * lda);
  const long rs = kTransA ? 1 : lda, cs = kTransA ? lda : 1;
#pragma GCC unroll 2
  for (long k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(Bp);
    const __m256 b1 = _mm256_load_ps(Bp + 8);
    const float* rows[2] = {a0, a1};
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) {
#pragma GCC unroll 3
      for (int u = 0; u < 3; ++u) {
        const __m256 a = _mm256_broadcast_ss(rows[r] + u * rs);
        acc[3 * r + u][0] = _mm256_fmadd_ps(a, b0, acc[3 * r + u][0]);
        acc[3 * r + u][1] = _mm256_fmadd_ps(a, b1, acc[3 * r + u][1]);
      }
    }
    a0 += cs;
    a1 += cs;
    Bp += 16;
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    float* c = C + i * ldc;
    __m256 r0 = _mm256_mul_ps(va, acc[i][0]), r1 = _mm256_mul_ps(va, acc[i][1]);
    if (beta != 0.0f) {
      r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), r0);
      r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), r1);
    }
    _mm256_storeu_ps(c, r0);
    _mm256_storeu_ps(c + 8, r1);
  }
  // END SOLUTION
}

/// AVX-512 micro-kernel on a packed 12 x kc panel Ap (Ap[k*12 + i], see MicroKernel). The same
/// arithmetic as ukernel_avx512_a<true> with lda = 12, but the 12 broadcasts sit at fixed offsets
/// from one pointer (each folds into its FMA as an embedded {1to16} broadcast) and the next rows of
/// Bp and the tile of C are prefetched: this is the kernel that runs the large, square products.
/// Hint: prefetch the 12 rows of C first; per k load two 16-float vectors of Bp, then 12
/// broadcasts of Ap[i] and 24 FMAs; Ap += 12, Bp += 32.
[[maybe_unused]] __attribute__((target("avx512f"))) static void ukernel_avx512(
    long kc, const float* Ap, const float* Bp, float* C, long ldc, float alpha, float beta) {
  // BEGIN SOLUTION
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc + 16), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (long k = 0; k < kc; ++k) {
    // Bp is read once per call: fetch it 8 rows (1 KiB) ahead; Ap stays in L1/L2.
    _mm_prefetch(reinterpret_cast<const char*>(Bp + 256), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(Bp + 272), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(Bp);
    const __m512 b1 = _mm512_load_ps(Bp + 16);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      const __m512 a = _mm512_set1_ps(Ap[i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
    Ap += 12;
    Bp += 32;
  }
  store_tile_avx512(acc, C, ldc, alpha, beta);
  // END SOLUTION
}

/// AVX2/FMA micro-kernel on a packed 6 x kc panel (Ap[k*6 + i]): as the AVX-512 one.
[[maybe_unused]] __attribute__((target("avx2,fma"))) static void ukernel_avx2(
    long kc, const float* Ap, const float* Bp, float* C, long ldc, float alpha, float beta) {
  // BEGIN SOLUTION
  ukernel_avx2_a<true>(kc, Ap, 6, Bp, C, ldc, alpha, beta);  // Ap[k*6 + i]
  // END SOLUTION
}

/// Portable micro-kernel, 4 x 8, plain C++ (the compiler vectorises what it can).
[[maybe_unused]] static void ukernel_scalar(long kc, const float* Ap, const float* Bp, float* C,
                                            long ldc, float alpha, float beta) {
  // BEGIN SOLUTION
  float acc[4][8] = {};
  for (long k = 0; k < kc; ++k) {
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 8; ++j) acc[i][j] += Ap[i] * Bp[j];
    }
    Ap += 4;
    Bp += 8;
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      float& c = C[i * ldc + j];
      c = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * c;
    }
  }
  // END SOLUTION
}

PackedBlocking packed_blocking(std::string_view isa) {
  // The micro-kernels' tiles are fixed by their code (12 x 32, 6 x 16, 4 x 8); the k unrolls are
  // their loops' pragmas (ukernel_avx512: 4, ukernel_avx512_a: 2; the AVX2 ones 2).
  if (isa.empty()) isa = kIsaNames[chosen_isa().load()];
  if (isa == "avx512") return {12, 32, 144, 512, 2048, 4, 2};
  if (isa == "avx2") return {6, 16, 120, 256, 4096, 2, 2};
  if (isa == "scalar") return {4, 8, 128, 256, 2048, 1, 1};
  fail("packed_blocking: unknown instruction set '", isa, "', expected avx512, avx2 or scalar");
}

/// Block sizes and micro-kernel for the instruction set in use. `MLS_LAB4_BLOCKS=mc,kc,nc`
/// overrides the cache blocks (for tuning; mc and nc are rounded up to mr and nr).
[[maybe_unused]] static PackedConfig packed_config() {
  // BEGIN SOLUTION
  const PackedBlocking b = packed_blocking();
  PackedConfig cfg{b.mr, b.nr, b.mc, b.kc, b.nc, &ukernel_scalar};
  switch (chosen_isa().load()) {
    case kAvx512:
      cfg.kernel = &ukernel_avx512;
      cfg.kernel_a[0] = &ukernel_avx512_a<false>;
      cfg.kernel_a[1] = &ukernel_avx512_a<true>;
      break;
    case kAvx2:
      cfg.kernel = &ukernel_avx2;
      cfg.kernel_a[0] = &ukernel_avx2_a<false>;
      cfg.kernel_a[1] = &ukernel_avx2_a<true>;
      break;
    default: break;
  }
  if (const char* env = std::getenv("MLS_LAB4_BLOCKS"); env && *env) {
    long mc = 0, kc = 0, nc = 0;
    if (std::sscanf(env, "%ld,%ld,%ld", &mc, &kc, &nc) == 3 && mc > 0 && kc > 0 && nc > 0) {
      cfg.mc = (mc + cfg.mr - 1) / cfg.mr * cfg.mr;
      cfg.kc = kc;
      cfg.nc = (nc + cfg.nr - 1) / cfg.nr * cfg.nr;
    }
  }
  return cfg;
  // END SOLUTION
}

/// The KC step for depth K: K split into ceil(K / kc_max) equal blocks (a multiple of 8), so no
/// block is a thin remainder (K = 1024 with kc_max = 384: 3 x 344 rather than 384, 384, 256).
[[maybe_unused]] static long kc_step(long K, long kc_max) {
  const long blocks = (K + kc_max - 1) / kc_max;
  return std::min(kc_max, ((K + blocks - 1) / blocks + 7) / 8 * 8);
}

/// Largest N and K for which op(A) is read in place by default (see in_place_a).
constexpr long kInPlaceMaxN = 512, kInPlaceMaxK = 1024;

/// Whether the full MR-row panels of op(A) are read in place rather than packed, for an
/// M x N x K product. Reading in place saves the copy, which pays for the skinny products of a
/// transformer (each panel of op(A) meets only N/NR panels of op(B)); for large K and N the
/// MR rows of A lie lda floats apart (a power of two for n = 1024, 2048: all MR rows map to the
/// same L1 set and each to its own page), so the kernel stalls on L1/TLB misses and the packed
/// panel, contiguous and reused N/NR times, wins (measured on Zen 4, interleaved with OpenBLAS:
/// in place 0.76-0.83 of OpenBLAS at n = 2048, packed 0.93-1.05; in place 1.03-1.22 on the
/// transformer shapes M = 768, N, K = 128..512, packed 0.90-1.0). `MLS_LAB4_PACK_A=1` packs always, `=0` never.
[[maybe_unused]] static bool in_place_a(long N, long K) {
  static const int mode = [] {
    const char* env = std::getenv("MLS_LAB4_PACK_A");
    if (env != nullptr && std::string(env) == "1") return 1;
    if (env != nullptr && std::string(env) == "0") return 0;
    return -1;
  }();
  if (mode >= 0) return mode == 0;
  return N <= kInPlaceMaxN && K <= kInPlaceMaxK;
}

bool packed_reads_a_in_place(long N, long K) { return in_place_a(N, K); }

/// Packs op(A)(i0:i0+mc, k0:k0+kc) into ceil(mc/mr) panels; panel p holds rows i0+p*mr.. as
/// Ap[p*mr*kc + k*mr + r] = op(A)(i0 + p*mr + r, k0 + k), zero for rows past the block.
[[maybe_unused]] static void pack_a(bool trans_a, const float* A, long lda, long i0, long k0,
                                    long mc, long kc, long mr, float* Ap) {
  // BEGIN SOLUTION
  for (long p = 0; p < mc; p += mr) {
    const long rows = std::min(mr, mc - p);
    float* dst = Ap + p * kc;  // (p / mr) * mr * kc
    if (trans_a) {  // op(A)(i, k) = A[k*lda + i]: a row of the panel is contiguous in A
      for (long k = 0; k < kc; ++k) {
        const float* src = A + (k0 + k) * lda + i0 + p;
        for (long r = 0; r < rows; ++r) dst[k * mr + r] = src[r];
        for (long r = rows; r < mr; ++r) dst[k * mr + r] = 0.0f;
      }
    } else {  // op(A)(i, k) = A[i*lda + k]: read along k, write with stride mr
      for (long r = 0; r < rows; ++r) {
        const float* src = A + (i0 + p + r) * lda + k0;
        for (long k = 0; k < kc; ++k) dst[k * mr + r] = src[k];
      }
      for (long r = rows; r < mr; ++r) {
        for (long k = 0; k < kc; ++k) dst[k * mr + r] = 0.0f;
      }
    }
  }
  // END SOLUTION
}

/// dst[k*ldd + c] = src[c*lds + k] for an 8 x 8 block (AVX2 unpack/shuffle/permute transpose).
[[maybe_unused]] __attribute__((target("avx2"))) static void transpose8x8(const float* src,
                                                                          long lds, float* dst,
                                                                          long ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

[[maybe_unused]] static bool has_avx2() {
  static const bool yes = cpu_has(kAvx2);
  return yes;
}

/// Packs op(B)(k0:k0+kc, j0:j0+nc) into ceil(nc/nr) panels; panel q holds columns j0+q*nr.. as
/// Bp[q*nr*kc + k*nr + c] = op(B)(k0 + k, j0 + q*nr + c), zero for columns past the block.
[[maybe_unused]] static void pack_b(bool trans_b, const float* B, long ldb, long k0, long j0,
                                    long kc, long nc, long nr, float* Bp) {
  // BEGIN SOLUTION
  for (long q = 0; q < nc; q += nr) {
    const long cols = std::min(nr, nc - q);
    float* dst = Bp + q * kc;
    if (!trans_b) {  // op(B)(k, j) = B[k*ldb + j]: a row of the panel is contiguous in B
      for (long k = 0; k < kc; ++k) {
        const float* src = B + (k0 + k) * ldb + j0 + q;
        for (long c = 0; c < cols; ++c) dst[k * nr + c] = src[c];
        for (long c = cols; c < nr; ++c) dst[k * nr + c] = 0.0f;
      }
    } else {  // op(B)(k, j) = B[j*ldb + k]
      long c0 = 0;
      if (has_avx2()) {  // 8 x 8 blocks through registers: contiguous loads and stores
        for (; c0 + 8 <= cols; c0 += 8) {
          const float* src = B + (j0 + q + c0) * ldb + k0;
          long k = 0;
          for (; k + 8 <= kc; k += 8) transpose8x8(src + k, ldb, dst + k * nr + c0, nr);
          for (; k < kc; ++k) {
            for (long c = 0; c < 8; ++c) dst[k * nr + c0 + c] = src[c * ldb + k];
          }
        }
      }
      for (long c = c0; c < cols; ++c) {
        const float* src = B + (j0 + q + c) * ldb + k0;
        for (long k = 0; k < kc; ++k) dst[k * nr + c] = src[k];
      }
      for (long c = cols; c < nr; ++c) {
        for (long k = 0; k < kc; ++k) dst[k * nr + c] = 0.0f;
      }
    }
  }
  // END SOLUTION
}

/// The packed GEMM of sgemm_packed; `Bpre`, when not null, is op(B) already packed whole
/// (N <= nc): the KC block at pc starts at Bpre + pc * round_up(N, nr) (see pack_b_whole).
[[maybe_unused]] static void packed_gemm(bool trans_a, bool trans_b, long M, long N, long K,
                                         float alpha, const float* A, long lda, const float* B,
                                         long ldb, float beta, float* C, long ldc,
                                         const float* Bpre) {
  // BEGIN SOLUTION
  if (M <= 0 || N <= 0) return;
  if (K == 0 || alpha == 0.0f) {  // nothing to multiply: C = beta * C
    for (long i = 0; i < M; ++i) {
      float* c = C + i * ldc;
      for (long j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
    return;
  }
  const PackedConfig cfg = packed_config();
  const long mr = cfg.mr, nr = cfg.nr;
  thread_local Buffer a_buf, b_buf;
  const long mc_max = std::min(cfg.mc, (M + mr - 1) / mr * mr);
  const long nc_max = std::min(cfg.nc, (N + nr - 1) / nr * nr);
  const long kc_blk = kc_step(K, cfg.kc), kc_max = std::min(kc_blk, K);
  float* Ap = a_buf.get(static_cast<size_t>(mc_max * kc_max));
  float* Bp = Bpre ? nullptr : b_buf.get(static_cast<size_t>(nc_max * kc_max));
  const long n_pad = (N + nr - 1) / nr * nr;
  alignas(64) float tile[32 * 32];  // partial C tiles (mr x nr <= 32 x 32)
  const MicroKernelA kernel_a = cfg.kernel_a[trans_a ? 1 : 0];
  const bool in_place = kernel_a != nullptr && in_place_a(N, K);

  for (long jc = 0; jc < N; jc += cfg.nc) {
    const long nc = std::min(cfg.nc, N - jc);
    for (long pc = 0; pc < K; pc += kc_blk) {
      const long kc = std::min(kc_blk, K - pc);
      const float beta_k = pc == 0 ? beta : 1.0f;
      if (Bpre) {
        Bp = const_cast<float*>(Bpre) + pc * n_pad;  // jc == 0: N <= nc
      } else {
        pack_b(trans_b, B, ldb, pc, jc, kc, nc, nr, Bp);
      }
      for (long ic = 0; ic < M; ic += cfg.mc) {
        const long mc = std::min(cfg.mc, M - ic);
        // Full MR-row panels read op(A) in place when the ISA has such a kernel; the rest
        // (or everything, without one) goes through the packed panel.
        const long full = in_place ? mc / mr * mr : 0;
        if (full < mc) pack_a(trans_a, A, lda, ic + full, pc, mc - full, kc, mr, Ap);
        for (long jr = 0; jr < nc; jr += nr) {
          const long n = std::min(nr, nc - jr);
          for (long ir = 0; ir < mc; ir += mr) {
            const long m = std::min(mr, mc - ir);
            float* c = C + (ic + ir) * ldc + jc + jr;
            const float* bp = Bp + jr * kc;
            const bool direct = ir < full;
            const float* a = direct ? A + (trans_a ? pc * lda + ic + ir : (ic + ir) * lda + pc)
                                    : Ap + (ir - full) * kc;
            if (m == mr && n == nr) {
              if (direct) {
                kernel_a(kc, a, lda, bp, c, ldc, alpha, beta_k);
              } else {
                cfg.kernel(kc, a, bp, c, ldc, alpha, beta_k);
              }
            } else {  // edge tile: full tile into `tile`, then the valid part into C
              if (direct) {
                kernel_a(kc, a, lda, bp, tile, nr, 1.0f, 0.0f);
              } else {
                cfg.kernel(kc, a, bp, tile, nr, 1.0f, 0.0f);
              }
              for (long i = 0; i < m; ++i) {
                for (long j = 0; j < n; ++j) {
                  float& cij = c[i * ldc + j];
                  const float v = alpha * tile[i * nr + j];
                  cij = beta_k == 0.0f ? v : v + beta_k * cij;
                }
              }
            }
          }
        }
      }
    }
  }
  // END SOLUTION
}

void sgemm_packed(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                  const float* A, long lda, const float* B, long ldb, float beta, float* C,
                  long ldc) {
  // BEGIN SOLUTION
  packed_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
  // END SOLUTION
}

void sgemm_packed_mt(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                     const float* A, long lda, const float* B, long ldb, float beta, float* C,
                     long ldc) {
  // BEGIN SOLUTION
  const long threads = mls::num_threads();
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (threads <= 1 || flops < 4e6 || M <= 0 || N <= 0) {  // too small to pay for the threads
    sgemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const PackedConfig cfg = packed_config();
  // Split the longer side of C into one range per thread, aligned to the register tile.
  const bool split_rows = M >= N;
  const long len = split_rows ? M : N, align = split_rows ? cfg.mr : cfg.nr;
  const long step = ((len + threads - 1) / threads + align - 1) / align * align;
  const long parts = (len + step - 1) / step;
  // Split by rows, every thread needs all of op(B): pack it once, the panels shared out among
  // the threads, instead of once per thread (when it is one NC block of a moderate size).
  const long nr = cfg.nr, n_pad = (N + nr - 1) / nr * nr;
  const float* Bpre = nullptr;
  thread_local Buffer shared_b;
  if (split_rows && parts > 1 && N <= cfg.nc && alpha != 0.0f && K > 0 && n_pad * K <= (4L << 20)) {
    float* dst = shared_b.get(static_cast<size_t>(n_pad * K));
    const long panels = n_pad / nr, kc_blk = kc_step(K, cfg.kc);
    mls::parallel_for(0, panels, 1, [&](std::int64_t q0, std::int64_t q1) {
      const long j0 = q0 * nr, cols = std::min(N, q1 * nr) - j0;
      for (long pc = 0; pc < K; pc += kc_blk) {
        const long kc = std::min(kc_blk, K - pc);
        pack_b(trans_b, B, ldb, pc, j0, kc, cols, nr, dst + pc * n_pad + j0 * kc);
      }
    });
    Bpre = dst;
  }
  mls::parallel_for(0, parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const long b = p * step, e = std::min(len, b + step);
      if (split_rows) {
        packed_gemm(trans_a, trans_b, e - b, N, K, alpha, A + (trans_a ? b : b * lda), lda, B,
                    ldb, beta, C + b * ldc, ldc, Bpre);
      } else {
        sgemm_packed(trans_a, trans_b, M, e - b, K, alpha, A, lda, B + (trans_b ? b * ldb : b),
                     ldb, beta, C + b, ldc);
      }
    }
  });
  // END SOLUTION
}

}  // namespace mls::kernels
