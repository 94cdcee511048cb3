#pragma once
/// Lab 4 part 2, ML compilation: schedule templates for the memory-bound operators and a direct
/// convolution (issue 28, sections 4 and 5), tuned by the same search as SGEMM (mls/kernels/tune.hpp:
/// Search over a SearchSpace) and kept in the same tuning database, under the op names "softmax",
/// "layernorm_fwd", "layernorm_bwd", "add_mul_add" and "conv2d".
///
///     OpProblem p = row_problem(OpKind::Softmax, 4096, 1024);
///     OpSpace space = OpSpace::full(p, 1);
///     OpInstance inst = instantiate_op(p, space.default_knobs());   // te::to_string(inst.func)
///     OpTuneResult r = OpTuner(p, {.strategy = Strategy::Guided, .trials = 24}).run();
///
/// Each template is a tensor expression (mls/kernels/te.hpp) and a schedule whose primitives the
/// knobs choose; it is lowered, generated as C++ (with CodegenOptions::fast_exp: exp vectorizes)
/// and compiled by the JIT like any schedule. The row reductions (max, sums) are written with
/// lane-wise partial results so that they vectorize: P(i, l) = reduce over jo of f(i, jo*W + l)
/// for l < W = acc * lanes, then the row's result reduces P(i, :) and the row's last cols % W
/// values (acc = 0: one scalar loop over the row).
///
///   softmax        y[i, :] = exp(x[i, :] - max) / sum(exp(x[i, :] - max))            (rows, cols)
///   layernorm_fwd  out = (x - mean) * rstd * weight + bias; mean, rstd per row (eps 1e-5)
///   layernorm_bwd  dinp = dinp_in + rstd (dnorm - mean(dnorm) - xhat mean(dnorm xhat)), dweight =
///                  dweight_in + sum_rows dout xhat, dbias = dbias_in + sum_rows dout: fused.hpp's
///                  layernorm_backward, whose gradients accumulate (+=), with the old gradients as
///                  inputs (dinp_in, dweight_in, dbias_in) and the new ones as outputs
///   add_mul_add    e = d + (a + b) * c                                                    (n,)
///   conv2d         y[b, o, oy, ox] = sum_{c, i, j} x[b, c, oy*s - p + i, ox*s - p + j] w[o, c, i, j]
///                  (NCHW, zero padding, no bias; as mls::Conv2dProblem)
///
/// Knobs (OpSpace::full lists each template's; every knob is an int):
///   lanes     vector lanes of the generated code (4, 8, 16: at most the CPU's)
///   acc       vector accumulators per row reduction (0: a scalar loop; W = acc * lanes partials)
///   unroll    row ops: unroll of the partial reductions' loop over jo; add_mul_add: vector chunks
///             per step of the inner loop
///   fuse      row ops: 1 = the row statistics computed inside the output's row loop (the row read
///             from memory once, then from cache: compute_at), 0 = their own passes over all rows
///   hold      row ops: 1 = an intermediate row held in a local tile (set_scope Local): softmax
///             exp(x - max), layernorm_fwd x - mean, layernorm_bwd xhat and dnorm; 0 = recomputed
///   parallel  1 = the rows (add_mul_add: the chunks; conv2d: the output channel blocks, and the
///             padded copy's channels) a parallel loop; only 0 in a space for one thread
///   prefetch  row ops: the rows of the (rows, cols) inputs prefetched this many rows ahead (0: none;
///             CodegenOptions::prefetch), so that the next rows come from memory while this one is
///             computed in cache (the code generation's reductions are CodegenOptions::fast_reduce)
///   spread    row ops: each later pass over a row prefetches this many rows further than the one
///             before (CodegenOptions::prefetch_pass_step: with prefetch 2 and spread 1, softmax's
///             max pass prefetches row i + 2 and its exp pass row i + 3); 0 = every pass at
///             `prefetch` rows (the same lines asked for again a pass later); only with prefetch > 0
///   pcache    row ops: the cache the prefetches fill, 1 = L1, 2 = L2 (CodegenOptions::prefetch_level:
///             the rows ahead then take no L1 ways from the rows in use); only with prefetch > 0
///   blocks    layernorm_bwd: row blocks of the dweight/dbias partial sums (a space for T threads:
///             T to 4 T, each block a parallel iteration)
///   expsum    softmax: 1 = exp(x - max) written into the held row (hold) and summed in the same loop
///             (the sum's partials computed with it: te::Stage::compute_with); only where the partials
///             leave no tail (cols a multiple of acc * lanes)
///   exp2      softmax: 1 = exp as 2^(x log2e) with the hand-written kernels' degree-5 polynomial
///             (CodegenOptions::fast_exp2: 9 vector operations per chunk, relative error within
///             4e-7 on softmax's x - max), 0 = Cephes' exp (fast_exp alone: 14 operations, 2 ulp)
///   sqsum     layernorm_fwd: 1 = x - mean written into the held row (hold) and its squares summed
///             in the same loop (compute_with, as expsum); only where the partials leave no tail
///   onepass   layernorm_bwd: 1 = the two row sums (of dnorm and dnorm xhat) in one pass over the row:
///             their lane-wise partials share their loops (te::Stage::compute_with); 0 = a pass each
///   colfuse   layernorm_bwd: 1 = the dweight/dbias partial sums inside the output's loop over the
///             row's columns (compute_with: dout and x read once for dinp, dweight and dbias, as the
///             hand-written kernel does), the output's rows split into the blocks; 0 = a pass of their
///             own over dout and x (the blocks parallel). Only where the blocks divide the rows.
///   block     add_mul_add: elements per chunk
///   order     conv2d: 1 = the output row (ox) innermost and vectorized, 0 = the reduction innermost
///   pad_copy  conv2d: 1 = a zero-padded copy of the input first (no bounds test in the product)
///   ob        conv2d: output channels per block (the input row reused across them)
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/kernels/codegen.hpp"
#include "mls/kernels/tune.hpp"
#include "mls/kernels/tuning_db.hpp"

namespace mls::kernels::tune {

// ---- operators and problems ----------------------------------------------------------------------

enum class OpKind { Softmax, LayerNormFwd, LayerNormBwd, AddMulAdd, Conv2d };
/// Every operator, in this order.
std::vector<OpKind> op_kinds();
/// The tuning database's op name: "softmax", "layernorm_fwd", "layernorm_bwd", "add_mul_add", "conv2d".
std::string op_name(OpKind kind);
/// The operator of an op name; mls::Error "tune: unknown operator '<s>' (softmax, ...)".
OpKind op_kind_from_string(std::string_view s);
/// The template's schedule format, stored as "template" in its knob objects: "layernorm_fwd.v4" (v2
/// added the knob prefetch, v3 sqsum, v4 spread and pcache), "layernorm_bwd.v4" (v3 added onepass and
/// colfuse, v4 spread and pcache), "softmax.v5" (v3 added expsum, v4 exp2, v5 spread and pcache), "<op>.v1" for add_mul_add and conv2d.
std::string op_template_id(OpKind kind);

/// One problem of an operator. Only the fields of its kind count.
struct OpProblem {
  OpKind kind = OpKind::Softmax;
  long rows = 1, cols = 1;   ///< softmax, layernorm_fwd, layernorm_bwd: (rows, cols), row-major
  long n = 1;                ///< add_mul_add: elements; conv2d: the batch
  long c = 1, h = 1, w = 1;  ///< conv2d: input channels and image (x: n, c, h, w)
  long k = 1, kh = 1;        ///< conv2d: output channels and kernel size (weights: k, c, kh, kh)
  long stride = 1, pad = 0;  ///< conv2d
  float eps = 1e-5f;         ///< layernorm_fwd
  /// conv2d: output height and width, (h + 2 pad - kh) / stride + 1.
  long oh() const { return (h + 2 * pad - kh) / stride + 1; }
  long ow() const { return (w + 2 * pad - kh) / stride + 1; }
  friend bool operator==(const OpProblem&, const OpProblem&) = default;
};
/// A row operator's problem (softmax, layernorm_fwd, layernorm_bwd); mls::Error for another kind.
OpProblem row_problem(OpKind kind, long rows, long cols);
/// add_mul_add on n elements.
OpProblem elementwise_problem(long n);
/// conv2d of x (n, c, h, w) with k filters of c x kh x kh, stride and zero padding.
OpProblem conv2d_problem(long n, long c, long h, long w, long k, long kh, long stride, long pad);

/// "4096x1024" (rows x cols), "16777216" (n), "n1_c64_h56_w56_k64_kh3_s1_p1" (conv2d).
std::string to_string(const OpProblem& p);
/// The tuning database's shape object: {"rows", "cols"}, {"n"}, {"n", "c", "h", "w", "k", "kh",
/// "stride", "pad"}.
nlohmann::json to_json(const OpProblem& p);
/// mls::Error "tune <op>: ..." naming the field and its value: every extent >= 1 (conv2d: stride
/// >= 1, pad >= 0, kh <= h + 2 pad and w + 2 pad), at most 2^31 elements per array.
void check_problem(const OpProblem& p);

/// One array of an operator: its name (the tensor's), shape, and whether the operator writes it.
struct OpArg {
  std::string name;
  std::vector<std::int64_t> shape;
  bool output = false;
};
/// The operator's arrays, inputs then outputs (the order of the compiled function's arguments):
///   softmax        x (rows, cols) -> y (rows, cols)
///   layernorm_fwd  x (rows, cols), weight (cols), bias (cols) -> out (rows, cols), mean (rows), rstd (rows)
///   layernorm_bwd  dinp_in (rows, cols), dweight_in (cols), dbias_in (cols), dout (rows, cols),
///                  x (rows, cols), weight (cols), mean (rows), rstd (rows) -> dinp, dweight, dbias
///   add_mul_add    a, b, c, d (n) -> e (n)
///   conv2d         x (n, c, h, w), w (k, c, kh, kh) -> y (n, k, oh, ow)
std::vector<OpArg> op_args(const OpProblem& p);
/// Compulsory bytes of one run: every array read or written once, 4 bytes a float (an array both
/// read and written in place by the hand-written kernel, layernorm_bwd's gradients, counts twice:
/// its _in and its output). Counted as lab 4's benchmarks count them.
double op_bytes(const OpProblem& p);
/// Float operations of one run (conv2d: 2 n k oh ow c kh kh; the others: their arithmetic per
/// element, exp counted as one).
double op_flops(const OpProblem& p);

// ---- knobs and their space -----------------------------------------------------------------------

/// One point of an operator template's space: knob name -> value.
using OpKnobs = std::map<std::string, int>;
/// "acc=2 fuse=1 hold=1 lanes=16 unroll=1" (names in order).
std::string to_string(const OpKnobs& k);

/// A knob and the values it may take.
struct OpKnob {
  std::string name;
  std::vector<int> values;
  bool ordered = true;  ///< numbers (a neighbour is the value before or after), else categories
};

/// The knob space of an operator's template on one problem.
struct OpSpace {
  OpProblem problem;
  int threads = 1;
  int lanes = 16;  ///< the CPU's vector lanes: the largest `lanes` value
  std::vector<OpKnob> knobs;

  /// The template's full space for `threads` threads (the knobs of the top of this file; lanes 4
  /// to the CPU's, or `lanes` when not 0).
  static OpSpace full(const OpProblem& problem, int threads, int lanes = 0);
  /// A small space for tests and demonstrations: lanes 8 (or the CPU's, when fewer), acc 0 and 2,
  /// unroll 1 and 2, fuse and hold both ways, streamed stores, softmax's exp2 and layernorm_fwd's sqsum,
  /// the rows parallel at more than one thread; add_mul_add blocks 1024 and 4096, conv2d ob 1 and 2.
  static OpSpace small(const OpProblem& problem, int threads, int lanes = 0);

  /// Points of the cross product (all valid: every point is a schedule the template can build).
  std::size_t cross_size() const;
  /// Point `index` (mixed radix, the last knob fastest).
  OpKnobs at(std::size_t index) const;
  /// The points, in the order of at().
  std::vector<OpKnobs> enumerate() const;
  /// Every knob of the space present with one of its values, and no other knob.
  bool valid(const OpKnobs& k) const;
  /// The template's default (the values nearest to its hand-picked schedule) in this space.
  OpKnobs default_knobs() const;
  /// The space as the search sees it: a point's indices, one-hot features, key = op_plan_key.
  SearchSpace search_space() const;
  /// The knobs of a point of search_space(), and back (mls::Error for a value not in the space).
  OpKnobs knobs_at(const Point& p) const;
  Point point_of(const OpKnobs& k) const;
  /// mls::Error "OpSpace: ..." for no knobs, a knob with no values or a value check_op_knobs refuses.
  void check() const;
};

/// mls::Error "<op> knobs: ..." naming the knob unless `k` has exactly the template's knobs, each
/// with a value the template can take (lanes 4, 8 or 16 and at most the CPU's, or `lanes` when not 0).
void check_op_knobs(const OpProblem& p, const OpKnobs& k, int lanes = 0);
/// The knobs as the tuning database's `schedule` object: every knob, and "template": op_template_id.
nlohmann::json op_knobs_to_json(OpKind kind, const OpKnobs& k);
/// The knobs of a `schedule` object (knobs only: "template", "measure" are not knobs); mls::Error
/// "<op> knobs: ..." for another template, a knob missing, unknown or not an integer.
OpKnobs op_knobs_from_json(OpKind kind, const nlohmann::json& j);
/// The knobs the template really uses on this problem (a knob that makes no difference there set to
/// its first value, or a block size to the problem's: acc 0 when a row is shorter than the partials,
/// unroll 1 without a loop to unroll, hold 0 without fuse (layernorm), spread 0 and pcache 1 without prefetch, expsum and sqsum 0 without a
/// held row or with a tail after the partials, onepass 0 without partials
/// (acc 0), colfuse 0 where the row blocks do not divide the rows, block n past n, ob k past k,
/// pad_copy 0 without padding): knobs with the same plan compile to the same kernel.
OpKnobs op_plan(const OpProblem& p, const OpKnobs& k);
/// to_string(op_plan(p, k)): one key per distinct kernel.
std::string op_plan_key(const OpProblem& p, const OpKnobs& k);

// ---- the templates -------------------------------------------------------------------------------

/// The template instantiated: its tensors, schedule, loop nest and code generation options.
struct OpInstance {
  OpProblem problem;
  OpKnobs knobs;
  std::vector<te::Tensor> args;  ///< op_args(problem) in order (the func's arguments)
  te::Schedule schedule;
  te::LoweredFunc func;
  te::CodegenOptions codegen;    ///< vector_lanes = knobs "lanes", fast_exp
};
/// Builds the tensor expression, schedules it by the knobs and lowers it (check_problem and
/// check_op_knobs first). `name` "" gives one made of the op, the shape and the knobs.
OpInstance instantiate_op(const OpProblem& p, const OpKnobs& k, std::string name = "");

/// An allocator of 64-byte aligned storage (a cache line: a streamed store needs its vector aligned,
/// and a vector load that splits no line is faster).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
};
/// One array of an operator, 64-byte aligned.
using OpArray = std::vector<float, CacheLineAllocator<float>>;
/// The arrays of one problem by name (op_args): inputs, outputs.
using OpArrays = std::map<std::string, OpArray>;
/// Arrays of the right sizes: inputs seeded uniform in [-1, 1) (layernorm_bwd's rstd in [0.5, 2)),
/// outputs 0.
OpArrays make_op_arrays(const OpProblem& p, std::uint64_t seed);
/// Runs `inst` on `arrays` with the interpreter (the reference semantics of its loop nest).
void interpret_op(const OpInstance& inst, OpArrays& arrays);

/// A compiled operator. Copies share the compiled code.
class CompiledOp {
 public:
  CompiledOp() = default;
  CompiledOp(OpProblem problem, OpKnobs knobs, te::JitKernel kernel)
      : problem_(problem), knobs_(std::move(knobs)), kernel_(std::move(kernel)) {}
  const OpProblem& problem() const { return problem_; }
  const OpKnobs& knobs() const { return knobs_; }
  const te::JitKernel& kernel() const { return kernel_; }
  explicit operator bool() const { return static_cast<bool>(kernel_); }
  /// Runs on `arrays` (every array of op_args, the right size; mls::Error "CompiledOp: ..." naming
  /// one missing or of the wrong size). threads: as te::JitKernel::run (1: parallel loops serial).
  void run(OpArrays& arrays, int threads = 0) const;

 private:
  OpProblem problem_;
  OpKnobs knobs_;
  te::JitKernel kernel_;
};
/// instantiate_op + te::compile (one compiler run, or the JIT's cache).
CompiledOp compile_op(const OpProblem& p, const OpKnobs& k, const jit::CompileOptions& options = {});
/// Every knob set for one problem, one compiler run per distinct `lanes` (a unit has one vector
/// width); in the order of `knobs`.
std::vector<CompiledOp> compile_ops(const OpProblem& p, const std::vector<OpKnobs>& knobs,
                                    const jit::CompileOptions& options = {});

// ---- the hand-written kernels (the references and the anchors) ---------------------------------------

/// The operator as lab 4 writes it by hand on `arrays`: fused.hpp's kernels at mls::num_threads()
/// threads (layernorm_bwd: the _in gradients copied to the outputs, then accumulated into), conv2d
/// a direct loop (conv2d_direct). The reference every candidate is checked against.
void run_hand_written(const OpProblem& p, OpArrays& arrays);
/// The plain direct convolution: y = sum over c, i, j of x * w (six nested loops per output, the
/// bounds tested in the innermost; the outputs split over mls::num_threads()). Lab 4 cannot link
/// lab 3's convolution (dependencies flow common <- lab4), so this is the hand-written peer of the
/// conv2d template.
void conv2d_direct(const OpProblem& p, const float* x, const float* w, float* y);
/// max |got - want| / (max |want| + tiny) over the outputs, over the tolerance 4 (L + 8) eps with L
/// the longest reduction an output element takes (cols, rows, c kh kh; 1 for add_mul_add): <= 1 is
/// right. Infinite for a NaN, a missing output or a size that differs.
double op_error(const OpProblem& p, const OpArrays& got, const OpArrays& want);

// ---- measuring and tuning ---------------------------------------------------------------------------

/// One measured (or refused) candidate of an operator template.
struct OpTrial {
  int index = 0;
  OpKnobs knobs;
  TrialStatus status = TrialStatus::Failed;
  double seconds = 0;  ///< per run (Ok only): interleaved ratio to the hand-written kernel times its time
  double gbs = 0;      ///< op_bytes / seconds (Ok only)
  double compile_seconds = 0;
  std::string message;
};

/// The problem an operator tuner measures on: seeded arrays, the hand-written kernel's outputs (the
/// reference) and its time (the anchor), as Bench does for SGEMM.
class OpBench {
 public:
  OpBench(const OpProblem& p, int threads, std::uint64_t seed = 1);
  const OpProblem& problem() const { return problem_; }
  /// Seconds of one run of the hand-written kernel (the median of 5 batches of about 10 ms).
  double anchor_seconds() const { return anchor_seconds_; }
  /// Runs the hand-written kernel once on the bench's arrays (its outputs to a scratch copy).
  void run_anchor();
  /// Compiles, checks (a first run in a forked child, then one here at the bench's threads, both
  /// against the reference) and times a candidate; never throws for a bad candidate.
  OpTrial measure(const OpKnobs& k, const MeasureOptions& options, const jit::CompileOptions& jit = {});
  /// Seconds per run of a compiled candidate, interleaved with the anchor: the ratio of the two
  /// programs' best batches in `repeat` rounds (mls::bench::interleaved_best) times the anchor's seconds.
  double time(const CompiledOp& op, int repeat, double batch_seconds);

 private:
  OpProblem problem_;
  int threads_;
  OpArrays arrays_, reference_, anchor_;
  double anchor_seconds_ = 0;
};

/// What an operator tuning run does (as TuneOptions for SGEMM).
struct OpTuneOptions {
  Strategy strategy = Strategy::Guided;
  int trials = 24;
  double budget_s = 0;
  std::uint64_t seed = 1;
  int threads = 1;
  std::optional<OpSpace> space{};  ///< default OpSpace::full(problem, threads)
  MeasureOptions measure{};
  jit::CompileOptions jit{};
  bool record = true;                ///< append each Ok trial to the tuning database
  std::filesystem::path db_path{};   ///< "": default_tuning_db_path()
  int confirm = 3;
  double epsilon = 0.1;
  int proposals = 32;
  std::function<void(const OpTrial& t, const std::vector<double>& best_so_far)> on_trial{};
  /// A synthetic cost instead of compiling and timing (tests): no bench, nothing recorded.
  std::function<OpTrial(const OpKnobs&)> evaluate{};
};

/// What an operator tuning run found.
struct OpTuneResult {
  bool found = false;
  OpKnobs best;  ///< the fastest Ok candidate (the space's default when none)
  double best_seconds = 0, best_gbs = 0;
  double anchor_seconds = 0;  ///< the hand-written kernel's time on the same arrays
  std::vector<OpTrial> trials, confirmed;
  std::vector<double> best_so_far;  ///< best GB/s after each trial
  double wall_seconds = 0;
};

/// Runs a strategy of the one Search (tune.hpp) on one operator problem at one thread count;
/// records each Ok trial in the tuning database as op op_name(kind), shape to_json(problem).
class OpTuner {
 public:
  OpTuner(OpProblem problem, OpTuneOptions options);
  OpTuneResult run();

 private:
  OpProblem problem_;
  OpTuneOptions options_;
  OpSpace space_;
};

/// The tuning database's `schedule` object of an operator trial: op_knobs_to_json and "measure":
/// "search" or "confirmed".
nlohmann::json op_schedule_json(OpKind kind, const OpKnobs& k, bool confirmed);
/// The fastest record among `records` of op op_name(p.kind), this template, the shape to_json(p),
/// `threads` and `cpu_key` (confirmed times preferred where there are any); none when no record
/// qualifies (records whose knobs do not parse or do not fit the template are skipped).
std::optional<OpKnobs> best_op_knobs(const std::vector<TuningRecord>& records, const OpProblem& p, int threads,
                                     std::string_view cpu_key);

// ---- comparing a tuned operator with its peers -------------------------------------------------------

/// Speeds of a compiled operator and its two peers on the same problem, measured interleaved.
struct OpComparison {
  double seconds = 0;       ///< the tuned kernel, per run
  double gbs = 0;           ///< op_bytes / seconds
  double vs_copy = 0;       ///< its speed over a streamed copy of the same bytes (>= 1: as fast)
  double copy_gbs = 0;
  double vs_hand = 0;       ///< its speed over the hand-written kernel's (>= 1: faster)
  double hand_gbs = 0;
};
/// Times `op` against a streamed copy (mls::stream_copy of op_bytes / 8 floats, split over the
/// threads) and against run_hand_written, each interleaved with it (mls::bench::interleaved_best:
/// rounds of about 20 ms batches until neither best has improved by 1% in 9 rounds, at most 40):
/// every figure is of the best batch of its program (the copy's
/// bandwidth, the kernel's and the hand-written kernel's times), so the ratios move less between
/// runs on a shared machine than a median of per-round ratios.
OpComparison compare_op(const CompiledOp& op, int threads, std::uint64_t seed = 1);
/// "ratio tuned_<op>_vs_copy_<shape>_t<threads> <x>" and "ratio tuned_<op>_vs_fused_<shape>_t<threads>
/// <x>" (conv2d: "_vs_direct_"), two lines with their newlines.
std::string op_ratio_lines(const OpProblem& p, int threads, const OpComparison& c);

// ---- the registry's tuned row operators (mls/common/kernels.hpp: MLS_ROWOPS=tuned) ------------------

/// The `tuned` row operators: fused.hpp's softmax_forward, layernorm_forward and layernorm_backward
/// (same arguments, same semantics: out may be inp, the backward accumulates +=) run by the compiled
/// template of the call's (rows, cols) at mls::num_threads() threads: the tuning database's best
/// knobs for that shape, thread count and CPU (best_op_knobs), else OpSpace::full's default knobs
/// (the row operators are not tuned on first use: run `mls-tune softmax|layernorm` for the shape).
/// Compiled kernels are kept per (operator, shape, eps, threads). An aliased output (softmax in
/// place) and the backward's accumulation run through a copy of the input (the generated code's
/// arguments must not overlap). Any failure to compile (no compiler, a compile error) runs the
/// hand-written kernel, with one line on stderr the first time.
void softmax_tuned(float* out, const float* inp, long rows, long cols);
void layernorm_forward_tuned(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, long rows, long cols, float eps);
void layernorm_backward_tuned(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, long rows, long cols);
/// The knobs the tuned row operators compile `p` with at `threads` threads: the tuning database's best
/// for the shape, thread count and this CPU (best_op_knobs), else OpSpace::full's default.
OpKnobs tuned_rowops_knobs(const OpProblem& p, int threads);
/// Registers "tuned" with common's row operator registry (mls::register_rowops). Called by lab 4's
/// provider in every program linked with lab 4 (src/autoregister.cpp); safe to call more than once.
void register_tuned_rowops();
/// The last warning the tuned row operators printed ("" when none), how many calls fell back to the
/// hand-written kernels, how many kernels were compiled (or found in the JIT's cache) in this process.
std::string tuned_rowops_last_warning();
std::int64_t tuned_rowops_fallbacks();
std::int64_t tuned_rowops_compiled();
/// How they compile (default jit::CompileOptions{}); tests set quicker options, or a compiler that
/// does not exist.
void set_tuned_rowops_compile_options(const jit::CompileOptions& options);
/// Forgets the compiled kernels, the warning, the counters and the compile options.
void reset_tuned_rowops_state();

}  // namespace mls::kernels::tune
