#pragma once
/// Lab 4: the CPU SGEMM ladder, from a naive triple loop to a packed, register-blocked,
/// multithreaded kernel within reach of OpenBLAS.
///
/// Every kernel computes the same thing (the `mls::SgemmFn` contract of
/// `mls/common/kernels.hpp`):
///
///     C = alpha * op(A) * op(B) + beta * C          float32, row-major, leading dimensions
///
///   op(A) is M x K: A is M x K (lda >= K), or K x M when trans_a (lda >= M)
///   op(B) is K x N: B is K x N (ldb >= N), or N x K when trans_b (ldb >= K)
///   C     is M x N (ldc >= N). When beta == 0, C is not read (it may hold NaN).
///   M, N or K may be 0 (K == 0 gives C = beta * C).
///
/// The kernels themselves trust their arguments; `mls::kernels::sgemm(name, ...)` is the checked
/// entry point the tests and tools use: it validates sizes, leading dimensions and pointers and
/// throws `mls::Error` naming the kernel and the offending values.
///
/// | name (registry)   | function             | what it teaches                               | slides        |
/// |-------------------|----------------------|-----------------------------------------------|---------------|
/// | lab4_naive        | sgemm_naive          | the definition: i-j-k, a dot product per C(i,j)| 001 loop variants |
/// | lab4_reordered    | sgemm_reordered      | i-k-j: unit-stride inner loop, vectorisable   | 002 data layout |
/// | lab4_blocked      | sgemm_blocked        | cache blocking: reuse tiles while they are hot | 001 tiling     |
/// | lab4_packed       | sgemm_packed         | Goto/BLIS packing + SIMD register micro-kernel | 002 vectorization, AI |
/// | lab4_packed_mt    | sgemm_packed_mt      | the packed kernel over mls::parallel_for       | 002 parallelization |
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/kernels.hpp"

namespace mls::kernels {

/// 1. Given example. The definition: for each (i, j), a dot product over k (i-j-k order).
void sgemm_naive(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A,
                 long lda, const float* B, long ldb, float beta, float* C, long ldc);

/// 2. Loop order i-k-j: first scale row i of C by beta (or zero it when beta == 0), then for each
/// k add alpha*op(A)(i,k) times row k of op(B). With op(B) = B the inner loop runs over
/// contiguous memory in both B and C, so the compiler can vectorise it.
/// Hint: keep `a = alpha * op(A)(i, k)` in a register across the j loop.
void sgemm_reordered(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                     const float* A, long lda, const float* B, long ldb, float beta, float* C,
                     long ldc);

/// 3. Cache blocking: the i-k-j loops of step 2 run over tiles (e.g. 64 rows of C x 256 of K x
/// 512 columns) so the tile of op(B) being reused stays in L1/L2 while every row of the
/// C-tile uses it. Scale C by beta once, before the tiled loops.
/// Hint: three outer loops over tile origins, three inner loops clamped with std::min.
void sgemm_blocked(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                   const float* A, long lda, const float* B, long ldb, float beta, float* C,
                   long ldc);

/// 4. Goto/BLIS: loops jc (NC columns) -> pc (KC of K; pack op(B) into NR-wide panels) ->
/// ic (MC rows; pack op(A) into MR-tall panels) -> jr -> ir -> micro-kernel. The micro-kernel
/// keeps an MR x NR block of C in SIMD registers over the whole KC loop (AVX-512 12x32,
/// AVX2/FMA 6x16, portable 4x8), chosen once at run time with __builtin_cpu_supports.
/// Packing zero-pads partial panels; partial C tiles go through a small temporary tile.
void sgemm_packed(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                  const float* A, long lda, const float* B, long ldb, float beta, float* C,
                  long ldc);

/// 5. The packed kernel on all `mls::num_threads()` threads: the rows of C are split into one
/// MR-aligned range per thread with `mls::parallel_for`; each thread runs the packed kernel on
/// its rows (its own packing buffers, so no thread waits for another).
void sgemm_packed_mt(bool trans_a, bool trans_b, long M, long N, long K, float alpha,
                     const float* A, long lda, const float* B, long ldb, float beta, float* C,
                     long ldc);

/// One entry of the ladder.
struct CpuKernel {
  const char* name;      // registry name, e.g. "lab4_packed"
  SgemmFn fn;
  int priority;          // registry priority (higher wins by default)
  const char* description;
};

/// The ladder in order (naive first).
const std::vector<CpuKernel>& cpu_kernels();

/// Registers every kernel of the ladder that is implemented (a kernel that throws
/// `mls::NotImplemented` on a 1x1x1 probe is left out, so a half-finished handout never becomes
/// the default matmul). Names are prefixed "lab4_" so lab 1's "lab1_reference" and "openblas" stay;
/// priorities: lab4_naive -10, lab4_reordered 1, lab4_blocked 2, lab4_packed 30,
/// lab4_packed_mt 40 (lab 1: lab1_reference 0, openblas 10). Safe to call more than once.
///
/// Every program linked with lab 4 also gets the ladder without calling this: a provider added at
/// start-up (src/autoregister.cpp) registers each implemented kernel by name at priority - 100,
/// so `MLS_MATMUL=lab4_packed` works in every tool while the default kernel stays what it was.
void register_kernels();

namespace detail {
/// Registers every implemented kernel at its priority + `priority_offset`; with `keep_existing`,
/// kernels already registered under the same name are left as they are.
void register_implemented(int priority_offset, bool keep_existing);
}  // namespace detail

/// The checked entry point: validates the arguments, then runs the kernel called `name`
/// (a name from `cpu_kernels()`, with or without the "lab4_" prefix, or the exact name of another
/// kernel of common's registry: "tuned", the autotuner's). Throws `mls::Error`
/// naming the kernel and the values on negative sizes, too-small leading dimensions, null
/// pointers with nonzero sizes or an unknown name.
void sgemm(std::string_view name, bool trans_a, bool trans_b, long M, long N, long K, float alpha,
           const float* A, long lda, const float* B, long ldb, float beta, float* C, long ldc);

/// Only the argument checks of `sgemm` (for other entry points, e.g. the CUDA kernels).
void check_sgemm_args(std::string_view name, bool trans_a, bool trans_b, long M, long N, long K,
                      const float* A, long lda, const float* B, long ldb, const float* C,
                      long ldc);

/// Instruction sets the packed micro-kernel can use on this CPU, best first
/// (a subset of "avx512", "avx2", "scalar").
std::vector<std::string> packed_isas();
/// The micro-kernel in use (default: the first of `packed_isas()`, or `MLS_LAB4_ISA`).
std::string packed_isa();
/// Chooses the micro-kernel ("" = best available). Throws `mls::Error` if this CPU lacks it.
void set_packed_isa(std::string_view isa);

/// lab4_packed's blocking for an instruction set: the micro-kernel's MR x NR register tile, the
/// cache blocks MC x KC of op(A) and KC x NC of op(B) (before `MLS_LAB4_BLOCKS`), and the unroll
/// of the micro-kernel's k loop on a packed panel of op(A) (`unroll_packed`) and on op(A) read in
/// place (`unroll_in_place`). The autotuner's space holds this configuration and every search
/// starts from it (mls/kernels/tune.hpp: KnobSpace::packed_knobs).
struct PackedBlocking {
  long mr, nr, mc, kc, nc;
  int unroll_packed, unroll_in_place;
};
/// The blocking of "avx512", "avx2" or "scalar" ("": the one in use, packed_isa()); the CPU need
/// not support it. mls::Error "packed_blocking: unknown instruction set ..." otherwise.
PackedBlocking packed_blocking(std::string_view isa = "");
/// Whether lab4_packed reads op(A)'s full MR-row panels in place (no packing copy) for a product of
/// N columns and depth K (`MLS_LAB4_PACK_A=1` packs always, `=0` never; else N <= 512 and K <= 1024).
bool packed_reads_a_in_place(long N, long K);

}  // namespace mls::kernels
