#pragma once
/// Lab 4 part 2, ML compilation: the autotuner (issue 28, section 4). A schedule TEMPLATE for SGEMM
/// C (+)= op(A)·op(B) (row-major, transposes, leading dimensions; see SgemmShape) whose knobs span a
/// search space; strategies that search it (grid, random, guided by a cost model fitted online); a
/// Tuner that measures candidates with the project's interleaved timing and keeps what it found in
/// the tuning database; and the `tuned` SGEMM kernel of the registry (MLS_MATMUL=tuned) that runs
/// the best schedule known.
///
///     SgemmKnobs k = KnobSpace::sgemm(1).default_knobs();
///     te::LoweredFunc f = instantiate(k, 1024, 1024, 1024).func;   // the loop nest: te::to_string(f)
///     CompiledSgemm g = compile_sgemm(k, {1024, 1024, 1024});        // through codegen and the JIT
///     TuneResult r = Tuner({768, 384, 128, false, true, 1}, {.strategy = Strategy::Guided, .trials = 64}).run();
///
/// The template (what `instantiate` schedules): axes y (rows of C), x (columns), k (reduction):
///   y -> yp (panels of MR rows) -> yc (blocks of about MC rows), yr (panels in a block); yi (MR)
///   x -> xp (panels of NR columns) -> xc (blocks of about NC), xr;                        xi (NR)
///   k -> ko (blocks of KC), ki (KC)
///   loops: the three block loops {xc, ko, yc} in `order`, then xr, yr, and the MR x NR x KC tile
///   as one call of a register-blocked micro-kernel (te::gemm_regblock_intrinsic, its k loop
///   unrolled `unroll` times; with `c_prefetch` it prefetches its tile of C, sums from zero and adds
///   the tile after the k loop); B's KC x NC block copied into a local buffer (cache_read) at the
///   later of its loops xc/ko when `pack_b` (in NR-wide panels [NC/NR][KC][NR]), A's MC x KC block
///   at the later of yc/ko when `pack_a` (in MR-row panels [MC/MR][KC][MR] when `a_panels`, as
///   lab4_packed packs it), both copies vectorized; one of yc/xc/yr/xr parallel (`parallel`), its
///   dimension's blocks balanced for `balance` threads (plan_sgemm), and a copy outside that loop
///   parallel over its rows (the threads share the packing out).
/// The operands are read and written where they lie, never copied whole: the tensor expression
/// indexes A(k, y) when trans_a and B(x, k) when trans_b on strided placeholders (te::
/// strided_placeholder: the leading dimensions), so the packing copies read transposed panels
/// directly (B's copy stores rows of k whatever B's layout: cache_read with a layout; a transposed
/// B is always packed); C is a strided output (te::with_strides), and beta 1 is an accumulating
/// reduction (te::sum_into: no reset, the micro-kernel's first k block starts from C).
/// The micro-kernel's tile must have no tail, so a plan (plan_sgemm) cuts the problem into pieces
/// the tile divides: the main piece (whole MR panels, whole NR panels, K in equal KC blocks; its
/// blocks of panels balanced, the last shorter: a guard outside the tile), then, where the problem
/// has edges, pieces for the last M % MR rows (a micro-kernel of that many rows), the last N % NR
/// columns (a micro-kernel of their whole vectors, then of vectors of half and a quarter of the
/// lanes, then plain loops for the last 1-3 columns, their outputs summed side by side), and the
/// last, shorter block of k (pieces that add to C). Each piece is a kernel of its own on the operands'
/// corner (CompiledSgemm::run offsets the pointers); no operand is copied. An edge of rows reads B
/// in place and an edge of columns A (SgemmPiece::knobs): each element once, no second packing pass.
/// CompiledSgemm stages (copies into its layout) only a call it was not compiled for: another
/// transpose or leading dimension, alpha != 1, or beta != 0 on a beta-0 plan (a beta-1 plan takes
/// any beta: C scaled in place first); tuned_staged_calls() counts those. The `tuned` kernel
/// compiles the call's own problem, so only alpha != 1 is staged there.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/common/rng.hpp"
#include "mls/kernels/codegen.hpp"
#include "mls/kernels/jit.hpp"
#include "mls/kernels/tuning_db.hpp"

namespace mls::kernels::tune {

/// The schedule format of the SGEMM template, stored as "template" in every knob object.
inline constexpr const char* kSgemmTemplate = "sgemm.v1";

// ---- knobs --------------------------------------------------------------------------------------

/// One point of the SGEMM template's space. Block sizes are targets: instantiate() rounds MC to a
/// multiple of MR and NC to one of NR and balances the blocks (plan_sgemm).
struct SgemmKnobs {
  int mc = 64;    ///< rows of A's block (about): its copy is MC x KC
  int kc = 256;   ///< depth of a block: the micro-kernel's k extent
  int nc = 512;   ///< columns of B's block (about): its copy is KC x NC
  int mr = 8;     ///< micro-kernel rows (>= 1)
  int nr = 32;    ///< micro-kernel columns: a multiple of the vector lanes
  /// The outer block loops, outermost first: a permutation of "nkm" (n = xc, k = ko, m = yc);
  /// "nkm" is Goto/BLIS's order.
  std::string order = "nkm";
  /// The parallel loop: "none", "m" (yc), "n" (xc), "mr" (yr) or "nr" (xr).
  std::string parallel = "none";
  bool pack_a = true;  ///< copy A's MC x KC block into a local buffer (else read A in place)
  bool pack_b = true;  ///< copy B's KC x NC block into a local buffer (else read B in place)
  int unroll = 1;      ///< `#pragma GCC unroll` of the micro-kernel's k loop (1: none)
  /// With pack_a: A's copy stored as MR-row panels [MC/MR][KC][MR] (BLIS's packed A, as lab4_packed
  /// packs it: the micro-kernel reads one contiguous run per tile) instead of MC rows of KC.
  bool a_panels = false;
  /// The thread count the parallel loop's blocks are balanced for (plan_sgemm): with more than 1,
  /// the blocks of the dimension the parallel knob splits are cut so that the busiest thread gets
  /// as few panels as the threads allow (768 rows of 12-row panels, MC 144, 2 threads: 8 blocks of
  /// 96 rows, 4 a thread, rather than 6 of 132: 3 and 3, 396 rows against 372), and never fewer
  /// blocks than threads where there are as many panels. Not searched: KnobSpace::sgemm(threads)
  /// gives every point its thread count. 1: blocks of about MC / NC only.
  int balance = 1;
  /// The micro-kernel prefetches its tile of C before the k loop, starts its accumulators at zero
  /// and adds them to C after it (te::gemm_regblock_intrinsic's prefetch_c; lab4_packed's and
  /// OpenBLAS's order), instead of loading the tile first: where C is out of cache (a large N, each
  /// tile revisited once per KC block) the first FMAs do not wait for it.
  bool c_prefetch = false;
  friend bool operator==(const SgemmKnobs&, const SgemmKnobs&) = default;
};

/// "mc=64 kc=256 nc=512 mr=8 nr=32 order=nkm parallel=none pack_a=1 pack_b=1 unroll=1 a_panels=0 balance=1
/// c_prefetch=0".
std::string to_string(const SgemmKnobs& k);
/// The knobs of to_string's text: "name=value" fields separated by spaces, in any order, a field
/// left out keeping its value in `base` (mls-tune sgemm --knobs). mls::Error "sgemm knobs: ..."
/// naming the field for an unknown name, a field without '=', a value that is not a number or a
/// flag (0/1), or knobs check_knobs refuses.
SgemmKnobs knobs_from_string(std::string_view text, SgemmKnobs base = {}, int lanes = 0);
/// The knobs as the tuning database's `schedule` object (every field, and "template": kSgemmTemplate).
/// A record without "a_panels", "balance" or "c_prefetch" (written before those existed) reads as
/// a_panels false, balance 1, c_prefetch false.
nlohmann::json to_json(const SgemmKnobs& k);
/// The knobs of a `schedule` object; mls::Error "sgemm knobs: ..." naming the field for a missing
/// or mistyped field, another template, or a value the template cannot take (check_knobs).
SgemmKnobs knobs_from_json(const nlohmann::json& j);
/// mls::Error "sgemm knobs: <knob> <value> ..." unless every block size and mr >= 1, nr a positive
/// multiple of `lanes` (0: the CPU's, te::resolved_vector_lanes), order a permutation of "nkm",
/// parallel one of the five names, unroll in 1..64.
void check_knobs(const SgemmKnobs& k, int lanes = 0);

struct SgemmShape;  // below: one SGEMM problem

/// The knob space: the values each knob may take. Points of the space are the cross product,
/// less those whose micro-kernel does not fit the vector registers (valid()).
struct KnobSpace {
  std::vector<int> mc, kc, nc, mr, nr;
  std::vector<std::string> order, parallel;
  std::vector<bool> pack_a, pack_b;
  std::vector<int> unroll;
  std::vector<bool> a_panels;  ///< a point with pack_a false takes a_panels false only (nothing to lay out)
  std::vector<bool> c_prefetch;
  int threads = 1;  ///< every point's `balance` (at, sample, default_knobs, packed_knobs set it)
  int lanes = 16;           ///< vector lanes of the CPU (nr values are multiples of it)
  int vector_registers = 32;  ///< accumulators + b vectors + 1 must fit: MR * NR/lanes + NR/lanes + 1 <= this

  /// The full SGEMM space on this CPU for `threads` threads (parallel is "none" at one thread;
  /// "m", "n", "mr", "nr" at more), lanes and registers from the CPU (AVX-512: 16 lanes, 32
  /// registers; AVX2: 8, 16; else 4, 16). `lanes` != 0 overrides the CPU's. Its block lists hold
  /// lab4_packed's blocks for those lanes (packed_knobs).
  static KnobSpace sgemm(int threads, int lanes = 0);
  /// A small space (two values of a few knobs) for tests and demonstrations.
  static KnobSpace small(int threads, int lanes = 0);

  /// Points of the cross product (valid or not).
  std::size_t cross_size() const;
  /// Point `index` of the cross product (mixed radix, `unroll` fastest, `order` slowest).
  SgemmKnobs at(std::size_t index) const;
  /// Every value of `k` is one of the space's and its micro-kernel fits the registers.
  bool valid(const SgemmKnobs& k) const;
  /// The valid points, in the order of at().
  std::vector<SgemmKnobs> enumerate() const;
  /// A valid point drawn uniformly (each knob uniform, redrawn until valid).
  SgemmKnobs sample(Rng& rng) const;
  /// The valid points one step away: one knob moved to the value before or after it in its list
  /// (order and parallel: any other value).
  std::vector<SgemmKnobs> neighbours(const SgemmKnobs& k) const;
  /// The template's default for this space: the values nearest to MC 64, KC 256, NC 512, MR 8,
  /// NR 2 vectors, "nkm", parallel "m" (or "none"), both packed, unroll 1 (bench_codegen's
  /// hand-picked schedule), the first value of a_panels and c_prefetch (sgemm(): C prefetched),
  /// made valid.
  SgemmKnobs default_knobs() const;
  /// lab4_packed's own configuration on `shape` (mls/kernels/sgemm.hpp: packed_blocking of the
  /// space's lanes, 16 "avx512", 8 "avx2", else "scalar"): its MR, NR, MC, KC, NC, Goto's order
  /// "nkm", B packed, A packed unless lab4_packed reads it in place (packed_reads_a_in_place), its
  /// micro-kernel's k unroll, C prefetched and added after the k loop (c_prefetch, where the space
  /// has it: lab4_packed's kernels do that), and, when the space's parallel knob has no "none", the longer side of
  /// C parallel as lab4_packed_mt splits it ("m" when M >= N, else "n"). None when a value is not in
  /// this space (KnobSpace::sgemm holds it). The guided search measures it right after the default
  /// (SearchSpace::seeds), so the tuned kernel is the hand-written one's equal up to timing noise.
  std::optional<SgemmKnobs> packed_knobs(const SgemmShape& shape) const;
  /// mls::Error "KnobSpace: ..." for an empty value list, a value check_knobs refuses, or no
  /// valid point.
  void check() const;
};

// ---- the template -------------------------------------------------------------------------------

/// One SGEMM problem: C = op(A)·op(B) (beta 0) or C += op(A)·op(B) (beta 1), C M x N. op(A) is A,
/// stored M x K, or with trans_a the transpose of A stored K x M; op(B) is B, stored K x N, or with
/// trans_b the transpose of B stored N x K. Every matrix is row-major with a leading dimension (the
/// floats from one row to the next): lda, ldb, ldc, 0 meaning compact (the stored row's length). The
/// tuning database's key is m, n, k, trans_a, trans_b and beta (to_json): the leading dimensions are
/// built into a compiled kernel but do not change which knobs are fast. Brace-initialised {m, n, k}:
/// no transposes, beta 0, compact.
struct SgemmShape {
  long m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int beta = 0;                    ///< 0: C = op(A)·op(B); 1: C += op(A)·op(B)
  long lda = 0, ldb = 0, ldc = 0;  ///< leading dimensions; 0: compact
  friend bool operator==(const SgemmShape&, const SgemmShape&) = default;
  /// The leading dimensions in effect: lda, else K (M with trans_a); ldb, else N (K with trans_b); ldc, else N.
  long a_ld() const { return lda ? lda : (trans_a ? m : k); }
  long b_ld() const { return ldb ? ldb : (trans_b ? k : n); }
  long c_ld() const { return ldc ? ldc : n; }
  /// The same problem with every compact leading dimension written as 0 (equal problems compare equal).
  SgemmShape canonical() const;
  /// The tuning key: the same flags and extents, compact leading dimensions.
  SgemmShape key() const;
};
/// "1024x1024x1024" (m x n x k), then what is not the default: " trans_a", " trans_b", " beta=1",
/// " lda=<lda>" ... (e.g. "768x384x128 trans_b beta=1").
std::string to_string(const SgemmShape& s);
/// The tuning database's shape object: {"m", "n", "k", "trans_a", "trans_b", "beta"}.
nlohmann::json to_json(const SgemmShape& s);
/// The tuning key of a database shape object; a record written before the flags existed (no
/// "trans_a", "trans_b", "beta") is a problem without transposes, beta 0. mls::Error
/// "sgemm shape: ..." naming the field for a missing extent, an extent < 1, a mistyped flag or a
/// beta other than 0 or 1.
SgemmShape shape_from_json(const nlohmann::json& j);
/// 2 m n k.
double sgemm_flops(const SgemmShape& s);

/// One compiled kernel of a plan: the template on the block C[row0 : row0 + m][col0 : col0 + n] of
/// the problem over its k range [k0, k0 + k), reading A, B and C where they lie (the pointers
/// offset, the problem's leading dimensions).
struct SgemmPiece {
  long row0 = 0, col0 = 0, k0 = 0;
  /// The piece's problem: its m x n x k, the problem's flags and leading dimensions, and beta 1 on
  /// a k range after the first (it adds to what the first range wrote).
  SgemmShape shape;
  /// The plan's knobs as this piece uses them: mr, nr the edge's extent on an edge piece (nr below
  /// the vector lanes: a narrow edge, plain loops); on the edge of the last rows (one panel) B read
  /// in place (pack_b off) and the parallel loop over columns ("m" -> "n", "mr" -> "nr"), on the
  /// edge of the last columns A read in place (pack_a, a_panels off) and the loop over rows ("n" ->
  /// "m", "nr" -> "mr"): an edge uses each element of the other operand once, so a copy would be a
  /// second pass over it, and its own dimension has one panel; pack_b on whenever B is transposed.
  SgemmKnobs knobs;
  long mc = 0, nc = 0, kc = 0;  ///< MC (a multiple of mr), NC (of nr), KC (divides the piece's k)
  /// The micro-kernel's vector lanes: the plan's, or half or a quarter of them on an edge of that
  /// many columns (8 or 4 with 16 lanes: 8 leftover columns take one 8-lane vector, not plain loops).
  int lanes = 16;
};
/// "rows 0:96 cols 0:512 k 0:256 beta=0 mr=8 nr=32 mc=96 nc=512 kc=256".
std::string to_string(const SgemmPiece& p);

/// What the template makes of knobs on a problem: its pieces, each a kernel the micro-kernel tiles
/// exactly, none copying an operand. The main piece (rows a whole number of mr panels, columns of nr
/// panels, k a whole number of equal KC blocks) is first; where the problem has an edge, the pieces
/// after it cover it: the last M % mr rows (mr = that remainder), the last N % nr columns (nr = their
/// whole vectors, then a piece of lanes/2 and one of lanes/4 columns where as many are left (a
/// micro-kernel of narrower vectors: SgemmPiece::lanes), then a narrow piece of the rest (plain
/// loops)), each reading the other operand in
/// place and parallel over the other dimension (SgemmPiece::knobs), and where K is not a whole number of
/// blocks of kc = ceil(K / ceil(K / KC)) (lab4_packed's kc_step, unrounded), the last, shorter block
/// of k as pieces of their own that add to C (beta 1): as many k ranges as blocks, so C is passed
/// over once a block (K = 2048 at KC 384: 5 blocks of 342, then 338; not 6 of 341 and a pass of
/// its own for the last 2). Blocks: b = ceil(P / (MC/mr)) blocks of ceil(P / b) panels (P: the
/// panels), the last block shorter (a guard on the panel loop, outside the tile).
struct SgemmPlan {
  SgemmKnobs knobs;
  SgemmShape shape;                  ///< the problem
  std::vector<SgemmPiece> pieces;    ///< in the order they run (a k range after the first runs last)
  long mc = 0, nc = 0, kc = 0;       ///< the first piece's block sizes
  int lanes = 16;
  /// Whether the problem has edges (more than one piece).
  bool edges() const { return pieces.size() > 1; }
};
/// The plan of `knobs` for a problem (check_knobs first; every extent >= 1, beta 0 or 1, leading
/// dimensions 0 or at least the compact ones; mls::Error "plan_sgemm: ..." otherwise).
SgemmPlan plan_sgemm(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes = 0);
/// The problem rounded up to whole tiles: M to a multiple of mr, N of nr, K to ceil(K / KC) blocks of
/// ceil(K / blocks) (compact, no flags): the worked steps' problem (sgemm_steps), one piece, the same
/// product on zero-padded operands.
SgemmShape padded_to_tiles(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes = 0);

/// The micro-kernel of a piece: te::gemm_regblock_intrinsic(mr, nr, kc) with `#pragma GCC unroll
/// <unroll>` before its k loop when unroll > 1 (name suffix "_u<unroll>"); te::gemm_intrinsic's plain
/// loops when nr is not a multiple of the lanes (a narrow edge; unroll ignored).
/// `c_prefetch`: the register-blocked kernel's prefetch_c (SgemmKnobs::c_prefetch; name suffix "_pc").
te::Intrinsic micro_kernel(long mr, long nr, long kc, int unroll, int lanes = 0, bool c_prefetch = false);

/// The template instantiated on one piece: the schedule of C (+)= op(A)·op(B) on the piece's
/// operands, and its loop nest.
struct SgemmInstance {
  SgemmPiece piece;
  te::Tensor A, B, C;   ///< as the piece reads them: A m x k (k x m with trans_a), B k x n (n x k), C m x n, strided
  te::Schedule schedule;
  te::LoweredFunc func;
};
/// Schedules and lowers the template on one piece (see the top of this file). `name` "" gives a name
/// made of the piece's problem and knobs (a C identifier, unique per piece).
SgemmInstance instantiate(const SgemmPiece& piece, std::string name = "");
/// The template on a problem its micro-kernel tiles exactly (a plan of one piece); mls::Error
/// "instantiate: ..." naming the pieces of a problem with edges (instantiate_all takes those).
SgemmInstance instantiate(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes = 0, std::string name = "");
/// The same on m x n x k (no transposes, beta 0, compact).
SgemmInstance instantiate(const SgemmKnobs& knobs, long m, long n, long k, int lanes = 0, std::string name = "");
/// Every piece of the plan of `knobs` on `shape`, instantiated, in the plan's order.
std::vector<SgemmInstance> instantiate_all(const SgemmKnobs& knobs, const SgemmShape& shape, int lanes = 0);

/// A compiled SGEMM of one plan: a kernel per piece. Copies share the compiled code; run() is safe
/// from several threads at once.
class CompiledSgemm {
 public:
  CompiledSgemm() = default;
  /// `kernels`: one per piece of `plan`, in its order (mls::Error otherwise).
  CompiledSgemm(SgemmPlan plan, std::vector<te::JitKernel> kernels);
  const SgemmPlan& plan() const { return plan_; }
  /// The kernels, one per piece.
  const std::vector<te::JitKernel>& kernels() const { return kernels_; }
  /// The first piece's kernel.
  const te::JitKernel& kernel() const { return kernels_.front(); }
  explicit operator bool() const { return !kernels_.empty(); }
  /// C = alpha op(A) op(B) + beta C (the SgemmFn contract) on the plan's M, N, K. The pieces run on
  /// the operands where they lie when the call is the plan's problem: its transposes and leading
  /// dimensions, alpha = 1 and beta = the plan's (a plan with beta 1 takes any beta: C is scaled in
  /// place first, or zeroed for 0). Anything else goes through staged copies in the plan's layout
  /// (counted by tuned_staged_calls()). threads: as te::JitKernel::run. mls::Error "CompiledSgemm:
  /// ..." for another M, N, K or too small leading dimensions.
  void run(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
           const float* B, long ldb, float beta, float* C, long ldc, int threads = 0) const;
  /// The plan's own problem (its transposes, leading dimensions and beta; alpha 1).
  void run(const float* A, const float* B, float* C, int threads = 0) const;

 private:
  /// Every piece on the plan's layout, no checks.
  void run_pieces(const float* A, const float* B, float* C, int threads) const;
  SgemmPlan plan_;
  std::vector<te::JitKernel> kernels_;
};

/// CompiledSgemm::run calls (the `tuned` kernel's among them) that copied an operand into the
/// compiled layout (a transpose or leading dimension the plan does not have, alpha != 1, or beta != 0
/// on a beta-0 plan), since the process started or reset_tuned_state().
std::int64_t tuned_staged_calls();
namespace detail {
/// Sets tuned_staged_calls() to 0 (reset_tuned_state calls it).
void reset_staged_calls();
}  // namespace detail

/// instantiate + te::compile (one compiler run, or the JIT's cache). Errors: the JIT's.
CompiledSgemm compile_sgemm(const SgemmKnobs& knobs, const SgemmShape& shape, const jit::CompileOptions& options = {});
/// Every knob set for one shape in one translation unit (one compiler run); in the order of `knobs`.
std::vector<CompiledSgemm> compile_sgemm_all(const std::vector<SgemmKnobs>& knobs, const SgemmShape& shape,
                                             const jit::CompileOptions& options = {});
/// Every (knobs, problem) job in one translation unit (one compiler run; a piece two jobs share is
/// compiled once); in the order of `jobs`.
std::vector<CompiledSgemm> compile_sgemm_jobs(const std::vector<std::pair<SgemmKnobs, SgemmShape>>& jobs,
                                              const jit::CompileOptions& options = {});

// ---- worked examples: the schedules of the handout, one idea at a time ---------------------------

/// One schedule of a worked example: what it adds (`title`), the primitives that make it from the
/// step before (`code`, as C++), and the schedule of C = op(A)·B on A, B, C.
struct ScheduleStep {
  std::string title;
  std::string code;
  te::Tensor A, B, C;
  te::Schedule schedule;
};
/// The slide's three loop nests of C[y][x] = sum_k A[k][y] B[k][x] on n x n matrices (slides 001,
/// "Low-level Program Variants"): plain; tiled 8x8x8; tiles of C accumulated in a local CL, 8x8
/// tiles of A and B copied into AL, BL by a `dma_copy2d` intrinsic, multiplied by
/// `fused_gemm8x8_add`. n: a multiple of 8 (mls::Error otherwise).
std::vector<ScheduleStep> slide_steps(long n);
/// The SGEMM template (instantiate) built up one idea at a time on C = A·B of the plan of `knobs`
/// for m x n x k (padded_to_tiles: zero-padded operands, KnobSpace::default_knobs() when `knobs` is empty): 1 the
/// default loops; 2 k outside x (i-k-j); 3 MR x NR register tiles, their columns vectorized; 4
/// MC/KC/NC cache blocks in Goto's order; 5 A's and B's blocks packed (cache_read, vectorized
/// copies); 6 the MR x NR x KC tile tensorized with the register-blocked micro-kernel: the
/// template itself (knobs.order "nkm", no parallel loop, unroll 1). Every step computes the same
/// product.
std::vector<ScheduleStep> sgemm_steps(long m, long n, long k, const std::optional<SgemmKnobs>& knobs = std::nullopt,
                                      int lanes = 0);

// ---- measuring candidates -----------------------------------------------------------------------

/// Runs C = A·B on compact operands of the tuner's shape at `threads` (0: mls::num_threads()).
using CandidateFn = std::function<void(const float* A, const float* B, float* C, int threads)>;
/// Makes the runnable candidate of knobs (compiles it); throws on failure (a compile error).
using CandidateBuilder = std::function<CandidateFn(const SgemmKnobs&, const SgemmShape&)>;
/// The default builder: compile_sgemm with `options`.
CandidateBuilder jit_builder(const jit::CompileOptions& options = {});

/// What happened to one candidate.
enum class TrialStatus { Ok, CompileError, Crashed, TimedOut, Wrong, Failed };
/// "ok", "compile-error", "crashed", "timed-out", "wrong", "failed".
std::string to_string(TrialStatus s);

/// One measured (or refused) candidate.
struct Trial {
  int index = 0;            ///< 0-based, in the order measured
  SgemmKnobs knobs;
  TrialStatus status = TrialStatus::Failed;
  double seconds = 0;       ///< per run (Ok only): the interleaved ratio to the anchor times its time
  double gflops = 0;        ///< Ok only
  double compile_seconds = 0;
  std::string message;      ///< why it was refused (first line of the error, the signal, ...)
};

/// How candidates are checked and timed.
struct MeasureOptions {
  /// Run each candidate's first run in a forked child (one thread) first: a crash or a hang kills
  /// only the child. Off: the first run is in this process (a crash is fatal).
  bool fork_guard = true;
  double timeout_s = 30;         ///< the child is killed after this, the candidate TimedOut
  /// A candidate whose first in-process run takes more than this many times the anchor's is
  /// TimedOut (not timed further).
  double slow_factor = 20;
  int repeat = 3;                ///< rounds of interleaved_ratio against the anchor
  double batch_seconds = 5e-3;   ///< interleaved_ratio's batch
};

/// How one compiled candidate is checked and timed (the SGEMM Bench and the operators' OpBench
/// share the steps, measure_candidate).
struct CandidateChecks {
  std::function<void(int threads)> run;  ///< one run with fresh outputs (threads as JitKernel::run)
  std::function<double()> error;         ///< the last run's largest error over its tolerance (<= 1: right)
  std::function<double()> time;          ///< seconds per run, timed interleaved with the anchor
  std::string peer;                      ///< what the result is compared with: "lab4_packed", ...
  std::string anchor;                    ///< what the time is compared with, in a TimedOut message
};
/// What measure_candidate found: status Ok with `seconds`, else why not (`message`).
struct CandidateResult {
  TrialStatus status = TrialStatus::Failed;
  double seconds = 0;
  std::string message;
};
/// The steps every candidate goes through after it compiled: its first run in a forked child at one
/// thread (options.fork_guard; a crash, hang, throw or wrong result ends there), a first run here at
/// `threads` that must be right again and take at most slow_factor x `anchor_seconds` (else
/// TimedOut), then `time`. A throw at any step is Failed with the error's first lines.
CandidateResult measure_candidate(const CandidateChecks& c, const MeasureOptions& options, double anchor_seconds,
                                  int threads);
/// Seconds of one call of `fn` (an anchor kernel): after a warm-up call, the median of 5 batches of
/// about 10 ms each (one run of a small problem is noise).
double median_batch_seconds(const std::function<void()>& fn);
/// The first `lines` non-empty lines of an error message joined by " | ", at most 400 characters.
std::string short_message(const std::string& what, int lines = 2);

/// The problem a tuner measures on: seeded random operands, compact, in the layout of the problem's
/// transposes (and, for beta 1, a random C to add to), the reference result (lab4_packed, or
/// lab4_packed_mt at more threads, on the same flags) and the anchor time. Made once per tuning.
class Bench {
 public:
  /// On shape.key() (compact leading dimensions).
  Bench(const SgemmShape& shape, int threads, std::uint64_t seed = 1);
  const SgemmShape& shape() const { return shape_; }
  int threads() const { return threads_; }
  /// Seconds of one run of the anchor (the hand-written packed kernel): the median of 5 batches of
  /// about 10 ms each.
  double anchor_seconds() const { return anchor_seconds_; }
  /// Runs the anchor once (into a scratch C).
  void run_anchor();
  /// The largest |got - reference| over the tolerance 4 K eps max|A| max|B| (<= 1 is right).
  double error_of(const std::vector<float>& got) const;
  /// Checks, guards and times one candidate (see MeasureOptions). Never throws for a bad
  /// candidate: the status says what happened.
  Trial measure(const SgemmKnobs& knobs, const CandidateBuilder& build, const MeasureOptions& options);
  /// Seconds per run of a candidate that passed measure(): its interleaved ratio to the anchor
  /// (`repeat` rounds of `batch_seconds` batches) times the anchor's time.
  double time(const CandidateFn& fn, int repeat, double batch_seconds);

 private:
  /// C before a checked run: NaN everywhere for beta 0 (every element must be written), the
  /// starting C for beta 1.
  void reset_c(std::vector<float>& c) const;
  SgemmShape shape_;
  int threads_;
  std::vector<float> a_, b_, c0_, c_, ref_, anchor_c_;
  double tolerance_ = 0, anchor_seconds_ = 0;
};

/// Runs `fn` in a forked child with a wall-clock limit: Ok when it returned true, Wrong when it
/// returned false, Failed when it threw (the message), Crashed on a signal (named), TimedOut when
/// killed at the limit. The child runs one thread (no pool: call nothing parallel in it).
Trial run_guarded(const std::function<bool(std::string& message)>& fn, double timeout_s);

// ---- search -------------------------------------------------------------------------------------

enum class Strategy { Grid, Random, Guided };
/// "grid", "random", "guided".
std::string to_string(Strategy s);
/// The strategy of a name; mls::Error "tune: unknown strategy '<s>' (grid, random, guided)".
Strategy strategy_from_string(std::string_view s);

/// The guided strategy's cost model: ridge regression of log(seconds) on knob features
/// (sgemm_features), refitted after every measurement.
class CostModel {
 public:
  explicit CostModel(double ridge = 1.0) : ridge_(ridge) {}
  /// Fits on (features, log seconds) pairs; with fewer than 2 samples it predicts their mean.
  void fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);
  /// The predicted log seconds.
  double predict(const std::vector<double>& x) const;
  bool fitted() const { return !w_.empty(); }

 private:
  double ridge_;
  std::vector<double> mean_, scale_, w_;
  double bias_ = 0;
};
/// Features of knobs on a shape: log2 of each block size and micro-kernel extent, unroll, one-hot
/// order and parallel, the packing flags, register use, the share of the edge pieces' flops, log2 of the A block, B
/// block and B panel bytes.
std::vector<double> sgemm_features(const SgemmKnobs& k, const SgemmShape& shape, int lanes);
/// The guided search's prior: an analytic estimate of log(seconds) of knobs on a shape at `threads`
/// threads, before anything is measured (only differences between knobs matter, not the constant).
/// Per piece of the plan, its micro-kernel's cycles per k step, the largest of its FMAs over 2 per
/// cycle, its loads (NR/lanes vectors of B, MR broadcasts of A) over 2 per cycle and the FMA latency
/// (4: each accumulator is updated once per step), and the C tile loaded and stored once per call;
/// a narrow edge (plain loops) at scalar speed; blocks that overflow their cache (B panel 4 KC NR
/// bytes over L1's 48 KiB, A block 4 MC KC over 512 KiB of L2, B block 4 KC NC over 8 MiB) slow the
/// kernel; operands read in place pay for their strided rows (more at a leading dimension of a
/// multiple of 4 KiB); the packing copies cost per element (twice for a transposing one) times how
/// often the loop order repeats them; at more threads the parallel loop's trips are shared out
/// (imbalance counted), copies outside it stay serial, and each parallel region costs a fork-join.
double sgemm_prior(const SgemmKnobs& k, const SgemmShape& shape, int lanes, int threads);
/// A key per distinct compiled schedule: knobs whose plans on `shape` are the same (block targets
/// rounded to the same blocks) have the same key.
std::string plan_key(const SgemmKnobs& k, const SgemmShape& shape, int lanes = 0);
/// Solves the symmetric positive definite system a x = b (Cholesky); mls::Error when it is not.
std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, std::size_t n);

// ---- one search for every template --------------------------------------------------------------

/// A point of a template's knob space as the search sees it: one index per knob into that knob's
/// list of values (SGEMM's KnobSpace, an operator's OpSpace).
using Point = std::vector<int>;

/// One knob as the search sees it: how many values it has, and whether they are ordered (a step to
/// a neighbour is to the value before or after) or categories (a neighbour is any other value).
struct KnobDim {
  std::string name;
  int size = 1;
  bool ordered = true;
};

/// A template's knob space on one problem, as the strategies see it: the knobs, which points are
/// valid, the cost model's features of a point and a key per distinct compiled schedule. The
/// hooks left empty get the generic behaviour (below). Copies share nothing but the hooks.
struct SearchSpace {
  std::vector<KnobDim> dims;
  std::function<bool(const Point&)> valid{};                    ///< empty: every point in range
  std::function<std::vector<double>(const Point&)> features{};  ///< empty: one-hot of each knob's index
  std::function<std::string(const Point&)> key{};               ///< empty: the indices
  std::function<Point(Rng&)> sample_fn{};                       ///< empty: each index uniform, redrawn until valid
  std::function<std::vector<Point>(const Point&)> neighbours_fn{};  ///< empty: one knob one step
  /// An estimate of log(seconds) before any measurement (the SGEMM space's: sgemm_prior); empty:
  /// none (the guided strategy then starts with random points).
  std::function<double(const Point&)> prior{};
  Point default_point{};  ///< where the guided strategy starts (valid)
  /// Points the guided strategy measures right after the default, in order, before its own
  /// proposals (invalid or already proposed ones skipped): the SGEMM space's are lab4_packed's
  /// configuration (KnobSpace::packed_knobs), then the Tuner adds the best record of the shape in
  /// the tuning database. Grid and random search ignore them (the baselines stay unseeded).
  std::vector<Point> seeds{};

  /// Points of the cross product.
  std::size_t cross_size() const;
  /// Point `index` of the cross product (mixed radix, the last knob fastest).
  Point at(std::size_t index) const;
  /// Every index in range and valid().
  bool is_valid(const Point& p) const;
  /// The valid points, in the order of at().
  std::vector<Point> enumerate() const;
  /// A valid point at random (sample_fn, or each index uniform in knob order, redrawn until valid:
  /// mls::Error after 10000 draws).
  Point sample(Rng& rng) const;
  /// The valid points one step away (neighbours_fn, or: an ordered knob to the value before or
  /// after, a categorical one to any other value), without `p` and without repeats.
  std::vector<Point> neighbours(const Point& p) const;
  /// features(p), or the one-hot of each knob's index.
  std::vector<double> features_of(const Point& p) const;
  /// key(p), or the indices joined.
  std::string key_of(const Point& p) const;
  /// prior(p), or 0 without a prior.
  double prior_of(const Point& p) const { return prior ? prior(p) : 0.0; }
  /// mls::Error "SearchSpace: ..." for no knobs, a knob with no values, or a default point that is
  /// not valid.
  void check() const;
};

/// What the search does (the strategy's part of TuneOptions).
struct SearchOptions {
  Strategy strategy = Strategy::Guided;
  int trials = 64;         ///< candidates proposed (refused ones count), >= 1
  double budget_s = 0;     ///< wall-clock budget in seconds (0: none)
  std::uint64_t seed = 1;  ///< sampling and the model's exploration (Rng stream "tune_search_<strategy>")
  int confirm = 3;         ///< the fastest trials timed again at the end (SearchCallbacks::retime)
  double epsilon = 0.1;    ///< guided: chance of a random proposal instead of the model's best
  int proposals = 64;      ///< guided: candidates scored by the model each round
};

/// One candidate of the search: its point and what measuring it gave.
struct SearchTrial {
  int index = 0;  ///< 0-based, in the order proposed
  Point point;
  TrialStatus status = TrialStatus::Failed;
  double seconds = 0;  ///< per run (Ok only)
  double rate = 0;     ///< the figure of merit (GFLOP/s, GB/s; Ok only): higher is better
  double compile_seconds = 0;
  std::string message;
};

/// What the search calls. `evaluate` is required; the others may be empty.
struct SearchCallbacks {
  /// Measures a point (status, seconds, rate, message); the search fills in index and point.
  std::function<SearchTrial(const Point&)> evaluate;
  /// Times a point that passed again, longer (the confirmation); none: keep the search's time.
  std::function<std::optional<double>(const Point&)> retime{};
  /// The rate of a time (for the confirmations).
  std::function<double(double seconds)> rate_of{};
  /// Each Ok trial (confirmed false) and each confirmation (true): the tuning database.
  std::function<void(const SearchTrial&, bool confirmed)> record{};
  /// After each trial: the trial and the best rate so far after each trial.
  std::function<void(const SearchTrial&, const std::vector<double>& best_so_far)> on_trial{};
};

/// What a search found.
struct SearchResult {
  bool found = false;  ///< some trial was Ok
  Point best;          ///< the fastest Ok point (the default point when none)
  double best_seconds = 0, best_rate = 0;
  std::vector<SearchTrial> trials, confirmed;
  std::vector<double> best_so_far;  ///< best rate after each trial (0 before the first Ok)
  double wall_seconds = 0;
};

/// The strategies (grid, random, guided), for any template: the SGEMM Tuner and the operators'
/// OpTuner (mls/kernels/tune_ops.hpp) run this one search over their SearchSpace.
class Search {
 public:
  /// mls::Error "tune: ..." for trials < 1, a negative budget, epsilon outside [0, 1], proposals
  /// < 1, or a space that does not pass check().
  Search(SearchSpace space, SearchOptions options);
  const SearchSpace& space() const { return space_; }
  /// Proposes, measures (callbacks.evaluate) and records until `trials` points were proposed, the
  /// budget is spent or the strategy has nothing left; then times the `confirm` fastest again
  /// (callbacks.retime, 3x the rounds: one noisy lucky measurement must not win), and the space's
  /// seeds that were measured (lab4_packed's configuration), and picks the best among them.
  SearchResult run(const SearchCallbacks& callbacks);

 private:
  /// The next candidate not measured yet (none when the strategy has nothing left).
  std::optional<Point> propose(const std::vector<SearchTrial>& done, Rng& rng);
  /// The guided strategy's next candidate, given the trials `done` so far (in order): a valid,
  /// fresh point, the default first (src/tune_search.cpp says how; a student function of lab 4).
  std::optional<Point> propose_guided(const std::vector<SearchTrial>& done, Rng& rng);
  /// No candidate with the key of `p` (SearchSpace::key_of) was proposed yet.
  bool fresh(const Point& p) const;
  /// A random fresh point (2000 draws, then the first fresh one of the enumeration); none when
  /// every key of the space was proposed.
  std::optional<Point> random_fresh(Rng& rng) const;
  /// Times the fastest trials again (SearchOptions::confirm), and the seeds that passed (none when
  /// confirm is 0), and picks the best among them.
  void confirm(SearchResult& r, const SearchCallbacks& cb) const;
  SearchSpace space_;
  SearchOptions options_;
  std::vector<Point> grid_;
  std::set<std::string> seen_;  ///< key of every point proposed
  CostModel model_;
};

/// What a tuning run does.
struct TuneOptions {
  Strategy strategy = Strategy::Guided;
  int trials = 64;            ///< candidates measured (refused ones count), >= 1
  double budget_s = 0;        ///< wall-clock budget in seconds (0: none); the run stops after it
  std::uint64_t seed = 1;     ///< operands, sampling, the model's exploration
  int threads = 1;            ///< the thread count measured at (>= 1)
  std::optional<KnobSpace> space{};   ///< default KnobSpace::sgemm(threads)
  MeasureOptions measure{};
  jit::CompileOptions jit{};  ///< for the default builder
  CandidateBuilder builder{}; ///< default jit_builder(jit)
  bool record = true;         ///< append each Ok trial to the tuning database
  std::filesystem::path db_path{};  ///< "": default_tuning_db_path()
  /// After the search, the `confirm` fastest candidates are timed again with 3x the rounds and 4x
  /// the batch (one noisy lucky measurement must not win: the best of many noisy times is biased
  /// low); the best is chosen among them. 0: no confirmation.
  int confirm = 3;
  double epsilon = 0.1;       ///< guided: chance of a random proposal instead of the model's best
  int proposals = 64;         ///< guided: candidates scored by the model each round
  /// Guided: measure lab4_packed's configuration (KnobSpace::packed_knobs) right after the default.
  bool seed_packed = true;
  /// Guided: then the fastest record of this shape in the tuning database (a search never ends
  /// slower than an earlier one). Off where runs are compared (mls-tune --strategy compare: a
  /// record of an earlier run, random's included, would hand the answer to the next).
  bool seed_db = true;
  /// Called after each trial (a progress bar).
  std::function<void(const Trial& t, const std::vector<double>& best_so_far)> on_trial{};
  /// A synthetic cost in place of compiling and timing (tests and demonstrations of a strategy):
  /// the trial of a candidate (status, seconds, GFLOP/s; its knobs and index are filled in after).
  /// Set, the tuner makes no Bench (no operands, no anchor: anchor_seconds 0), confirms nothing and
  /// records nothing in the database.
  std::function<Trial(const SgemmKnobs&)> evaluate{};
};

/// The tuning database's `schedule` object of a trial: to_json(knobs) and "measure": "search" (a
/// time of the search) or "confirmed" (timed again after it, see TuneOptions::confirm).
nlohmann::json schedule_json(const SgemmKnobs& k, bool confirmed);

/// What a tuning run found.
struct TuneResult {
  bool found = false;          ///< some candidate was Ok
  SgemmKnobs best;             ///< the fastest Ok candidate (the space's default when none)
  double best_seconds = 0, best_gflops = 0;
  double anchor_seconds = 0;   ///< the hand-written packed kernel's time on the same operands
  std::vector<Trial> trials;        ///< as measured in the search
  std::vector<Trial> confirmed;     ///< the fastest trials timed again (TuneOptions::confirm)
  std::vector<double> best_so_far;  ///< best GFLOP/s after each trial in the search (0 before the first Ok)
  double wall_seconds = 0;
};

/// Runs a strategy on one shape at one thread count (see TuneOptions): the one Search over the
/// SGEMM space (sgemm_search_space), each point measured by a Bench and recorded as op "sgemm".
class Tuner {
 public:
  /// On shape.key(): its extents, transposes and beta, compact operands (the database's key).
  Tuner(SgemmShape shape, TuneOptions options);
  TuneResult run();

 private:
  SgemmShape shape_;
  TuneOptions options_;
  KnobSpace space_;
};

/// The SGEMM space as the search sees it: the knobs slowest first as in KnobSpace::at (order,
/// parallel, pack_a, pack_b, mr, nr, mc, kc, nc, unroll), KnobSpace's own validity, sampling and
/// neighbours, sgemm_features, sgemm_prior at `threads` (0: 1 when the space's parallel knob has
/// "none", else 2), plan_key (knobs with the same plan are one point), the default knobs, and as
/// seeds lab4_packed's configuration, then the same with the space's leanest micro-kernel
/// (lean_tile: where it is another tile).
SearchSpace sgemm_search_space(const KnobSpace& space, const SgemmShape& shape, int threads = 0);
/// The space's micro-kernel MR x NR with the fewest loads per FMA (1/MR + lanes/NR: per k, one
/// broadcast of A per row and one vector of B per column of vectors, for MR x NR/lanes FMAs) among
/// those that fit the registers (KnobSpace::valid), ties to more accumulators, then the larger MR.
/// It is the register budget's choice, not a measured one: 6 x 64 with AVX-512's 32 registers
/// (24 accumulators, 0.42 loads per FMA, against 12 x 32's 0.58), 4 x 24 with AVX2's 16 (12
/// accumulators, 0.58). mls::Error where no tile fits (KnobSpace::check). The guided search
/// measures it as a seed after lab4_packed's configuration (at n = 2048 on Zen 5 the tiles of 24
/// accumulators with fewer loads, 6 x 64 and 8 x 48, ran 3-6% faster than 12 x 32).
std::pair<int, int> lean_tile(const KnobSpace& space);
/// The knobs of a point of sgemm_search_space(space, ...), and back (mls::Error "KnobSpace: ..." for
/// a value not in the space or an index out of range).
SgemmKnobs sgemm_knobs_at(const KnobSpace& space, const Point& p);
Point sgemm_point_of(const KnobSpace& space, const SgemmKnobs& k);

/// One strategy's best-so-far curve, for the tuning plot.
struct TuningCurve {
  std::string label;               ///< e.g. "guided"
  std::vector<double> best_so_far; ///< TuneResult::best_so_far
};
/// An SVG of best-so-far GFLOP/s against trial (a step line per curve, its best in the legend) and
/// the hand-written kernel's GFLOP/s as a dashed line (`reference_gflops` 0: none); `unit` names
/// the figure ("GB/s" for the operators' tuners). mls::Error "tuning_curve_svg: ..." for no
/// curves, an empty curve, or a negative or non-finite value.
std::string tuning_curve_svg(const std::vector<TuningCurve>& curves, double reference_gflops,
                             const std::string& reference_label, const std::string& title,
                             const std::string& unit = "GFLOP/s");

/// Trials (1-based) until a best-so-far curve first reaches `target` GFLOP/s; 0 when it never does.
int trials_to_reach(const std::vector<double>& best_so_far, double target);

/// How fast strategies approach the best schedule, over several seeds each (the search
/// goal: guided reaches 95% of the best found in at most a quarter of the trials random needs).
struct StrategyComparison {
  double best_gflops = 0;  ///< the best of every run of every strategy
  double target = 0;       ///< fraction x best_gflops
  struct Row {
    std::string strategy;
    std::vector<int> trials_to_target;  ///< per seed, in order; 0: never reached in its trials
    int trials = 0;                     ///< the longest of its runs
    /// The median over seeds, a run that never reached the target counting as trials + 1 (so a
    /// median above `trials` means "not within the budget").
    double median = 0;
    std::vector<double> median_curve;   ///< the pointwise median of the seeds' best-so-far curves
  };
  std::vector<Row> rows;  ///< in the order of the input
};
/// Compares per-seed best-so-far curves of each strategy (pairs of name and curves, one curve per
/// seed). The best found is `best_gflops` when > 0 (mls-tune passes the best of the runs' confirmed
/// times: a search measurement can be one lucky fast run that no strategy reaches again), else the
/// largest value of the curves. mls::Error "compare_strategies: ..." for no strategy, a strategy with
/// no curves or an empty curve, a fraction outside (0, 1], or no trial passing in any run.
StrategyComparison compare_strategies(
    const std::vector<std::pair<std::string, std::vector<std::vector<double>>>>& curves, double fraction = 0.95,
    double best_gflops = 0);

// ---- the `tuned` kernel of the registry ------------------------------------------------------------

/// Which knobs the `tuned` kernel uses for a shape at `threads` on this CPU, and where they came
/// from: "db" (the database's fastest record of the shape), "nearest <m>x<n>x<k>" (the fastest
/// record of the nearest shape measured at that thread count: the smallest sum of |log| ratios of
/// m, n, k), "tuned" (MLS_TUNE=1 tuned it now), "packed" (no record: lab4_packed's own configuration,
/// KnobSpace::packed_knobs), or "default" (the space's default, where that is not in the space).
struct KnobChoice {
  SgemmKnobs knobs;
  std::string source;
};
/// The fastest record among `records` of op "sgemm", this template, `cpu_key`, `threads` and the
/// problem's flags (trans_a, trans_b, beta: shape_from_json, a record without them is a problem
/// without transposes, beta 0), of `shape` when there is one, else of the nearest shape with the
/// same flags; among that shape's records the confirmed ones ("measure": "confirmed") are
/// preferred where there are any. Leading dimensions play no part. None when no record qualifies
/// (records whose shape or knobs do not parse are skipped).
std::optional<KnobChoice> choose_knobs(const std::vector<TuningRecord>& records, const SgemmShape& shape, int threads,
                                       std::string_view cpu_key);

/// The `tuned` SgemmFn: C = alpha op(A) op(B) + beta C with the best known schedule of the problem
/// (its m, n, k, transposes and beta: 1 for any beta but 0) at mls::num_threads() threads
/// (choose_knobs on the database, $MLS_TUNING_DB; with MLS_TUNE=1 a problem with no record of its
/// own is tuned first, with its flags: MLS_TUNE_TRIALS candidates, default 24, guided; else the
/// nearest tuned shape's knobs, else lab4_packed's configuration). The call's own problem (its transposes
/// and leading dimensions) is compiled, so the operands are read where they lie; alpha != 1 runs
/// through a copy of C. Compiled kernels are kept per (problem, plan). Problems below
/// tuned_min_flops(), K = 0, and any failure to compile (no compiler, a compile error: one line on
/// stderr, the first time) run lab4_packed (lab4_packed_mt at more than one thread).
void sgemm_tuned(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                 const float* B, long ldb, float beta, float* C, long ldc);
/// Registers "tuned" (priority -100: never the default) with common's registry. Called by a
/// provider in every program linked with lab 4; safe to call more than once.
void register_tuned_kernel();
/// Problems with 2 M N K below this run the hand-written kernel (default 2^21: compiling a kernel
/// for a tiny product costs more than it can save). Tests set 0.
double tuned_min_flops();
void set_tuned_min_flops(double flops);
/// The last warning the `tuned` kernel printed ("" when none), and how many times it fell back to
/// the hand-written kernel after a failure.
std::string tuned_last_warning();
std::int64_t tuned_fallbacks();
/// The knobs the `tuned` kernel chose for a shape at a thread count in this process (none before
/// its first call on that shape, or for a problem it sent to the hand-written kernel by size).
std::optional<KnobChoice> tuned_choice(const SgemmShape& shape, int threads);
/// How the `tuned` kernel compiles (default jit::CompileOptions{}: -O3, the JIT's cache). Tests set
/// quicker options.
jit::CompileOptions tuned_compile_options();
void set_tuned_compile_options(const jit::CompileOptions& options);
/// Forgets the compiled kernels, the knob choices, the warnings, the counters and the compile
/// options (as a new process would start).
void reset_tuned_state();

}  // namespace mls::kernels::tune
