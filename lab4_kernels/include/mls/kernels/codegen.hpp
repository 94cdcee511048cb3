#pragma once
/// Lab 4 part 2, ML compilation: code generation. A lowered loop nest (mls/kernels/loop_ir.hpp)
/// becomes one self-contained C++ translation unit, which the JIT (mls/kernels/jit.hpp) compiles
/// and loads; the result runs on real float arrays.
///
///     LoweredFunc f = lower(s, "matmul");
///     std::cout << generate_cpp(f);                       // read what the schedule became
///     JitKernel k = compile(f);                            // system compiler, disk cache, dlopen
///     k.run({a, b, c});                                    // spans in the order of f.args
///
/// The generated function (every buffer's shape is compiled in):
///
///     extern "C" void <name>(float* const* args, mls_parallel_for_fn parallel_for, void* host);
///
///   args          one pointer per argument of the LoweredFunc (placeholders, then outputs), each a
///                 row-major array of its buffer's shape, compact or with the buffer's strides
///                 (te::buffer_strides, compiled in); the arrays must not overlap.
///   parallel_for  the host's parallel loop: parallel_for(host, n, body, ctx) calls
///                 body(ctx, begin, end) on disjoint ranges covering [0, n) and returns when all are
///                 done (JitKernel passes one over common's thread pool, mls/common/parallel.hpp).
///                 Null: every parallel loop runs serially. The generated code depends on no ABI
///                 of the project: only on this C signature.
///
/// How each loop kind is written:
///   Serial      a plain `for` with the IR's variable name.
///   Unrolled    `#pragma GCC unroll n` (n the extent, at most CodegenOptions::max_unroll).
///   Parallel    the body as a lambda given to parallel_for through a trampoline. A parallel loop
///               whose iterations may write the same element (a producer computed at a loop inside
///               it, recomputed by each iteration) runs serially, with a comment saying why.
///   Vectorized  chunks of W lanes with GCC vector extensions (`float
///               __attribute__((vector_size(4 W)))`, W = 16 with AVX-512F, 8 with AVX2, else 4, or
///               CodegenOptions::vector_lanes), unaligned loads and stores through memcpy, then a
///               scalar tail. A load contiguous in the loop's variable is one vector load, one that
///               does not depend on it a broadcast, any other a per-lane gather; a guard that
///               depends on it (a tail of a split) runs the chunk's lanes one by one where it does
///               not hold for all of them. A body the lanes cannot run side by side (an allocation,
///               an intrinsic call, a store not contiguous in the variable, an element read at
///               another index than the one written) stays a scalar loop, with a comment saying why.
///   Local buffers (cache_read/cache_write tiles) are stack arrays up to max_stack_bytes, heap
///   arrays above; intermediates of Scope::Global are heap arrays. Both are 64-byte aligned (a
///   vector of a packed tile never straddles two cache lines). A tensor intrinsic's call is a
///   call of a static inline function made from its `update_source` / `reset_source` (or the plain
///   loops of its pattern), with the strides and extents as constants.
/// Without -ffp-contract=off in the compile flags the compiler may fuse a*b + c into one FMA, so
/// results may differ from the interpreter by rounding; with it, they are the interpreter's bit for
/// bit (the generated code does every float operation in the IR's order).
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mls/kernels/jit.hpp"
#include "mls/kernels/loop_ir.hpp"
#include "mls/kernels/schedule.hpp"

namespace mls::kernels::te {

/// What the generated source looks like.
struct CodegenOptions {
  /// Lanes of a vectorized loop's chunks: 0 = from the CPU (jit::cpu_info(): 16 with AVX-512F,
  /// 8 with AVX2, else 4); 1 = no SIMD (vectorized loops are scalar loops); else 4, 8 or 16.
  int vector_lanes = 0;
  /// `#pragma GCC unroll` count of an unrolled loop: its extent, at most this (>= 1).
  int max_unroll = 32;
  /// A Local buffer up to this size is a stack array, a larger one a heap array (>= 0).
  std::int64_t max_stack_bytes = 64 * 1024;
  /// A comment at the top with the loop nest as `to_string(LoweredFunc)` prints it.
  bool comment_loop_nest = true;
  /// exp as a polynomial written in the generated unit (`mls_expf`, and `mls_vexp_fast` on vectors:
  /// mls::fast_expf's algorithm, within 2 ulp of expf over the normal range, +inf above
  /// log(FLT_MAX), 0 (or a denormal) below log(FLT_MIN), NaN kept; with AVX-512 the 16-lane chunks
  /// scale by vscalefps) instead of `__builtin_expf`, a libm call per lane that the compiler does not
  /// vectorize without -ffast-math. Off: the interpreter's expf, so results can match it bit for bit.
  bool fast_exp = false;
  /// With fast_exp: exp(x) as 2^t, t = x log2e = n + f (n = round(t), |f| <= 1/2), 2^f by the
  /// degree-5 polynomial of lab 4's hand-written exp2_16 (mls::kExp2Poly, the same coefficients),
  /// scaled by 2^n: 9 vector operations per chunk where fast_exp's Cephes exp takes 14 (5
  /// multiply-adds, not 10). Relative error within 2.5e-7 + 1e-7 |x| (t's own rounding grows with
  /// |x|: 4e-7 for |x| <= 4, as softmax's exp(x - max) mostly sees; 9e-6 at |x| = 88), where
  /// fast_exp alone is within 2 ulp (1.2e-7) everywhere; the same +inf, 0 and NaN at the edges.
  /// mls::Error from generate_cpp when set without fast_exp.
  bool fast_exp2 = false;
  /// Buffers (function arguments, by name) whose plain stores in a vectorized loop are non-temporal
  /// (`mls_stream`: _mm512_stream_ps / _mm256_stream_ps where the chunk's address is aligned to its
  /// width, else an ordinary store), for results written once and read much later: the store skips
  /// the read-for-ownership of each line and leaves the caches to data that is used again. A
  /// reduction's update (read back) stays an ordinary store. Every parallel range and the function
  /// end with a store fence (sfence), so what a thread streamed is visible when the call returns.
  std::vector<std::string> stream_stores{};
  /// Reductions as the hardware does them fastest, reassociated (results may differ from the
  /// interpreter's by float rounding, as a sum in another order does):
  ///   - a serial loop whose body is one update `X[k] = X[k] op e(v)` (op +, max or min; k not
  ///     reading the loop's variable v; e vectorizable in v) accumulates in vector lanes, then
  ///     adds up (or takes the max of) the lanes in a tree: the lane-wise partial results of a
  ///     row reduction (tune_ops.hpp) reduce in a handful of instructions, not a chain of
  ///     dependent scalar operations;
  ///   - a max (min) update of a reduction `X[k] = max(X[k], e)` in a vectorized chunk is one
  ///     vmaxps (`e > X ? e : X`): a NaN in e is skipped, as the interpreter skips it, and the
  ///     accumulator, started at the combiner's identity, is never NaN, so the result is the
  ///     interpreter's (an accumulator that is NaN would stay NaN, where mls_vmax takes e).
  bool fast_reduce = false;
  /// fast_reduce's loops keep this many independent vector accumulators (>= 1; at most one per
  /// whole chunk of the loop), in the manner of rfactor: chunk c of the loop goes to accumulator
  /// c % K (the chunks after the last whole block of K to the first), and the accumulators are
  /// combined in a tree after the loop, before the tree over the lanes. One accumulator is a chain
  /// of dependent vaddps (vmaxps), one per 3-4 cycles; K of them keep K updates in flight. The sum
  /// then differs from the single accumulator's by rounding only (another order of the same adds:
  /// within (n + 8) eps of the exact sum's magnitude sum |e|); max and min are exact.
  int reduce_chains = 1;
  /// Software prefetch: {buffer (a function argument, by name), distance in elements}. In a
  /// vectorized chunk every load of that buffer contiguous in the loop's variable also prefetches
  /// (into L1, `__builtin_prefetch`) the element `distance` elements further on, once per chunk:
  /// with the distance D rows of a row loop, row i + D arrives from memory while row i is computed
  /// in cache, so the core's arithmetic and the memory's transfers overlap. A prefetch never
  /// faults (past the array's end it is dropped).
  std::vector<std::pair<std::string, std::int64_t>> prefetch{};
  /// The passes of a row spread apart (>= 0; 0: every pass at `prefetch`'s distance): the vectorized
  /// loops of the function that prefetch a buffer, numbered k = 0, 1, ... in the order they are
  /// written, prefetch k x prefetch_pass_step elements further than `prefetch` says. With the step
  /// one row, the second pass over a row prefetches the row after the first pass's: each line is
  /// asked for twice, a row apart (a prefetch dropped or not yet in flight the first time is issued
  /// again), never twice in the same row's passes (the second of two prefetches of one line a few
  /// cycles apart only takes a load slot). A knob of the row operator templates (tune_ops.hpp).
  std::int64_t prefetch_pass_step = 0;
  /// The cache `prefetch` fills: 1 = L1 (`prefetcht0`, `mls_prefetch`), 2 = L2 (`prefetcht1`,
  /// `mls_prefetch_l2`: the line comes to L1 when the pass loads it, and the rows ahead do not take
  /// L1's ways from the rows in use). mls::Error from generate_cpp for another value.
  int prefetch_level = 1;
};

/// The lanes `options` asks for on this CPU (resolves vector_lanes = 0); mls::Error for a value
/// other than 0, 1, 4, 8, 16.
int resolved_vector_lanes(const CodegenOptions& options);

/// The C identifier a name of the IR becomes in generated code: characters other than letters,
/// digits and '_' become '_', a leading digit gets a '_' before it, and a C++ keyword, `main`, a
/// name of the generated code's own (args, ptrs, strides, extents, parallel_for, host) or one
/// starting with `mls_` gets a '_' after it. The exported symbol of a LoweredFunc `f` is
/// c_identifier(f.name).
std::string c_identifier(const std::string& name);

/// The C++ translation unit of `f` (see the top of this file), readable: the IR's loop variable and
/// buffer names (made C identifiers, unique where they nest), four spaces per level.
/// mls::Error "generate_cpp: ..." for a buffer neither an argument nor allocated around its use, a
/// variable used outside its loop, a loop variable bound twice, or a Reduce left in the IR.
std::string generate_cpp(const LoweredFunc& f, const CodegenOptions& options = {});
/// One translation unit exporting every function of `fs` (one compiler run); mls::Error when two
/// of them have the same symbol.
std::string generate_cpp(std::span<const LoweredFunc> fs, const CodegenOptions& options = {});
/// The same as generate_cpp (the name students look for).
inline std::string print_cpp(const LoweredFunc& f, const CodegenOptions& options = {}) {
  return generate_cpp(f, options);
}

/// The C++ statements of an intrinsic's update (or reset) body: its own source when it has one,
/// else the plain loops of its pattern (which compute exactly what gemm_intrinsic's and
/// copy_intrinsic's reference functions compute, in the same order; a gemm tile of at most 48
/// outputs keeps one accumulator per output with k outside, so their FMAs overlap: each output's
/// sum still in k order).
std::string intrinsic_source(const Intrinsic& in, CallPart part);

/// A register-blocked gemm micro-kernel intrinsic `gemm<mr>x<nr>x<k>_regblock`: the tile {mr, nr,
/// k} of Gemm, its update an mr x (nr / lanes) block of vector accumulators over the k loop
/// (one broadcast of a[i][k] times `nr / lanes` vector loads of b's row k per row i), in the GCC
/// vector extensions of the generated code. That path needs the output and b contiguous along the
/// tile's j axis (a packed or row-major B: strides known when the call is compiled); any other
/// layout runs the plain loops. The interpreter runs the reference gemm. mls::Error unless
/// mr, k >= 1 and nr a positive multiple of `lanes` (0 = resolved_vector_lanes({})).
/// `prefetch_c` (name suffix "_pc"): the tile of the output, and the tile mr rows below it (the
/// next call's where the loop over row panels is the inner one, as in the SGEMM template), are
/// prefetched before the k loop, the accumulators start at zero and the tile is added to them after
/// it (OpenBLAS's and lab4_packed's order: the first FMAs never wait for a tile of C that is not in
/// cache); else the accumulators are loaded from the output before the k loop.
Intrinsic gemm_regblock_intrinsic(std::int64_t mr, std::int64_t nr, std::int64_t k, int lanes = 0,
                                  bool prefetch_c = false);

/// The generated function's types (the top of this file).
using RangeBodyFn = void (*)(void* ctx, std::int64_t begin, std::int64_t end);
using ParallelForFn = void (*)(void* host, std::int64_t n, RangeBodyFn body, void* ctx);
using KernelFn = void (*)(float* const* args, ParallelForFn parallel_for, void* host);

/// The host's parallel_for over common's pool: mls::parallel_for(0, n, 1, ...) (at most one chunk
/// per thread of mls::num_threads()). `host` is unused.
void pool_parallel_for(void* host, std::int64_t n, RangeBodyFn body, void* ctx);

/// A compiled, loaded loop nest. Copies share the loaded library.
class JitKernel {
 public:
  JitKernel() = default;
  JitKernel(LoweredFunc func, std::string source, jit::LoadedModule module, KernelFn fn)
      : func_(std::move(func)), source_(std::move(source)), module_(std::move(module)), fn_(fn) {}
  /// The loop nest it was made from.
  const LoweredFunc& func() const { return func_; }
  /// The translation unit it was compiled from (shared by the kernels of one compile_all).
  const std::string& source() const { return source_; }
  const jit::LoadedModule& module() const { return module_; }
  /// The raw entry point (unchecked).
  KernelFn fn() const { return fn_; }
  explicit operator bool() const { return fn_ != nullptr; }

  /// Runs on `args`, one span per argument of func() in order, each exactly its buffer's size
  /// (te::buffer_span: the product of the shape when compact), no two overlapping. threads: 0 = mls::num_threads(); 1 = parallel loops run serially (no pool);
  /// n > 1 = the pool at n threads for this call (a ThreadCountGuard: do not run two kernels
  /// with different thread counts at once). mls::Error "JitKernel::run: ..." naming the kernel and
  /// the buffer for a count, size or overlap that is wrong, or an empty kernel.
  void run(std::span<const std::span<float>> args, int threads = 0) const;
  /// The same with the arguments found in `buffers` (each must be bound).
  void run(const Bindings& buffers, int threads = 0) const;

 private:
  LoweredFunc func_;
  std::string source_;
  jit::LoadedModule module_;
  KernelFn fn_ = nullptr;
};

/// generate_cpp + jit::compile_shared + the symbol. When $MLS_CODEGEN_DUMP names a folder, the
/// source is also written there as <name>.cpp (mls::write_file_atomic). Errors: generate_cpp's, the
/// JIT's (a compile error shows the numbered source).
JitKernel compile(const LoweredFunc& f, const CodegenOptions& options = {},
                  const jit::CompileOptions& jit_options = {});
/// lower(s, name), then compile.
JitKernel compile(const Schedule& s, const std::string& name, const CodegenOptions& options = {},
                  const jit::CompileOptions& jit_options = {});
/// Every function of `fs` in one translation unit and one compiler run; kernels in the order of fs.
std::vector<JitKernel> compile_all(std::span<const LoweredFunc> fs, const CodegenOptions& options = {},
                                   const jit::CompileOptions& jit_options = {});

/// compile(f) then run on `buffers`: `interpret(f, buffers)`'s compiled twin.
void run_jit(const LoweredFunc& f, const Bindings& buffers, int threads = 0,
             const CodegenOptions& options = {}, const jit::CompileOptions& jit_options = {});

}  // namespace mls::kernels::te
