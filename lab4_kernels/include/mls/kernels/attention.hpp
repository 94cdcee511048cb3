#pragma once
/// Lab 4: tiled ("flash") causal self-attention on the CPU, forward and backward
/// (FlashAttention-2, Dao 2023), in llm.c's layout: q|k|v packed per position.
///
/// The naive kernel (lab 6's attention_forward) forms the whole (T, T) score matrix of every
/// head, softmaxes it in place and keeps it for the backward pass: O(B·H·T²) floats of
/// activations. Here queries go in blocks of `block_q` rows; for each block the keys and values
/// stream past in blocks of `block_k`, and each row keeps only a running max m, a running sum l
/// of exp(score - m) and an unnormalised output (the online softmax, online_softmax_update).
/// The forward pass saves out and the log-sum-exp lse = m + log l per row, (B, H, T): O(B·H·T)
/// floats. The backward pass recomputes each block of scores from q, k and lse
/// (P = exp(S - lse)) instead of reading a saved T × T matrix.
///
/// Threads (common's pool): the forward pass over (batch, head, query block), the backward pass
/// over (batch, head) (each head's key blocks in order, so dq needs no atomics). The per-row
/// results do not depend on the thread count. The inner products are 16-float vector tiles
/// (GCC vector extensions), compiled for AVX-512, AVX2 and baseline x86-64 (target_clones; the
/// loader picks the best for the CPU), as the fused kernels (fused.hpp).
namespace mls::kernels {

/// Student: one step of the online softmax for one query row and one block of keys.
///   s (n,): this row's scores against the block, already scaled (n >= 1, finite or -inf);
///   m, l: the running max and the running sum of exp(score - m) over the earlier blocks of the
///         row (m = -inf and l = 0 before the first block).
/// On return m = max(m_old, max_j s[j]), s[j] = exp(s[j] - m) (the block's probabilities before
/// normalisation), l = l_old · alpha + sum_j s[j], and the function returns
/// alpha = exp(m_old - m) (0 when m_old = -inf): the factor by which the caller rescales the
/// row's output accumulator before adding this block's s · V.
/// Hint: three loops (max, exp and sum, rescale l); mls::fast_expf vectorises; a row whose
/// scores are all -inf keeps m = -inf, so use exp(s - m) only where m is finite.
float online_softmax_update(float* s, long n, float& m, float& l);

/// Causal (or full, causal = false) multi-head self-attention, tiled:
///   inp (B, T, 3C): q, k, v of every position, each (H, hs) with hs = C / H
///   out (B, T, C):  softmax(q·kᵀ / sqrt(hs)) · v, heads side by side (written)
///   lse (B, H, T):  log sum_t2 exp(q_t · k_t2 / sqrt(hs)) per row, saved for the backward pass
/// Any T >= 1 and hs >= 1 (odd head sizes too); block_q, block_k >= 1 (64 is a good size).
/// Throws mls::Error for non-positive sizes, C % H != 0 or non-positive block sizes.
void flash_attention_forward(float* out, float* lse, const float* inp, long B, long T, long C,
                             long H, bool causal = true, long block_q = 64, long block_k = 64);

/// Backward of flash_attention_forward: dinp (B, T, 3C) += the gradients of q, k and v, given
/// dout (B, T, C), the forward's inputs inp, output out and lse. With P = exp(S - lse) (S the
/// scaled scores), dP = dout · vᵀ and D = rowsum(dout ⊙ out):
///   dv += Pᵀ dout,  dS = P ⊙ (dP - D),  dq += dS · k / sqrt(hs),  dk += dSᵀ · q / sqrt(hs).
/// Same checks as the forward pass.
void flash_attention_backward(float* dinp, const float* dout, const float* inp, const float* out,
                              const float* lse, long B, long T, long C, long H, bool causal = true,
                              long block_q = 64, long block_k = 64);

}  // namespace mls::kernels
