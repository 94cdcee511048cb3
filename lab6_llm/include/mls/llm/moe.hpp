#pragma once
/// Lab 6: mixture of experts (MoE) — the MLP of chosen blocks becomes E experts behind a router.
///
/// For N tokens x (N, C) (the block's ln2 output), an MoE block computes
///
///   probs = softmax(x · router^T)                     (N, E)   the router
///   top-k: token t's K best experts e_t1..e_tK       (ties: the lower expert first)
///   gates: K = 1 (Switch): g = probs[t, e];  K > 1 (GShard): g_k = probs[t, e_tk] / Σ_j probs[t, e_tj]
///   capacity: cap = ceil(F · K · N / E) rows per expert; the choices claim rows choice by
///             choice (every token's 1st choice in token order, then every 2nd choice, ...);
///             a choice that finds its expert full is DROPPED (its gate unused; the token keeps
///             its other choices, and the residual stream carries it through the block)
///   out[t] = Σ_k kept g_k · expert_{e_tk}(x[t])      expert e = fcproj_e(gelu(fc_e(x)))
///   balancing loss = coef · E · Σ_e frac_e · P_e  with frac_e = (choices routed to e) / (N·K)
///             (before capacity; a constant) and P_e = mean_t probs[t, e] (its gradient: through P)
///   z-loss = z_coef · mean_t logsumexp(router logits[t])²
///
/// The fused path (llm.c style, as model.cpp): gather each expert's rows, two GEMMs per expert
/// through matmul_forward (lab 4's SGEMM), scatter back weighted by the gates; the backward
/// mirrors it and sends gradients through the gates into the router. The training loss is the
/// cross-entropy plus the MoE losses (moe_loss_total); model_forward returns the cross-entropy.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mls/llm/model.hpp"

namespace mls::llm {

// ---- the student's three functions -------------------------------------------------------------

/// Student: top-k routing with capacity. probs (N, E), row t a softmax. Writes, for every token t
/// and choice k < K: expert[t·K + k] (the k-th largest probability, ties to the lower expert),
/// gate[t·K + k] (K = 1: the probability; K > 1: renormalised over the K choices) and slot[t·K + k]
/// (the expert row e·cap + i the choice got, or -1 when dropped); count[e] (rows used, <= cap) and
/// token[e·cap + i] (the token of row i of expert e; rows past count[e] untouched).
/// Rows are claimed choice-major: k = 0 for t = 0..N-1, then k = 1, ... Returns the number of
/// dropped choices. Hint: a partial selection of K per row; then one pass per k.
std::int64_t moe_route(const float* probs, std::int64_t N, std::int64_t E, std::int64_t K,
                       std::int64_t cap, std::int32_t* expert, float* gate, std::int32_t* slot,
                       std::int32_t* count, std::int32_t* token);

/// Student: the load-balancing loss coef · E · Σ_e frac_e · P_e (see above). Writes frac (E):
/// the fraction of the N·K choices in `expert` (N, K) routed to e (before capacity).
/// P_e = (1/N) Σ_t probs[t, e]. Sums in double.
double moe_balance_loss_forward(const float* probs, const std::int32_t* expert, std::int64_t N,
                                std::int64_t E, std::int64_t K, double coef, float* frac);
/// Student: its gradient, ADDED into dprobs (N, E): scale · coef · E · frac_e / N for every t
/// (frac is a constant: the gradient flows through P_e only).
void moe_balance_loss_backward(float* dprobs, const float* frac, std::int64_t N, std::int64_t E,
                               double coef, float scale);

// ---- the pieces of the fused MoE MLP (shared by the single-rank path and expert parallelism) ----

/// Router logits (N, E) in `probs` become their softmax, row by row in place; lse (N) the rows'
/// logsumexp (for the z-loss).
void moe_router_softmax(float* probs, float* lse, std::int64_t N, std::int64_t E);
/// The E experts of `p` (p.moe_* of E experts) on their rows: expert e's rows [e·cap, e·cap +
/// count[e]) of xin (·, C) through fc, gelu (h, hg: (·, 4C)) and fcproj into y (·, C).
void moe_experts_forward(const ParamPtrs& p, std::int64_t E, std::int64_t cap, const std::int32_t* count,
                         const float* xin, float* h, float* hg, float* y, std::int64_t C);
/// Its backward from dy: writes dxin (and the dh, dhg scratch), accumulates into g.moe_*.
void moe_experts_backward(const ParamPtrs& p, ParamPtrs& g, std::int64_t E, std::int64_t cap,
                          const std::int32_t* count, const float* xin, const float* h, const float* hg,
                          const float* dy, float* dxin, float* dh, float* dhg, std::int64_t C);
/// dp (N, E) = the gradient of the gates (dgate (N, K)) through the top-k (renormalised for K > 1)
/// into the router probabilities (written, not accumulated).
void moe_gates_backward(float* dp, const float* probs, const std::int32_t* expert, const float* gate,
                        const float* dgate, std::int64_t N, std::int64_t E, std::int64_t K);
/// dp (N, E) holds d(probs) and becomes d(router logits), plus the z-loss's zc · lse_t · p.
void moe_router_softmax_backward(float* dp, const float* probs, const float* lse, std::int64_t N,
                                 std::int64_t E, float zc);

// ---- where the experts run: locally, or on an expert-parallel group --------------------------

/// The expert half of an MoE block when it does not run on this rank alone: set
/// GPTActivations::moe_dispatch (block_view passes it on) and moe_mlp_forward / moe_mlp_backward
/// hand it the block's ln2 output and take back the MoE output, on the one step path (the
/// layernorm and the residual stay theirs). moe_ep.hpp's EpDispatch is the expert-parallel one.
class MoeDispatch {
 public:
  virtual ~MoeDispatch() = default;
  /// out (N, C) = the MoE of x (N, C) for the block whose view is `p`; loss[0], loss[1] = its
  /// balancing and z-loss (coefficients applied).
  virtual void forward(const ParamPtrs& p, const float* x, float* out, std::int64_t N, float* loss) = 0;
  /// From dout (N, C): dx (N, C) written; accumulates into g (the block's gradient view).
  /// `scale`: this micro-batch's share of the MoE losses (GPTActivations::moe_grad_scale).
  virtual void backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, std::int64_t N,
                        float scale) = 0;
};

// ---- the fused MoE MLP (block_forward / block_backward call them for MoE blocks) ---------------

/// The MoE half of block l: residual3 = residual2 + moe(ln2(residual2)). `p` is the block's view
/// (shift_layers: p.moe_* are this block's experts and router); the activations of layer l of `a`.
/// Writes ln2 and its statistics, the moe_* buffers, fcproj (the MoE output) and residual3.
void moe_mlp_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a, std::int64_t l);
/// Backward of moe_mlp_forward: dresidual (N, C) holds d(residual3) and becomes d(residual2);
/// accumulates into g's ln2 and moe_* gradients; the MoE losses' gradients scaled by
/// da.moe_grad_scale.
void moe_mlp_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g,
                      const GPTActivations& a, GPTActivations& da, std::int64_t l,
                      float* dresidual);

/// One token through an MoE block's MLP (generation with the KV cache): x (C) the token's ln2
/// output, out (C) = Σ_k g_k expert_{e_k}(x) over its top-k experts. `p` is the block's view. One
/// token never overflows an expert (capacity >= 1), so nothing is dropped here.
void moe_token_forward(const GPTConfig& cfg, const ParamPtrs& p, const float* x, float* out);

// ---- what the last forward routed ---------------------------------------------------------------

/// One MoE block's routing in the last forward pass over acts.
struct MoeBlockStats {
  std::int64_t layer = 0;
  std::vector<std::int64_t> tokens;  // (E) rows kept per expert
  std::int64_t choices = 0;          // N · K
  std::int64_t dropped = 0;          // choices dropped by capacity
  double balance_loss = 0, z_loss = 0;
};
/// The routing of the MoE block whose activations are the block view `v` (block_view), as layer `layer`.
MoeBlockStats moe_block_stats(const GPTConfig& cfg, const GPTActivations& v, std::int64_t layer);
/// The layer of the b-th MoE block: (b + 1) · moe_every - 1.
inline std::int64_t moe_block_layer(const GPTConfig& cfg, std::int64_t b) { return (b + 1) * cfg.moe_every - 1; }
/// The MoE blocks of `acts` (a GPTActivations of cfg.n_layer slots holding every block: the plain
/// path), in block order; empty for a dense config.
std::vector<MoeBlockStats> moe_stats(const GPTConfig& cfg, const GPTActivations& acts);
/// Where the blocks' forwards record their routing when the activations do not keep every block
/// (a recompute plan's segment: set GPTActivations::moe_record on it): the last forward of each
/// block, found by its router's address (a recomputed forward routes the same and replaces it).
struct MoeRecord {
  std::map<const float*, MoeBlockStats> blocks;
  /// In block order (routers are stacked by block), with each MoE block's layer.
  std::vector<MoeBlockStats> stats(const GPTConfig& cfg) const;
};
/// Σ over the MoE blocks of balancing loss + z-loss (what the backward adds to the cross-entropy).
double moe_loss_total(const GPTConfig& cfg, const GPTActivations& acts);

/// FLOPs of one token's forward pass, 2 per multiply-add of a matmul (the active parameters, the
/// router included; attention's q·k and att·v over context T): 2 · flops_params + 4·L·T·C.
double forward_flops_per_token(const GPTConfig& cfg, std::int64_t T);

}  // namespace mls::llm
