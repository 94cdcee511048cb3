#pragma once
/// Lab 6, part 2: rematerialization (activation checkpointing) — keep the input of a few segments
/// of a chain of layers, drop everything else the forward pass would keep, and recompute one
/// segment's forward pass just before its backward pass (Chen et al. 2016, "Training deep nets
/// with sublinear memory cost"; Checkmate, Jain et al. 2020, for the optimal version).
///
/// A plan cuts a chain of n layers into segments [s_0 = 0, s_1), [s_1, s_2), ..., [s_{m-1}, n).
/// The forward pass keeps the input of every segment (a checkpoint) and the activations of the
/// LAST segment only (its backward comes first, so it is never recomputed); in the backward pass
/// segment k is recomputed from its checkpoint, differentiated, and freed. With segment starts
/// s_k, checkpoint bytes c_i (input of layer i), activation bytes a_i (what layer i keeps for
/// its backward) and forward FLOPs f_i:
///
///   peak     = max over k of ( c_{s_0} + ... + c_{s_k} + a_{s_k} + ... + a_{e_k - 1} )
///   recompute = sum of f_i over every segment but the last        (<= one forward pass)
///
/// (later checkpoints are freed as the backward pass walks back, so segment k only sees the
/// checkpoints up to its own). The plan with one segment keeps everything and recomputes nothing.
///
/// Two users: the fused GPT path (the chain is the L transformer blocks; a checkpoint is the
/// residual stream (B, T, C), a block keeps N(18C + 4) + B·H·T² floats) and ChainModel, a pure
/// chain of dense layers whose every buffer is counted, for exact measurements.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "mls/common/memory.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/train.hpp"

namespace mls::llm {

/// The kind of a recompute plan: none (keep every activation), sqrt (Chen et al.'s √n
/// segments) or optimal (the fewest recomputed FLOPs within a budget). Made from its name (an
/// unknown name is an mls::Error naming it and the three), printed and compared by name, so
/// options read `o.remat = "sqrt"` and `o.remat == "none"`.
class RecomputeKind {
 public:
  enum Kind : std::uint8_t { None, Sqrt, Optimal };
  constexpr RecomputeKind(Kind k = None) : k_(k) {}  // NOLINT: implicit on purpose
  RecomputeKind(std::string_view name);              // NOLINT
  RecomputeKind(const char* name) : RecomputeKind(std::string_view(name)) {}  // NOLINT
  RecomputeKind(const std::string& name) : RecomputeKind(std::string_view(name)) {}  // NOLINT
  constexpr Kind kind() const { return k_; }
  const char* name() const;
  operator std::string() const { return name(); }  // NOLINT
  friend bool operator==(RecomputeKind a, RecomputeKind b) { return a.k_ == b.k_; }

 private:
  Kind k_;
};
std::ostream& operator<<(std::ostream& os, RecomputeKind k);

/// Segment starts of a chain of n layers: starts[0] = 0, strictly increasing, all < n.
struct RematPlan {
  std::int64_t n = 0;
  std::vector<std::int64_t> starts;
  std::int64_t num_segments() const { return static_cast<std::int64_t>(starts.size()); }
  /// End (exclusive) of segment k.
  std::int64_t segment_end(std::int64_t k) const;
  std::int64_t max_segment() const;
  /// Layers recomputed in the backward pass (all but the last segment's).
  std::int64_t recomputed_layers() const;
  /// "[0,3) [3,6) [6,8)".
  std::string to_string() const;
  /// Throws mls::Error naming what is wrong (n <= 0, starts[0] != 0, not increasing, >= n).
  void validate() const;
  bool operator==(const RematPlan&) const = default;
};

/// One segment [0, n): everything kept, nothing recomputed.
RematPlan no_remat_plan(std::int64_t n);
/// Chen et al.'s √n plan: segments of k = ⌈√n⌉ layers (the last may be shorter).
/// Peak <= (⌈n/k⌉ + k) layers <= (2√n + 2) layers for uniform layers.
RematPlan sqrt_plan(std::int64_t n);

/// What each layer of a chain costs.
struct ChainCosts {
  std::vector<std::int64_t> act_bytes;   // a_i: bytes layer i keeps for its backward
  std::vector<std::int64_t> ckpt_bytes;  // c_i: bytes of layer i's input (a checkpoint)
  std::vector<double> fwd_flops;         // f_i: forward FLOPs of layer i
  std::int64_t n() const { return static_cast<std::int64_t>(act_bytes.size()); }
  /// n identical layers.
  static ChainCosts uniform(std::int64_t n, std::int64_t act, std::int64_t ckpt, double flops);
  /// Throws mls::Error unless the three vectors have the same length n > 0 and are >= 0.
  void validate() const;
};

/// The peak bytes of a plan (the formula above; the plan must be for costs.n() layers).
std::int64_t plan_peak_bytes(const ChainCosts& costs, const RematPlan& plan);
/// The forward FLOPs the plan recomputes (the formula above).
double plan_recompute_flops(const ChainCosts& costs, const RematPlan& plan);

/// The plan with the fewest recomputed FLOPs whose peak is at most `budget_bytes` (ties: the
/// lower peak, then the fewer segments). Dynamic programming over segment starts with the bytes
/// of the checkpoints kept so far as state (a Pareto front of (checkpoint bytes, FLOPs, peak)
/// per start, so it is exact for any sizes). Throws mls::Error naming the budget and the
/// smallest peak any plan reaches when no plan fits.
/// Hint: a state at start s is (bytes of the checkpoints before s, FLOPs so far, peak so far);
/// from it, segment [s, e) is allowed when before + c_s + a_s + ... + a_{e-1} <= budget and
/// leads to the state at e (before + c_s, FLOPs + (e < n ? f_s + ... + f_{e-1} : 0), max peak).
/// Drop a state when another at the same start is no worse in all three.
RematPlan optimal_plan(const ChainCosts& costs, std::int64_t budget_bytes);
/// The smallest peak of any plan (the budget below which optimal_plan throws).
std::int64_t min_peak_bytes(const ChainCosts& costs);

/// "none" | "sqrt" | "optimal" for n layers; "optimal" uses `budget_bytes` (<= 0: the √n plan's
/// peak, so it never needs more memory than √n and recomputes at most as much).
RematPlan make_plan(RecomputeKind kind, const ChainCosts& costs,
                    std::int64_t budget_bytes = 0);

// ---- the fused GPT path under a plan ---------------------------------------------------------

/// Floats one transformer block keeps for its backward: N(18C + 4) + B·H·T² with N = B·T.
std::int64_t block_activation_floats(const GPTConfig& cfg, std::int64_t B, std::int64_t T);
/// Floats of the head and embeddings (encoded, lnf and its stats, logits, losses).
std::int64_t head_activation_floats(const GPTConfig& cfg, std::int64_t B, std::int64_t T);
/// Forward FLOPs of one block on B·T positions: 2·N·12C² + 4·N·T·C (the convention of
/// train_flops_per_token).
double block_forward_flops(const GPTConfig& cfg, std::int64_t B, std::int64_t T);
/// The chain of the L blocks: a_i = block_activation_floats·4, c_i = B·T·C·4, f_i as above.
ChainCosts gpt_chain_costs(const GPTConfig& cfg, std::int64_t B, std::int64_t T);

/// Bytes RematActivations holds for `plan` (allocated once, for the whole step):
///   4·( m·B·T·C  +  2·(max_segment · block_activation_floats + head_activation_floats) )
/// (m checkpoints; one segment's activations and, as large, their gradients' scratch).
std::int64_t remat_activation_bytes(const GPTConfig& cfg, std::int64_t B, std::int64_t T,
                                    const RematPlan& plan);
/// The plan whose last segment is k layers long (never recomputed), the first L − k cut into
/// segments of k from layer 0: [0,k) [k,2k) ... [L−k, L).
RematPlan last_segment_plan(std::int64_t L, std::int64_t k);
/// The plan of the fused path that recomputes the fewest blocks within `budget_bytes` of
/// remat_activation_bytes. The blocks are identical, so only the longest segment k matters:
/// make the last segment k long (it is never recomputed) and cut the rest into ⌈(L−k)/k⌉
/// segments of at most k; the largest k that fits wins (recompute (L−k) blocks). Throws
/// mls::Error naming the budget and the smallest footprint (k = 1... the minimum over k) when
/// none fits.
RematPlan gpt_optimal_plan(const GPTConfig& cfg, std::int64_t B, std::int64_t T,
                           std::int64_t budget_bytes);
/// "none" | "sqrt" | "optimal" for the fused path; "optimal" with budget_bytes <= 0 uses the √n
/// plan's remat_activation_bytes (never more memory than √n, never more recompute).
RematPlan gpt_plan(RecomputeKind kind, const GPTConfig& cfg, std::int64_t B, std::int64_t T,
                   std::int64_t budget_bytes = 0);

/// The fused path's buffers under a plan: the residual stream at each segment start, ONE
/// segment's block activations (a GPTActivations of max_segment layers, reused by every
/// segment) and their gradients' scratch.
class RematActivations {
 public:
  /// `attention`: the kernel the segment's blocks run (what GPTActivations::att holds).
  RematActivations(const GPTConfig& cfg, std::int64_t B, std::int64_t T, RematPlan plan,
                   Attention attention = Attention::Naive);
  const RematPlan& plan() const { return plan_; }
  std::int64_t B = 0, T = 0;
  /// Bytes of every activation buffer held (checkpoints, the segment, its gradient scratch).
  std::int64_t bytes() const;
  /// Blocks whose forward ran since the last reset_counters() (L per forward, + the recomputed).
  std::int64_t blocks_run = 0;
  void reset_counters() { blocks_run = 0; }

  GPTConfig seg_cfg;                    // the config with n_layer = max_segment
  std::vector<float> checkpoints;       // (segments, B, T, C): input of each segment
  GPTActivations seg, dseg;             // one segment's activations and gradients' scratch

 private:
  RematPlan plan_;
  mem::Block ckpt_mem_;  // the checkpoints, counted as activations by the memory tracker
};

/// Runs the blocks of segment k of ra's plan on ra.seg (blocks_forward: block s_k + j at slot j),
/// from the checkpoint ra.checkpoints[k]. Counts them in ra.blocks_run.
void remat_segment_forward(const GPTConfig& cfg, BlockAccess& acc, RematActivations& ra,
                           std::int64_t k);

/// Student: the forward pass of the L blocks under ra's plan. ra.checkpoints[0] holds the blocks'
/// input (the encoder's output, (B, T, C)). Keeps the input of every segment in
/// ra.checkpoints and, in ra.seg, the activations of the last segment; returns its output (the
/// residual stream after block L-1, inside ra.seg).
/// Hint: for each segment k, remat_segment_forward, then copy the segment's last residual3 into
/// checkpoint k + 1 (not after the last one).
const float* remat_blocks_forward(const GPTConfig& cfg, BlockAccess& acc, RematActivations& ra);
/// Student: the backward pass of the L blocks under ra's plan, right after remat_blocks_forward
/// (ra.seg still holds the last segment). `dresidual` (B, T, C) holds d(loss)/d(output of block
/// L-1) and becomes d(loss)/d(input of block 0). Segment by segment from the last: recompute it
/// from its checkpoint (not the last one: it is still there), then run the block loop's backward
/// over it (blocks_backward on ra.seg / ra.dseg from its checkpoint: every block in reverse,
/// with acc.params and acc.grads, then acc.release_params and acc.grads_done).
/// Hint: remat_segment_forward recomputes segment k; its input is checkpoint k.
void remat_blocks_backward(const GPTConfig& cfg, BlockAccess& acc, RematActivations& ra,
                           float* dresidual);

/// gpt_forward under the plan (the same loss, bit for bit): model_forward on
/// PassBuffers::recompute(ra) (the encoder into checkpoint 0, remat_blocks_forward, the head).
/// Throws like gpt_forward.
double gpt_forward_remat(const GPTParams& params, RematActivations& ra, const std::int32_t* inputs,
                         const std::int32_t* targets, const float* mask, std::int64_t B,
                         std::int64_t T);
/// gpt_backward under the plan: model_backward on PassBuffers::recompute(ra) (the head's
/// backward, remat_blocks_backward, which recomputes every segment but the last, with
/// ra.dseg.encoded as the running d(residual), then encoder_backward). ACCUMULATES into grads,
/// bit-identical to gpt_backward (`norm` as there).
void gpt_backward_remat(const GPTParams& params, GPTGrads& grads, RematActivations& ra,
                        const std::int32_t* inputs, const std::int32_t* targets, const float* mask,
                        double norm = -1);
/// Trainer::step(b, ra): the one step with the forward and backward under ra's plan. ra is built
/// for the micro-batch (options().micro_batch(), context); an mls::Error names both otherwise.
StepStats remat_train_step(Trainer& tr, RematActivations& ra, const Batch& b);

// ---- a pure chain, every buffer counted -----------------------------------------------------

/// n dense layers x_{i+1} = tanh(x_i W_i^T + b_i) on x (B, d), loss = ½·Σ x_n². Layer i keeps its
/// output (B·d floats) for its backward; a checkpoint is B·d floats; every activation buffer
/// (checkpoints, a segment's outputs, the two gradient buffers) is counted as Tag::Activation by
/// a memory tracker of its own (mem::Tracker) when allocated and freed, and every FLOP is
/// counted per kernel call.
class ChainModel {
 public:
  ChainModel(std::int64_t n, std::int64_t d, std::uint64_t seed);
  std::int64_t n = 0, d = 0;
  std::vector<float> W;  // (n, d, d)
  std::vector<float> b;  // (n, d)

  struct Result {
    double loss = 0;
    std::vector<float> dW, db;    // gradients of W, b
    std::int64_t peak_bytes = 0;  // peak of the activation buffers
    double flops = 0;             // counted FLOPs of forward + backward (+ recompute)
    double forward_flops = 0;     // of which in forward passes (first + recomputed)
  };
  /// Forward and backward of x0 (B, d) under the plan.
  Result train_step(const std::vector<float>& x0, std::int64_t B, const RematPlan& plan) const;
  /// The chain's costs for batch B (a_i = c_i = B·d·4 bytes, f_i = 2Bd² + 2Bd).
  ChainCosts costs(std::int64_t B) const;
  /// Bytes of one layer's activations for batch B (B·d·4).
  std::int64_t layer_bytes(std::int64_t B) const { return B * d * 4; }
};

}  // namespace mls::llm
