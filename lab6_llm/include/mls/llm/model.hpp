#pragma once
/// Lab 6: the GPT model, fused fast path (llm.c style, learn from `train_gpt2.c`).
///
/// Four owners, one per kind of state, so that a later lab can partition (ZeRO 1-3), lower the
/// precision of, or recompute each of them on its own:
///
///   GPTParams       the parameters: ONE flat float buffer in config.hpp's order (llm.c's), with a
///                   view (pointer) per tensor. Checkpoints and llm.c `.bin` files map onto it.
///   GPTGrads        the gradients: the same layout as GPTParams.
///   AdamWState      the optimizer state: first and second moments (same layout) and the step.
///   GPTActivations  every buffer the forward pass saves for the backward pass, for one (B, T),
///                   in one allocation; a second instance holds the gradients of the activations.
///
/// The forward and backward passes are free functions per layer with raw pointers and explicit
/// shapes (`attention_forward`, `mlp_forward`, `block_forward`, ...), so one block can be
/// recomputed on its own. GEMMs go through the SGEMM registry (lab 4's packed kernels); the
/// memory-bound kernels (layernorm, GELU, softmax) are lab 4's, threaded here over rows.
/// Every parallel reduction uses a fixed chunking (never the thread count), so the results are
/// bit-identical whatever the thread scheduling: a resumed run repeats the same losses.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mls/common/memory.hpp"
#include "mls/common/rng.hpp"
#include "mls/llm/config.hpp"

namespace mls::llm {

class MoeDispatch;  // moe.hpp: where an MoE block's experts run (null: locally)
struct MoeRecord;   // moe.hpp: where an MoE block's forward records its routing (null: nowhere)

/// The 16 parameter tensors of a flat buffer, as pointers (config.hpp order).
struct ParamPtrs {
  float* wte;       // (V, C)
  float* wpe;       // (T, C)
  float* ln1w;      // (L, C)
  float* ln1b;      // (L, C)
  float* qkvw;      // (L, 3C, C)
  float* qkvb;      // (L, 3C)
  float* attprojw;  // (L, C, C)
  float* attprojb;  // (L, C)
  float* ln2w;      // (L, C)
  float* ln2b;      // (L, C)
  float* fcw;       // (L, 4C, C)
  float* fcb;       // (L, 4C)
  float* fcprojw;   // (L, C, 4C)
  float* fcprojb;   // (L, C)
  float* lnfw;      // (C)
  float* lnfb;      // (C)
  // The MoE tensors (config.hpp; moe.hpp). On a flat buffer's views: the stacked tensors (null
  // for a dense config). On one block's view (shift_layers): that block's slices for an MoE block,
  // null for a dense block (and then the fc* fields are null for an MoE block).
  float* moe_router = nullptr;   // (Lm, E, C)
  float* moe_fcw = nullptr;      // (Lm, E, 4C, C)
  float* moe_fcb = nullptr;      // (Lm, E, 4C)
  float* moe_fcprojw = nullptr;  // (Lm, E, C, 4C)
  float* moe_fcprojb = nullptr;  // (Lm, E, C)
};

/// Offsets of the 16 tensors inside the flat buffer (their sizes follow from param_shapes).
std::array<std::int64_t, kNumParamTensors> param_offsets(const GPTConfig& cfg);
/// Offsets of the 5 MoE tensors (after lnfb; moe_param_shapes).
std::array<std::int64_t, kNumMoeTensors> moe_param_offsets(const GPTConfig& cfg);
/// Every tensor of the flat buffer as [begin, end) with whether AdamW decays it: the 16, then the
/// MoE tensors (router and expert weights decay, expert biases do not).
struct TensorRange {
  std::int64_t begin, end;
  bool decays;
};
std::vector<TensorRange> param_ranges(const GPTConfig& cfg);
/// Views of a flat buffer of num_params(cfg) floats.
ParamPtrs param_views(float* flat, const GPTConfig& cfg);

/// A flat float buffer in config.hpp's order, with views. GPTParams and GPTGrads are two owners
/// of this same layout.
class FlatParams {
 public:
  FlatParams() = default;
  /// Zeros for `cfg` (validated), counted by the memory tracker under `tag` (this thread's rank).
  explicit FlatParams(const GPTConfig& cfg, mem::Tag tag = mem::Tag::Parameter);
  const GPTConfig& config() const { return cfg_; }
  std::int64_t size() const { return static_cast<std::int64_t>(data_.size()); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }
  ParamPtrs views() { return param_views(data_.data(), cfg_); }
  /// Tensor `i` (0..15) of the layout.
  float* tensor(int i);
  const float* tensor(int i) const;
  void zero();

 private:
  GPTConfig cfg_{};
  std::vector<float> data_;
  mem::Block mem_;
};

struct GPTParams : FlatParams {
  GPTParams() = default;
  explicit GPTParams(const GPTConfig& cfg) : FlatParams(cfg, mem::Tag::Parameter) {}
};
struct GPTGrads : FlatParams {
  GPTGrads() = default;
  explicit GPTGrads(const GPTConfig& cfg) : FlatParams(cfg, mem::Tag::Gradient) {}
};

/// GPT-2 initialisation from `seed` (stream "gpt-init"): weights N(0, 0.02), the two residual
/// projections (attprojw, fcprojw) N(0, 0.02 / sqrt(2L)), biases 0, layernorm weights 1.
GPTParams init_params(const GPTConfig& cfg, std::uint64_t seed);

/// AdamW's state, in the parameters' layout.
struct AdamWState {
  std::vector<float> m;   // first moment  (num_params)
  std::vector<float> v;   // second moment (num_params)
  std::int64_t step = 0;  // updates taken
  mem::Block mem;         // 8 bytes per parameter, counted as optimizer state
  AdamWState() = default;
  explicit AdamWState(std::int64_t n)
      : m(static_cast<std::size_t>(n), 0.f), v(static_cast<std::size_t>(n), 0.f),
        mem(mem::Tag::OptimizerState, 8 * n) {}
};

/// Which attention kernel the blocks run (a parameter of attention_forward / attention_backward,
/// fixed per GPTActivations): Naive, this lab's attention_forward, keeps the softmaxed (B, H, T, T)
/// scores for the backward pass; Flash, lab 4's tiled kernel (mls/kernels/attention.hpp), keeps
/// only the log-sum-exp (B, H, T) and recomputes the scores blockwise in the backward pass.
enum class Attention { Naive, Flash };
/// "naive" or "flash".
const char* to_string(Attention a);
/// "naive" or "flash"; anything else is an mls::Error naming `what` (e.g. "train: --attention").
Attention parse_attention(const std::string& name, const std::string& what = "attention");

/// Every buffer of one forward pass for batch B and context T (T <= block_size), one allocation.
/// Per-layer buffers are stacked over L (layer l starts at l * its per-layer size).
class GPTActivations {
 public:
  GPTActivations() = default;
  GPTActivations(const GPTConfig& cfg, std::int64_t B, std::int64_t T,
                 Attention attention = Attention::Naive);
  std::int64_t B = 0, T = 0;
  Attention attention = Attention::Naive;  // what `att` holds (below)
  float* encoded = nullptr;    // (B, T, C)      token + position embeddings
  float* ln1 = nullptr;        // (L, B, T, C)
  float* ln1_mean = nullptr;   // (L, B, T)
  float* ln1_rstd = nullptr;   // (L, B, T)
  float* qkv = nullptr;        // (L, B, T, 3C)
  float* atty = nullptr;       // (L, B, T, C)   attention output before the projection
  float* att = nullptr;        // (L, B, H, T, T) softmaxed causal scores; Flash: (L, B, H, T) lse
  float* attproj = nullptr;    // (L, B, T, C)
  float* residual2 = nullptr;  // (L, B, T, C)   after attention + residual
  float* ln2 = nullptr;        // (L, B, T, C)
  float* ln2_mean = nullptr;   // (L, B, T)
  float* ln2_rstd = nullptr;   // (L, B, T)
  float* fch = nullptr;        // (L, B, T, 4C)
  float* fch_gelu = nullptr;   // (L, B, T, 4C)
  float* fcproj = nullptr;     // (L, B, T, C)
  float* residual3 = nullptr;  // (L, B, T, C)   the block's output
  float* lnf = nullptr;        // (B, T, C)
  float* lnf_mean = nullptr;   // (B, T)
  float* lnf_rstd = nullptr;   // (B, T)
  float* logits = nullptr;     // (B, T, V)      probabilities after a forward with targets
  float* losses = nullptr;     // (B, T)         per-position loss (unmasked)
  // MoE blocks (moe.hpp), stacked over L slots like the rest, allocated for an MoE config only.
  // N = B·T tokens, E experts, K = top-k, cap = moe_capacity(cfg, N), R = E·cap expert rows
  // (expert e's rows are [e·cap, e·cap + count[e])). A gradient instance uses the float buffers
  // as their gradients (probs: d(probs) then d(router logits)).
  std::int64_t moe_cap = 0;          // cap
  float moe_grad_scale = 1.f;        // the MoE losses' share of this micro-batch (model_backward)
  MoeDispatch* moe_dispatch = nullptr;  // non-null: the experts run elsewhere (expert parallelism)
  MoeRecord* moe_record = nullptr;      // non-null: each local MoE forward records its routing there
  float* moe_probs = nullptr;        // (L, N, E)  router softmax
  float* moe_lse = nullptr;          // (L, N)     logsumexp of the router logits (z-loss)
  float* moe_gate = nullptr;         // (L, N, K)  gate of each choice (renormalised for K > 1)
  float* moe_frac = nullptr;         // (L, E)     fraction of the N·K choices routed to e
  float* moe_loss = nullptr;         // (L, 2)     balancing loss, z-loss (coefficients applied)
  float* moe_xin = nullptr;          // (L, R, C)  gathered ln2 rows
  float* moe_h = nullptr;            // (L, R, 4C)
  float* moe_hg = nullptr;           // (L, R, 4C) gelu
  float* moe_y = nullptr;            // (L, R, C)  expert outputs
  std::int32_t* moe_expert = nullptr;  // (L, N, K) chosen experts, best first
  std::int32_t* moe_slot = nullptr;    // (L, N, K) expert row of each choice, -1 = dropped
  std::int32_t* moe_count = nullptr;   // (L, E)    tokens kept per expert (<= cap)
  std::int32_t* moe_token = nullptr;   // (L, R)    token of each expert row
  std::int64_t num_floats() const { return static_cast<std::int64_t>(storage_.size()); }
  /// Floats of `att` per layer: B·H·T·T (Naive) or B·H·T (Flash).
  std::int64_t att_layer_floats(const GPTConfig& cfg) const;
  void zero();

 private:
  std::vector<float> storage_;
  std::vector<std::int32_t> istorage_;
  mem::Block mem_;  // counted as activations (this thread's tag scope is not used)
};

// ---- layers (llm.c-style free functions; backward functions ACCUMULATE into gradients) --------

/// out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp: (B,T) ids in [0, V) (checked by the caller).
void encoder_forward(float* out, const std::int32_t* inp, const float* wte, const float* wpe,
                     std::int64_t B, std::int64_t T, std::int64_t C);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* inp,
                      std::int64_t B, std::int64_t T, std::int64_t C);

/// Lab 4's layernorm over rows, threaded over row chunks. inp, out (N, C); mean, rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, std::int64_t N, std::int64_t C);
/// Accumulates dinp (N, C), dw (C), db (C); dw/db reduce over fixed 64-row chunks, in order.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, std::int64_t N,
                        std::int64_t C);

/// out (N, OC) = inp (N, C) · weight (OC, C)^T + bias (OC) (bias may be null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::int64_t N, std::int64_t C, std::int64_t OC);
/// The same product through the decode GEMM (rowgemm.hpp; what matmul_forward does for N <= 4):
/// every output element is a sum over c in order, so row n of out is bit-identical whatever N and
/// the other rows are, and a batch of sequences' tokens (the serving engine's step, engine.hpp)
/// gives exactly the numbers of one token at a time (forward_cached), while each weight is read
/// from memory once for the whole batch. The weights are packed on the fly, a chunk of 16-column
/// panels at a time (matmul_packed_forward takes them packed once).
void matmul_rows_forward(float* out, const float* inp, const float* weight, const float* bias,
                         std::int64_t N, std::int64_t C, std::int64_t OC);
/// dinp (N,C) += dout·weight; dweight (OC,C) += dout^T·inp; dbias (OC) += column sums of dout
/// (dbias may be null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::int64_t N, std::int64_t C, std::int64_t OC);

/// Causal multi-head self-attention on packed q|k|v.
///   inp (B, T, 3C): q, k, v for every position, each (H, hs) with hs = C / H
///   att (B, H, T, T): softmax(q·k^T / sqrt(hs)) with the future masked (row t has t+1 entries)
///   out (B, T, C): att · v, heads side by side
/// Parallel over B×H; each (b, h) owns its rows of att and its slice of out.
/// Hint: for (b, h) and query t, q = inp[b, t, h*hs : (h+1)*hs], key t2 at offset C, value at 2C;
/// scores for t2 <= t only, then kernels::softmax_forward on the row, then out = sum_t2 att * v.
/// kind = Flash (given, not the student's): lab 4's kernels::flash_attention_forward, and att is
/// the log-sum-exp (B, H, T) instead.
void attention_forward(float* out, float* att, const float* inp, std::int64_t B, std::int64_t T,
                       std::int64_t C, std::int64_t H, Attention kind = Attention::Naive);
/// Backward of attention_forward: dinp (B,T,3C) += ...; datt (B,H,T,T) is scratch.
/// Hint: per (b, h, t): datt[t2] = dout_t · v_t2 and dv_t2 += att[t2] dout_t; then the softmax
/// backward dpre[t2] = att[t2] (datt[t2] - sum_j att[j] datt[j]); then with s = 1/sqrt(hs)
/// dq_t += s dpre[t2] k_t2 and dk_t2 += s dpre[t2] q_t. Each (b, h) writes only its own slices.
/// kind = Flash: lab 4's kernels::flash_attention_backward; att is the forward's log-sum-exp,
/// `out` (B, T, C) the forward's output (needed), datt unused.
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp,
                        const float* att, std::int64_t B, std::int64_t T, std::int64_t C,
                        std::int64_t H, Attention kind = Attention::Naive,
                        const float* out = nullptr);

/// Lab 4's GELU, threaded over fixed chunks. (n,)
void gelu_forward(float* out, const float* inp, std::int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n);

/// out = a + b, (n,).
void residual_forward(float* out, const float* a, const float* b, std::int64_t n);

/// Softmax cross-entropy of logits (N, V) against targets (N): logits becomes the probabilities,
/// losses[i] = -log p[i, targets[i]]. Returns sum_i mask[i] * losses[i] / sum_i mask[i]
/// (summed in double, in order; mask null = all ones). Targets outside [0, V) throw.
double crossentropy_forward(float* logits, float* losses, const std::int32_t* targets,
                            const float* mask, std::int64_t N, std::int64_t V);
/// dlogits (N, V) = (probs - onehot(target)) * mask / norm, written (not accumulated), with
/// norm = sum(mask) (mask_sum) by default. Gradient accumulation passes the whole batch's
/// mask_sum for each micro-batch (norm >= 0): every row gets exactly the value the whole batch
/// gives it, so the micro-batches' gradients add up to the whole batch's mean-loss gradient.
/// norm = 0 (nothing counted): dlogits = 0.
void crossentropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                           const float* mask, std::int64_t N, std::int64_t V, double norm = -1);
/// sum_i mask[i] over N positions (double, in order; mask null = all ones): the number of counted
/// targets, what the masked mean loss divides by.
double mask_sum(const float* mask, std::int64_t N);
/// sum_i mask[i] * losses[i] (double, in order; mask null = all ones), added to `acc`: summing the
/// micro-batches of a batch in row order gives exactly the numerator of the whole batch's loss.
double masked_loss_sum(const float* losses, const float* mask, std::int64_t N, double acc = 0.0);

/// The attention half of block l: residual2 = x_in + attproj(attention(qkv(ln1(x_in)))).
/// Hint: layer l's buffers start at l * (their per-layer size), e.g. a.qkv + l*N*3C with N = B*T,
/// and its weights at p.qkvw + l*3C*C; chain layernorm_forward, matmul_forward,
/// attention_forward, matmul_forward, residual_forward. The attention kernel is a.attention
/// (pass it on), and its saved buffer per layer a.att_layer_floats(cfg) floats: a.att + l * that.
void attention_block_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a,
                             std::int64_t l, const float* x_in);
/// The MLP half of block l: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
void mlp_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a, std::int64_t l);
/// Backward of mlp_forward: dresidual (B,T,C) holds d(residual3) and becomes d(residual2).
/// Hint: the backward kernels accumulate, so zero da's slices (fch_gelu, fch, ln2 of layer l)
/// first; go through the forward in reverse; layernorm_backward adds into dresidual itself (the
/// residual's identity path is already there).
void mlp_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g, const GPTActivations& a,
                  GPTActivations& da, std::int64_t l, float* dresidual);
/// Backward of attention_block_forward: dresidual holds d(residual2) and becomes d(x_in).
void attention_block_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g,
                              const GPTActivations& a, GPTActivations& da, std::int64_t l,
                              const float* x_in, float* dresidual);

/// One transformer block, layer l, on acts (positions 0..B*T): x_in is the residual stream
/// entering it (encoded or the previous block's residual3).
void block_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a, std::int64_t l,
                   const float* x_in);
/// Backward of block l: dresidual (B,T,C) holds d(block output) and becomes d(block input);
/// accumulates into the parameter gradients g; da is the activations' gradient scratch.
void block_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g, const GPTActivations& a,
                    GPTActivations& da, std::int64_t l, const float* x_in, float* dresidual);

// ---- where the parameters are: one block, the two ends ----------------------------------------

/// A view of the parameters (or gradients) of layers l0.. as if they were layers 0..: every
/// per-layer pointer advanced by l0 layers, the rest unchanged.
ParamPtrs shift_layers(const ParamPtrs& p, const GPTConfig& cfg, std::int64_t l0);

/// One block's activations (layer l of the stacked buffers of `a`, a GPTActivations of
/// cfg.n_layer layers) as layer 0 of a view: block_forward / block_backward with l = 0 on the view
/// compute exactly what they compute with l on `a`. The view owns nothing.
GPTActivations block_view(const GPTConfig& cfg, const GPTActivations& a, std::int64_t l);

/// Where the chain of blocks finds each block's parameters and puts its gradients, one block at a
/// time. The fused path views its flat buffers (FlatModel); ZeRO (zero.hpp) gathers a unit for
/// stage 3 and reduces each block's gradient as soon as the block's backward is done. Both run
/// the same block loop (blocks_forward / blocks_backward), with or without recompute.
class BlockAccess {
 public:
  virtual ~BlockAccess() = default;
  /// Block l's parameters as layer 0 of a ParamPtrs (only the 12 per-block fields are read).
  virtual ParamPtrs params(std::int64_t l) = 0;
  /// Done with block l's parameters until the next params(l) (ZeRO-3: frees the gathered unit).
  virtual void release_params(std::int64_t /*l*/) {}
  /// Block l's gradients as layer 0 of a ParamPtrs; block_backward accumulates into them.
  virtual ParamPtrs grads(std::int64_t l) = 0;
  /// Block l's gradients are complete (called right after its backward and release_params).
  virtual void grads_done(std::int64_t /*l*/) {}
};

/// The model's two ends, outside the chain of blocks: the embeddings (wte, wpe; wte is also the
/// tied LM head) and the final layernorm (lnfw, lnfb).
enum class ModelEnd { Embeddings, FinalNorm };

/// BlockAccess for the whole model: the blocks and the two ends, whose parameters and gradients
/// come as the fields of a ParamPtrs (wte/wpe or lnfw/lnfb). end_params(e) while e is held returns
/// the same parameters: the forward pass holds the embeddings from the LM head until the backward
/// pass has used them (model_backward releases them).
class ModelAccess : public BlockAccess {
 public:
  virtual ParamPtrs end_params(ModelEnd e) = 0;
  virtual void release_end(ModelEnd /*e*/) {}
  virtual ParamPtrs end_grads(ModelEnd e) = 0;
  /// The end's gradients are complete (the final layernorm's right after its backward, the
  /// embeddings' after encoder_backward, the last thing a backward pass does).
  virtual void end_grads_done(ModelEnd /*e*/) {}
  /// Micro-batch k of a step begins (accumulate_gradients calls it; ZeRO stores the first
  /// micro-batch's gradients and adds the later ones).
  virtual void begin_micro_batch(std::int64_t /*k*/) {}
};

/// ModelAccess of the fused path: views of one flat parameter buffer and of one gradient buffer
/// (ParamPtrs{} for a forward pass only). Block l is layer l of them (shift_layers).
class FlatModel final : public ModelAccess {
 public:
  FlatModel(const GPTConfig& cfg, const ParamPtrs& p, const ParamPtrs& g) : cfg_(cfg), p_(p), g_(g) {}
  ParamPtrs params(std::int64_t l) override { return shift_layers(p_, cfg_, l); }
  ParamPtrs grads(std::int64_t l) override { return shift_layers(g_, cfg_, l); }
  ParamPtrs end_params(ModelEnd) override { return p_; }
  ParamPtrs end_grads(ModelEnd) override { return g_; }

 private:
  GPTConfig cfg_;
  ParamPtrs p_, g_;
};

// ---- the one block loop, the one forward pass, the one backward pass ----------------------------

/// The block loop: blocks [s, e) of the model forward, block s + j on slot j of `seg` (a
/// GPTActivations of seg_cfg.n_layer >= e - s layers, through block_view), from the residual
/// stream x; each block's parameters come from acc.params and go back with acc.release_params.
/// Returns the output of block e - 1 (slot e - s - 1's residual3).
const float* blocks_forward(const GPTConfig& seg_cfg, BlockAccess& acc, GPTActivations& seg,
                            std::int64_t s, std::int64_t e, const float* x);
/// Backward of blocks_forward's blocks, right after it (seg holds their activations): block
/// s + j for j from e - s - 1 down to 0 with acc.params and acc.grads, then acc.release_params
/// and acc.grads_done. `dresidual` (B, T, C) holds d(output of block e - 1) and becomes d(x).
void blocks_backward(const GPTConfig& seg_cfg, BlockAccess& acc, const GPTActivations& seg,
                     GPTActivations& dseg, std::int64_t s, std::int64_t e, const float* x,
                     float* dresidual);

class RematActivations;  // remat.hpp: the blocks' activations under a recompute plan

/// What a pass keeps for the backward: either every block's activations (`acts`, with `dacts` for
/// their gradients: the plain path) or, under a recompute plan, a RematActivations (its checkpoints
/// and one segment; remat.hpp). Views only.
struct PassBuffers {
  GPTActivations* acts = nullptr;
  GPTActivations* dacts = nullptr;  // null: forward only
  RematActivations* remat = nullptr;
  static PassBuffers keep(GPTActivations& acts, GPTActivations* dacts = nullptr);
  static PassBuffers recompute(RematActivations& ra);
  std::int64_t B() const;
  std::int64_t T() const;
  /// The buffers of the head (encoded, lnf and its statistics, logits, losses) and their gradients.
  GPTActivations& head() const;
  GPTActivations& dhead() const;
  /// Where the encoder writes the blocks' input; the output of the last block after a forward.
  float* input() const;
  const float* output(const GPTConfig& cfg) const;
  /// The running d(residual stream) of the backward pass, (B, T, C).
  float* dresidual(const GPTConfig& cfg) const;
};

/// A (B, T) batch as pointers: inputs, targets (B*T each) and an optional mask (null: all ones).
/// train.hpp's micro_batch cuts a Batch into them.
struct MicroBatch {
  const std::int32_t* inputs = nullptr;
  const std::int32_t* targets = nullptr;
  const float* mask = nullptr;
  std::int64_t B = 0, T = 0;
};

/// THE forward pass (llm.c's gpt2_forward), for every path: the encoder (embeddings) into
/// buf.input(), the blocks (every activation kept, or under buf.remat's plan), and the head: final
/// layernorm, the tied LM head and, with targets, the masked cross-entropy (returns the masked
/// mean loss and leaves the probabilities in head().logits; without targets returns 0 and leaves
/// the logits). With targets the embeddings stay held for model_backward. Ids are not checked
/// here (the callers check them and name themselves).
double model_forward(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                     const MicroBatch& mb);
/// THE backward pass of the last model_forward with targets (llm.c's gpt2_backward): the head
/// (cross-entropy divided by `norm`, or by the micro-batch's mask sum when norm < 0; the LM head;
/// the final layernorm), the blocks in reverse (recomputing segments under a plan), the encoder.
/// ACCUMULATES into the gradients acc hands out.
void model_backward(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                    const MicroBatch& mb, double norm = -1);

// ---- the whole model on flat buffers ---------------------------------------------------------

/// Forward pass over inputs (B, T). With targets, returns the masked mean loss and leaves the
/// probabilities in acts.logits; without (nullptr), returns 0 and leaves the logits.
/// Throws mls::Error for T > block_size, ids out of range or acts of another (B, T).
double gpt_forward(const GPTParams& params, GPTActivations& acts, const std::int32_t* inputs,
                   const std::int32_t* targets, const float* mask, std::int64_t B, std::int64_t T);
/// Backward of the last gpt_forward with targets: ACCUMULATES into grads (zero them first).
/// dacts is scratch of the same (B, T). `norm` (>= 0) replaces the loss's divisor sum(mask): for
/// a micro-batch of a larger batch, pass the whole batch's mask_sum, and the gradients of the
/// micro-batches add up to the gradient of the whole batch's masked mean loss (crossentropy_backward).
void gpt_backward(const GPTParams& params, GPTGrads& grads, const GPTActivations& acts,
                  GPTActivations& dacts, const std::int32_t* inputs, const std::int32_t* targets,
                  const float* mask, double norm = -1);

// ---- optimisation ----------------------------------------------------------------------------

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; applied to the matrices (wte, wpe, the 4 weights)
};
/// Which tensors are decayed (2-D weights and embeddings; not biases or layernorm).
bool param_decays(int tensor_index);
/// AdamW on elements [0, n) of one contiguous run: moments m, v updated in place, bias
/// corrections c1 = 1/(1 - b1^t), c2 = 1/(1 - b2^t), decoupled weight decay wd. The one AdamW
/// kernel: adamw_update and the ZeRO trainer both call it, so their results are bit-identical.
void adamw_range(float* p, const float* g, float* m, float* v, std::int64_t n, float b1, float b2,
                 float c1, float c2, float lr, float eps, float wd);
/// One AdamW update of params from grads at learning rate `lr` (opt.lr ignored). Increments
/// state.step first (t = the new step). Hint: one parallel_for per tensor (param_offsets), so the
/// weight decay can depend on param_decays(tensor).
///   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  m̂ = m/(1-b1^t);  v̂ = v/(1-b2^t)
///   p -= lr (m̂ / (sqrt(v̂) + eps) + wd p)    (wd only where param_decays)
void adamw_update(GPTParams& params, const GPTGrads& grads, AdamWState& state,
                  const AdamWOptions& opt, double lr);
/// The global L2 norm of the gradients (double, fixed chunks, in order).
double grad_norm(const GPTGrads& grads);
/// Scales grads so their global norm is at most max_norm (<= 0: off). Returns the norm before.
double clip_grad_norm(GPTGrads& grads, double max_norm);
/// Linear warmup over `warmup` steps to lr_max, then cosine decay to lr_min at `total` steps
/// (constant lr_min after). step counts from 0.
double lr_schedule(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max,
                   double lr_min);

// ---- counts (closed forms) ---------------------------------------------------------------------

/// N of the PaLM formula: every parameter except the position embedding (a lookup, no matmul);
/// wte counts once, for the tied LM head's matmul. N = L(12C² + 13C) + V·C + 2C. With MoE blocks
/// N counts the active parameters (num_active_params: the router and K of the E experts).
std::int64_t flops_params(const GPTConfig& cfg);
/// Training FLOPs per token = 6N + 12·L·T·C (forward 2N + 4LTC for q·k and att·v (causal masking
/// not discounted), backward twice the forward).
double train_flops_per_token(const GPTConfig& cfg, std::int64_t T);

}  // namespace mls::llm
