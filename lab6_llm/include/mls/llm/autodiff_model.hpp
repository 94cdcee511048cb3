#pragma once
/// Lab 6: the same GPT written on lab 2's eager autodiff (`mls::autodiff::Var`), so a student watches
/// their own gradients train a transformer. It is the reference the fused path is checked
/// against: the same loss, and every parameter gradient within float32 tolerance; in float64 it
/// passes lab 2's gradcheck.
///
/// Parameters are 16 leaves (config.hpp order and shapes); layer l's slices are views of them.
#include <cstdint>
#include <vector>

#include "mls/autodiff/var.hpp"
#include "mls/llm/model.hpp"

namespace mls::llm::tape {

using mls::autodiff::Var;

/// The leaves of a config: the 16, plus the 5 MoE tensors for an MoE config (config.hpp).
std::size_t num_leaves(const GPTConfig& cfg);
/// The 16 (+ 5 MoE) parameters of `p` as eager leaves of `dtype` (Float32 or Float64) that require grad.
std::vector<Var> to_leaves(const GPTParams& p, DType dtype = DType::Float32);
/// The accumulated gradients of 16 leaves, flattened into the fused path's layout (float32).
GPTGrads grads_of(const GPTConfig& cfg, const std::vector<Var>& leaves);

/// Causal self-attention on q|k|v packed as qkv [B, T, 3C]: returns [B, T, C].
/// softmax(q k^T / sqrt(hs) + causal mask) v per head, heads side by side.
/// Hint: slice q, k, v from the last dim, reshape [B, T, H, hs] and permute to [B, H, T, hs];
/// the mask is a constant [T, T] of 0 and -inf (above the diagonal) added before softmax.
Var causal_self_attention(const Var& qkv, std::int64_t n_head);
/// x [B, T, C] -> x + attproj(attention(qkv(layernorm(x)))): the attention half of a block.
Var attention_sublayer(const Var& x, const Var& ln1w, const Var& ln1b, const Var& qkvw,
                       const Var& qkvb, const Var& projw, const Var& projb, std::int64_t n_head);
/// x [B, T, C] -> x + fcproj(gelu(fc(layernorm(x)))): the MLP half. Hint: linear() and lab 2's
/// layer_norm and gelu.
Var mlp_sublayer(const Var& x, const Var& ln2w, const Var& ln2b, const Var& fcw, const Var& fcb,
                 const Var& projw, const Var& projb);
/// y = x W^T + b for x [..., in], W [out, in], b [out].
Var linear(const Var& x, const Var& w, const Var& b);

/// x [B, T, C] -> x + moe(layernorm(x)) (moe.hpp) for one MoE block's router [E, C] and experts
/// fcw [E, 4C, C], fcb [E, 4C], projw [E, C, 4C], projb [E, C]: every expert on every token,
/// weighted by a [N, E] combine matrix that is zero where a token is not routed or dropped (the
/// routing from moe_route on the probabilities, a constant). Adds the balancing loss and the
/// z-loss to *moe_loss (when not null).
Var moe_sublayer(const GPTConfig& cfg, const Var& x, const Var& ln2w, const Var& ln2b,
                 const Var& router, const Var& fcw, const Var& fcb, const Var& projw,
                 const Var& projb, Var* moe_loss);
/// Logits [B, T, V] for int64 `inputs` [B, T]. For an MoE config, *moe_loss (when not null)
/// receives the MoE blocks' balancing and z-losses.
Var gpt_logits(const GPTConfig& cfg, const std::vector<Var>& params, const Tensor& inputs,
               Var* moe_loss = nullptr);
/// Masked mean cross-entropy: sum(mask * nll) / sum(mask), with targets [B, T] (int64) and
/// mask [B, T] (floating, the params' dtype); for an MoE config plus the MoE losses.
Var gpt_loss(const GPTConfig& cfg, const std::vector<Var>& params, const Tensor& inputs,
             const Tensor& targets, const Tensor& mask);
/// The same loss with every per-batch tensor a Var: inputs and targets int64 [B, T], mask [B, T]
/// and `scale` a scalar (both the params' dtype), scale = 1 / sum(mask), 0 for an empty mask
/// (`loss_scale`). The form lab 3's `compile` traces: nothing read on the host, and what changes
/// from step to step is an input of the graph, not a constant frozen into it (the Tensor overload
/// above calls this one). An MoE config routes on the host, which tracing refuses.
Var gpt_loss(const GPTConfig& cfg, const std::vector<Var>& params, const Var& inputs,
             const Var& targets, const Var& mask, const Var& scale);
/// 1 / sum(mask) (0 when it is 0) as a scalar of `dtype`: gpt_loss's `scale`.
Tensor loss_scale(const Tensor& mask, DType dtype);
/// gpt_logits with the ids as an int64 Var [B, T].
Var gpt_logits(const GPTConfig& cfg, const std::vector<Var>& params, const Var& inputs,
               Var* moe_loss = nullptr);

/// Int64 [B, T] tensor of ids; floating [B, T] mask.
Tensor ids_tensor(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T);
Tensor mask_tensor(const std::vector<float>& mask, std::int64_t B, std::int64_t T, DType dtype);

}  // namespace mls::llm::tape
