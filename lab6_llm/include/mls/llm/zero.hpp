#pragma once
/// Lab 6, part 2: ZeRO — partitioning the model states over data-parallel ranks — and mixed
/// precision, measured to the byte.
///
/// The model states of Ψ parameters trained with Adam in mixed precision (the ZeRO paper, slides
/// 001 "zero redundancy"): bf16 parameters (2Ψ bytes), bf16 gradients (2Ψ), and K·Ψ bytes of fp32
/// optimizer state (master weights, first and second moments: K = 12). On N data-parallel ranks:
///
///   stage 0 (plain data parallel)      (2 + 2 + K)·Ψ
///   stage 1 (optimizer states)         2Ψ + 2Ψ + K·Ψ/N
///   stage 2 (+ gradients)              2Ψ + (2 + K)·Ψ/N
///   stage 3 (+ parameters)             (2 + 2 + K)·Ψ/N   (+ the largest gathered layer)
///
/// Communication per rank per step (elements sent): 2Ψ(N−1)/N for stages 0-2 (a reduce-scatter
/// and an all-gather, or one ring allreduce) and 3Ψ(N−1)/N for stage 3 (the parameters are
/// gathered twice, in forward and in backward): exactly 1.5 times as much.
///
/// The engine (ZeroTrainer) trains the fused GPT of model.hpp on a lab 5 Communicator. The
/// parameters are grouped in units — the embeddings (wte, wpe), each transformer block, and the
/// final layernorm — laid out one after the other ("unit layout"); every unit is split over the
/// ranks with lab 5's chunk_bounds (sizes differ by at most one: Ψ need not divide by N). Rank r
/// owns chunk r of every unit; its shard is those chunks side by side.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mls/common/bf16.hpp"
#include "mls/common/memory.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/data.hpp"
#include "mls/llm/remat.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::llm {

// ---- the formulas (no communicator needed) ---------------------------------------------------

/// Bytes per rank of the model states for ZeRO `stage` (0..3), Ψ = `psi` parameters, `ranks` data
/// parallel ranks, `k` bytes of optimizer state per parameter, `param_bytes` / `grad_bytes` per
/// parameter and gradient element. Ψ/N is a real division (the slides' table).
struct ZeroBytes {
  double params = 0, grads = 0, optimizer = 0, total = 0;
};
/// Student: the table above. Stage s partitions the optimizer state (s >= 1), the gradients
/// (s >= 2) and the parameters (s >= 3) over the N ranks: divide that term by N. Bad input (stage
/// outside 0..3, ranks < 1, psi < 0, k < 0, element sizes <= 0) is an mls::Error naming the value.
/// Hint: three terms, each param_bytes·Ψ, grad_bytes·Ψ, k·Ψ, divided by N when partitioned.
ZeroBytes zero_memory(int stage, double psi, int ranks, double k = 12, double param_bytes = 2,
                      double grad_bytes = 2);
/// Stage 3 also holds one gathered unit at a time: the largest, `largest_unit` parameters, at
/// `param_bytes` each. Returns zero_memory(3, ...).total + param_bytes * largest_unit.
double zero3_peak_bytes(double psi, int ranks, double largest_unit, double k = 12,
                        double param_bytes = 2, double grad_bytes = 2);
/// Student. Elements each rank sends per training step: 2Ψ(N−1)/N for stages 0, 1 and 2, 3Ψ(N−1)/N for
/// stage 3 (0 for one rank). Hint: a ring reduce-scatter or all-gather of Ψ elements sends
/// Ψ(N−1)/N per rank; count how many of them each stage needs. Bad stage or ranks: mls::Error.
double zero_comm_elements(int stage, double psi, int ranks);
/// zero_comm_elements plus what rematerialization adds: stage 3 gathers a recomputed block's
/// parameters once more (for the recompute, between the forward's gather and the backward's), so
/// + recomputed_params·(N−1)/N, where recomputed_params sums the units of the recomputed blocks.
/// Stages 0-2 hold every parameter: recompute sends nothing more.
/// With gradient accumulation (`accum` micro-batches per step, ZeroOptions::accum), per step:
/// stages 0-1 still reduce once (2Ψ(N−1)/N: the full gradient is accumulated locally); stage 2
/// reduce-scatters every micro-batch's gradients (it keeps only its shard) and all-gathers the
/// parameters once: (accum + 1)Ψ(N−1)/N; stage 3 does all of its traffic per micro-batch:
/// accum · (3Ψ + recomputed_params)(N−1)/N. accum < 1 is an mls::Error.
double zero_comm_elements_remat(int stage, double psi, int ranks, double recomputed_params,
                                std::int64_t accum = 1);
/// The slides' table for (Ψ, N, K) with bf16 parameters and gradients: four lines
/// "stage 0 (baseline)  ...  120.0 GB" etc. and a header.
std::string zero_table(double psi, int ranks, double k = 12);

// ---- the partition -----------------------------------------------------------------------------

/// The units of a config, in unit layout order: "embeddings", "block 0", ..., "final layernorm".
struct ZeroUnit {
  std::string name;
  std::int64_t offset = 0;  // in the unit layout
  std::int64_t size = 0;    // parameters
};
std::vector<ZeroUnit> zero_units(const GPTConfig& cfg);
/// Unit layout <-> GPTParams layout (config.hpp's order): both of num_params(cfg) floats.
std::vector<float> to_unit_layout(const GPTConfig& cfg, const float* flat);
void from_unit_layout(const GPTConfig& cfg, const float* units, float* flat);
/// The weight decay flag of every element of the unit layout (param_decays of its tensor).
std::vector<std::uint8_t> unit_decay_mask(const GPTConfig& cfg);

/// Rank `rank`'s part of a partition of `units` over `ranks` ranks: for each unit, the range
/// [begin, end) of the unit (relative to the unit's start) that this rank owns, and where it sits
/// in the rank's shard. Every unit is split with parallel::chunk_bounds(unit.size, ranks).
struct ShardRange {
  std::int64_t unit_begin = 0, unit_end = 0;  // within the unit
  std::int64_t shard_offset = 0;              // within the rank's shard
};
struct Partition {
  int ranks = 1, rank = 0;
  std::vector<std::vector<std::int64_t>> bounds;  // per unit: chunk_bounds(unit.size, ranks)
  std::vector<ShardRange> mine;                   // per unit
  std::int64_t shard_size = 0;                    // sum over units of this rank's chunks
};
/// Student. Throws mls::Error for ranks < 1 or rank outside [0, ranks).
/// Hint: bounds[u] = parallel::chunk_bounds(units[u].size, ranks); this rank's range of unit u is
/// [bounds[u][rank], bounds[u][rank+1]), placed in the shard after the previous units' ranges.
/// Example: units of 5 and 3 parameters on 2 ranks: rank 0 owns [0,3) and [0,2) (shard 5),
/// rank 1 owns [3,5) and [2,3) (shard 3).
Partition make_partition(const std::vector<ZeroUnit>& units, int ranks, int rank);

// ---- bf16 --------------------------------------------------------------------------------------

/// fp32 <-> bf16 (round-to-nearest-even, exact back): common's, one definition for labs 4 and 6.
using mls::from_bf16;
using mls::round_bf16;
using mls::to_bf16;
/// Whether this CPU reports AVX-512 BF16 (avx512_bf16 in /proc/cpuinfo's flags).
bool cpu_has_avx512_bf16();

// ---- the engine --------------------------------------------------------------------------------

enum class Precision { FP32, BF16 };
const char* to_string(Precision p);
/// "fp32" or "bf16"; anything else is an mls::Error.
Precision parse_precision(const std::string& s);

struct ZeroOptions {
  int stage = 0;                        // 0, 1, 2 or 3
  Precision precision = Precision::FP32;
  AdamWOptions adam{};
  /// Recompute plan of the blocks on each rank (gpt_plan): "none", "sqrt" or "optimal" (within
  /// remat_budget bytes of remat_activation_bytes; <= 0: what sqrt needs).
  RecomputeKind remat = RecomputeKind::None;
  std::int64_t remat_budget = 0;
  /// Gradient accumulation: micro-batches per step (step's B splits into accum micro-batches of
  /// B / accum rows; accum must divide B). Stages 0-1 accumulate the full gradient locally and
  /// reduce it once after the last micro-batch; stages 2-3 reduce-scatter each micro-batch's
  /// gradient buckets as they complete and add them into the gradient shard (all they keep).
  std::int64_t accum = 1;
  /// Overlap (lab 5's asynchronous collectives): stages 2-3 issue each unit's gradient
  /// reduce-scatter (ireduce_scatter) as the unit's backward finishes and add the results into the
  /// shard, in issue order, before the optimizer step; stage 3 also prefetches: when it gathers a
  /// unit it starts the all-gathers of the next `prefetch` units (iallgather_inplace) in the
  /// order the previous step gathered them, so they arrive while this unit computes; the next
  /// step's first prefetch + 1 gathers start during this step's optimizer step, each as soon as
  /// its unit is updated (unit_updated), so the next forward does not start by waiting for two
  /// gathers in a row. Each unit prefetched costs one more gathered unit of memory. Stages 0-1 (plain data parallel) issue
  /// each unit's full-gradient reduction (stage 0: iallreduce, stage 1: ireduce_scatter) as the
  /// unit's backward of the step's last micro-batch finishes, and store the means before the
  /// optimizer step. Parameters are bit-identical with and without (the same collectives on the
  /// same buffers, only issued earlier).
  bool overlap = false;
  int prefetch = 1;
  /// Throws mls::Error naming the field (stage outside 0..3, an unknown remat plan, a negative
  /// budget, accum < 1, prefetch outside 0..8).
  void validate() const;
};

/// Bytes per element of (parameters, gradients, optimizer state) for a precision:
/// fp32: 4, 4, 8 (Adam's two moments; the parameters are the master copy);
/// bf16: 2, 2, 12 (fp32 master weights and two moments: the paper's K = 12).
struct PrecisionBytes {
  double param = 4, grad = 4, k = 8;
};
PrecisionBytes precision_bytes(Precision p);

/// A phase of the caller's (compute) thread in a step, for the overlap timeline
/// (ZeroTrainer::record_phases): wall seconds on parallel::Communicator::wall_now()'s clock.
/// Comm: inside a blocking collective or waiting for an asynchronous one (a prefetched
/// all-gather, the reductions before the optimizer step); Optimizer: AdamW on this rank's part
/// (stages 1-2: with the all-gathers of the updated parameters inside it). The rest of the step
/// is compute (forward, backward).
struct ZeroPhase {
  enum Kind { Comm = 0, Optimizer = 1 };
  Kind kind = Comm;
  double start = 0, end = 0;
};

/// What a ZeRO step measured on one rank.
struct ZeroStepStats {
  double loss = 0;                 // mean loss over every rank's batch (the same on all ranks)
  std::int64_t elements_sent = 0;  // by this rank in this step (counted by the communicator; overlap at
                                   // stage 3: with the first gathers the last step started for it)
  std::int64_t bytes_sent = 0;
  double comm_wall_s = 0;          // wall seconds this rank spent inside collectives
};

/// One rank of ZeRO data-parallel training of the fused GPT. Every rank constructs it with the
/// same config, options and initial parameters (checked: ranks that disagree get an mls::Error
/// naming the field), and calls step() with its own micro-batch. The blocks run through lab 6's
/// recompute code (remat_blocks_forward / remat_blocks_backward on a RematActivations) under the
/// plan of opts.remat ("none": one segment, every activation kept); stage 3 gathers a block's
/// unit for every forward of it, recomputes included.
/// All buffers are counted by mem::global() on this rank (comm.rank()).
class ZeroTrainer {
 public:
  ZeroTrainer(parallel::Communicator& comm, const GPTConfig& cfg, const GPTParams& init,
              const ZeroOptions& opts);
  ~ZeroTrainer();
  ZeroTrainer(const ZeroTrainer&) = delete;
  ZeroTrainer& operator=(const ZeroTrainer&) = delete;

  /// One training step on this rank's batch (B, T) — the one step of train.hpp: the gradient from
  /// accumulate_gradients (each of the options().accum micro-batches of B / accum rows, in order,
  /// through the recompute path's buffers, sized for one micro-batch), then gradient reduction
  /// over the ranks (mean), AdamW at `lr` on this rank's part of the optimizer state, and
  /// whatever all-gather the stage needs. The gradient is that of the masked mean loss over
  /// every rank's whole batch, sum(mask·loss) / sum(mask) over all ranks' rows — what
  /// Trainer::step gives for all the ranks' batches as one: with a mask, one allreduce of the
  /// mask's sum comes first (every rank passes a mask, or none; it is not counted in
  /// elements_sent); without one the sum is N·B·T. accum must divide B (an mls::Error
  /// otherwise). Collective: every rank calls it with the same B, T.
  /// Reductions: stages 0 and 1 sum the same numbers in the same order (bit-identical), and so
  /// do stages 2 and 3; with accum = 1 all four are bit-identical. With accum > 1, stages 0-1
  /// sum each rank's micro-batches first and then the ranks, stages 2-3 the ranks first (per
  /// micro-batch) and then the micro-batches: float addition is not associative, so the two
  /// pairs agree to float32 rounding, not bit for bit.
  ZeroStepStats step(const Batch& batch, double lr);
  /// The same step on raw (B, T) inputs and targets, no mask.
  ZeroStepStats step(const std::int32_t* inputs, const std::int32_t* targets, std::int64_t B,
                     std::int64_t T, double lr);
  /// Every parameter as fp32 in GPTParams layout (bf16 values where the precision is bf16).
  /// Collective for stage 3 (gathers every unit); local otherwise.
  GPTParams gather_params();
  /// The last step's gradient (reduced over the ranks: the mean), every element as fp32 in
  /// GPTParams layout (bf16 values where the precision is bf16). Collective: every rank's chunk of
  /// every unit is all-gathered (counted in the traffic like any collective).
  GPTGrads gather_grads();
  /// The fp32 master weights / parameters of this rank's shard (stage >= 1) or of everything
  /// (stage 0), unit layout.
  std::vector<float> master_shard() const;

  /// Student (stage 3): all-gathers unit `unit` (collective) so unit_params(unit) may be used:
  /// an fp32 Tensor of the unit's size (allocate it under mem::TagScope(Tag::Communication)),
  /// this rank's chunk copied in from its shard (from_bf16 in bf16), then
  /// comm.allgather_inplace(t, partition().bounds[unit]); keep the result as a Tag::Parameter
  /// buffer of the parameter precision (bf16: also an fp32 Tag::Workspace copy for compute) and
  /// mark the unit gathered. Errors: a unit out of range, a stage other than 3, a unit already
  /// gathered.
  void gather(int unit);
  /// Frees a gathered unit (no communication).
  void release(int unit);
  /// Prefetched all-gathers started in the last step (stage 3 with overlap).
  std::int64_t prefetched() const;
  /// Records the compute thread's phases of every step from now on (off by default); phases()
  /// holds the last step's (cleared when a step starts).
  void record_phases(bool on);
  const std::vector<ZeroPhase>& phases() const;
  /// Unit `unit`'s parameters as fp32 for compute. Stage 3: an mls::Error unless the unit was
  /// gathered ("used before it was gathered").
  const float* unit_params(int unit);

  /// The recompute plan of the last step (built for its (B, T); null before the first step).
  const RematPlan* remat_plan() const;
  /// Bytes of the activation buffers of the last step (RematActivations::bytes; 0 before).
  std::int64_t activation_bytes() const;
  /// Block forwards of the last step (L + the recomputed blocks).
  std::int64_t blocks_run() const;

  const std::vector<ZeroUnit>& units() const { return units_; }
  const Partition& partition() const { return part_; }
  const ZeroOptions& options() const { return opts_; }
  std::int64_t largest_unit() const;
  std::int64_t num_params() const { return psi_; }

 private:
  /// Student: the fp32 gradient `bucket` of unit `unit` for micro-batch `micro` (0 ..
  /// options().accum - 1) of this rank's step is complete.
  /// bf16: round it to bf16 first (round_bf16). Stages 2-3: reduce-scatter it (Sum, Ring: chunk r
  /// of the unit lands on rank r), divide by N, and put this rank's chunk into its gradient shard.
  /// Stages 0-1: put the whole bucket into the full gradient buffer (reduced later, once).
  /// "Put": micro == 0 STORES (overwrites last step's gradient), micro > 0 ADDS to what is there
  /// (bf16: add in fp32, g = to_bf16(from_bf16(g) + x), then store). The buckets are already
  /// scaled for the whole batch's mean (step's norm): no division by accum.
  /// Hint: one loop per stage group, `micro == 0 ? x : old + x`.
  void finish_unit(int unit, float* bucket, std::int64_t micro);
  /// Student: after backward, once every gradient was reduced (stages 0-1: reduce_full_unit and
  /// store_full_gradient; stages 2-3: the reduce-scatters of backward).
  /// AdamW, as adamw_update, on the elements this rank owns (all of them for stage 0),
  /// updating the fp32 master (bf16) or the parameters (fp32) and the bf16 copy. Stages 1-2
  /// finally all-gather every unit's parameters (allgather_inplace). Hint: index the optimizer
  /// state by the shard position for stages >= 1, the gradient for stages >= 2, the parameters
  /// for stage 3; the ring with the same chunks makes every stage's sums bit-identical. Call
  /// unit_updated(k) once unit k's elements are updated (overlap: the next step's first
  /// all-gathers start under the rest of the optimizer step; left out, they start after it).
  void reduce_and_update(double lr);
  /// Given (overlap, stage 3; otherwise nothing): unit `unit`'s part is updated. Starts, in the
  /// learned gather order, the next step's first prefetch + 1 all-gathers (position 0, the unit
  /// forward needs first, and the prefetch after it) whose units are all updated by now, so they
  /// run under the rest of the optimizer step instead of in front of the next forward. The step
  /// calls it for every unit after reduce_and_update too (idempotent). The step's loss is then
  /// reduced before the optimizer step (after them it would wait for them: issue order), and the
  /// step's traffic (ZeroStepStats) counts the head the last step issued, not the one it issues.
  void unit_updated(int unit);
  /// Student (overlap, stage 3): the prefetch. Called right after the step's gather number
  /// `done` (0-based) of impl's learned gather order; starts the all-gathers of the next
  /// options().prefetch entries of that order (positions done+1 .. done+prefetch) whose unit is
  /// neither gathered nor already in flight (a unit gathered now is gathered again later, after
  /// its release: that later gather must not start yet), with start_prefetch(unit).
  /// Hint: ordered() is the learned order (empty: nothing learned yet: do nothing).
  void prefetch_ahead(std::size_t done);
  /// Student: adds this rank's reduced chunk `mine` (the Sum over the ranks of unit `unit`'s chunk
  /// for micro-batch `micro`) into the gradient shard as the mean (divide by N): micro == 0
  /// STORES, micro > 0 ADDS (bf16: g = to_bf16(from_bf16(g) + x)). Stages 2-3.
  void add_shard_gradient(int unit, std::int64_t micro, const float* mine);
  /// Given: the reduce-scatter of unit `unit`'s bucket `t` (a Communication tensor of the unit's
  /// size): blocking, then add_shard_gradient; with overlap, issued asynchronously and added in
  /// finish_reductions().
  void reduce_scatter_unit(int unit, std::int64_t micro, const Tensor& t);
  /// Student (stages 0-1): `sum` holds elements [b, e) of unit `unit`'s full gradient summed over
  /// the ranks (stage 0: the whole unit; stage 1: this rank's chunk); store their mean (divide by
  /// N) into the gradient buffer at the unit's offset (bf16: to_bf16).
  void store_full_gradient(int unit, std::int64_t b, std::int64_t e, const float* sum);
  /// Given (stages 0-1): reduces unit `unit`'s full gradient over the ranks (packed as fp32;
  /// stage 0: allreduce, stage 1: reduce_scatter, Sum, Ring), then store_full_gradient; with
  /// overlap, issued asynchronously (from backward, as the unit's gradient of the step's last
  /// micro-batch is complete) and stored in finish_reductions().
  void reduce_full_unit(int unit);
  /// Given: waits for the asynchronous reductions in issue order, adding each into the shard
  /// (stages 2-3) or storing the means (stages 0-1, store_full_gradient).
  void finish_reductions();
  /// Given: the all-gather of unit `unit`'s `t` (this rank's chunk in place): waits for the
  /// prefetched one where there is one (t then holds it), else allgather_inplace now.
  void all_gather_unit(int unit, Tensor& t);
  /// Given: starts the all-gather of unit `unit` ahead of its gather (iallgather_inplace).
  void start_prefetch(int unit);
  /// Given: the learned gather order (units, in the order the last step gathered them).
  const std::vector<int>& ordered() const;
  bool in_flight(int unit) const;
  /// Given: waits for every prefetched all-gather in flight, keeping its buffer for its gather.
  void wait_prefetches();
  /// Given: waits for every prefetched all-gather and drops it (its unit is gathered anew).
  void drop_prefetches();
  ZeroStepStats step(const MicroBatch& whole, double lr);
  /// The sum of the mask over every rank's batch (one allreduce).
  double global_mask_sum(const MicroBatch& whole);
  struct Impl;
  struct Access;  // the ModelAccess of the one step: units gathered, buckets reduced
  std::unique_ptr<Impl> impl_;
  parallel::Communicator* comm_;
  GPTConfig cfg_;
  ZeroOptions opts_;
  std::vector<ZeroUnit> units_;
  Partition part_;
  std::int64_t psi_ = 0;
};

/// The measured model-state bytes of a rank (peaks on mem::global() since its last reset) next
/// to the formula, as a table; and the communication table (elements sent per rank per step,
/// counted vs 2Ψ(N−1)/N or 3Ψ(N−1)/N).
struct ZeroRunReport {
  int stage = 0, ranks = 1;
  Precision precision = Precision::FP32;
  std::int64_t psi = 0, largest_unit = 0;
  std::vector<std::int64_t> shard_sizes;  // per rank
  std::vector<std::array<std::int64_t, mem::kNumTags>> peak;  // per rank, per tag
  std::vector<std::int64_t> elements_sent;                    // per rank, per step
  std::vector<double> losses;                                 // per step (rank 0)
  std::vector<double> step_wall_s;  // per step: wall seconds of ZeroTrainer::step, the slowest rank's
                                    // (the first step also learns stage 3's gather order: no prefetch)
  std::vector<double> modelled_comm_s;                        // per rank, whole run (sim: α-β-γ clock)
  std::vector<double> comm_wall_s;                            // per rank, whole run, measured
  double wall_s = 0;
  RecomputeKind remat;                    // the plan's kind
  std::string plan;                       // its segments, e.g. "[0,2) [2,3)"
  std::int64_t recomputed_blocks = 0;     // per step
  std::int64_t recomputed_params = 0;     // parameters of the recomputed blocks' units
  std::int64_t activation_bytes = 0;      // RematActivations::bytes of a rank
  std::int64_t accum = 1, micro_batch = 0;  // micro-batches per step and their rows
  std::int64_t prefetched = 0;            // all-gathers started ahead in the last step (overlap, stage 3)
};
/// Per rank: measured peak bytes of parameters, gradients and optimizer state next to the
/// formula for that rank's shard (exact, uneven shards included), and the other tags measured.
std::string memory_table(const ZeroRunReport& r);
/// Per rank: elements sent per step, counted, next to 2Ψ(N−1)/N or 3Ψ(N−1)/N, and the modelled
/// communication seconds (sim backend).
std::string comm_table(const ZeroRunReport& r);
/// The formula for rank `rank`'s model-state bytes of a run: (params, grads, optimizer) with the
/// shard size of that rank in place of Ψ/N, and + the largest unit's parameters for stage 3.
ZeroBytes expected_bytes(const ZeroRunReport& r, int rank);

/// A learnable synthetic token stream: row b of (step, rank) starts at a random token and
/// continues x' = (5x + 3) mod V. Fills inputs and targets (B*T each).
void zero_batch(const GPTConfig& cfg, std::int64_t B, std::int64_t T, std::uint64_t seed,
                std::int64_t step, int rank, std::int32_t* inputs, std::int32_t* targets);

struct ZeroRunOptions {
  GPTConfig cfg{};
  ZeroOptions zero{};
  std::int64_t batch = 4;    // per rank per step (zero.accum micro-batches of batch / accum rows)
  std::int64_t context = 16;
  std::int64_t steps = 10;
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  /// Checks everything before any rank starts: the config, zero.validate(), batch >= 1,
  /// zero.accum divides batch, 0 < context <= block_size, steps >= 1, lr > 0, and that the
  /// recompute plan exists for the micro-batch (batch / accum, context) (an "optimal" budget too
  /// small for any plan is an mls::Error naming it).
  void validate() const;
};

/// The backends of `mls-gpt train --zero`: lab 5's simulated ranks (threads), MPI processes,
/// NCCL (one rank per GPU; lab 5 stages host tensors through device buffers).
enum class ZeroBackend { Sim, Mpi, Nccl };
/// "sim" | "mpi" | "nccl"; anything else is an mls::Error naming the text.
ZeroBackend parse_zero_backend(const std::string& s);
/// The ranks of a run: `requested` (empty: --ranks not given) on `backend`. sim: 1..64 simulated ranks,
/// default 2; mpi / nccl: the world size `world` (mpirun's), which a given value must equal.
/// Errors name --ranks, the value and what was expected.
int zero_run_ranks(ZeroBackend backend, std::optional<int> requested, int world = 1);
/// Trains `opts.steps` steps of ZeRO on `comm` (collective) from init_params(cfg, seed), on
/// zero_batch data, and returns the report (the same on every rank: per-rank fields are
/// exchanged at the end). The memory peaks are read from mem::global() (enable and reset it
/// before; for the simulated backend, once before run_simulated). `final_params` (optional)
/// receives the trained parameters.
ZeroRunReport run_zero(parallel::Communicator& comm, const ZeroRunOptions& opts,
                       GPTParams* final_params = nullptr);
/// run_zero on `ranks` simulated ranks (enables and resets mem::global() first; checks
/// opts.validate() and ranks >= 1 before any rank starts).
ZeroRunReport run_zero_simulated(int ranks, const ZeroRunOptions& opts,
                                 GPTParams* final_params = nullptr);

}  // namespace mls::llm
