// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the GPT on lab 2's autodiff ops (path (a)).
#include "mls/llm/autodiff_model.hpp"

#include <cmath>
#include <limits>

#include "mls/common/error.hpp"
#include "mls/llm/moe.hpp"

namespace mls::llm::tape {

namespace {

namespace A = mls::autodiff;

/// Layer l of a stacked parameter [L, ...] as a Var of shape [...].
Var layer(const Var& stacked, std::int64_t l) {
  Shape s = stacked.shape();
  Var v = A::slice(stacked, 0, l, l + 1);
  s.erase(s.begin());
  return A::reshape(v, s);
}

/// Where leaf i starts in the flat buffer and its shape: the 16, then the MoE tensors.
std::int64_t leaf_offset(const GPTConfig& cfg, std::size_t i) {
  return i < kNumParamTensors ? param_offsets(cfg)[i] : moe_param_offsets(cfg)[i - kNumParamTensors];
}
Shape leaf_shape(const GPTConfig& cfg, std::size_t i) {
  return i < kNumParamTensors ? param_shapes(cfg)[i] : moe_param_shapes(cfg)[i - kNumParamTensors];
}

}  // namespace

std::size_t num_leaves(const GPTConfig& cfg) {
  return kNumParamTensors + (is_moe(cfg) ? kNumMoeTensors : 0);
}

std::vector<Var> to_leaves(const GPTParams& p, DType dtype) {
  std::vector<Var> out;
  for (std::size_t i = 0; i < num_leaves(p.config()); ++i) {
    const Shape s = leaf_shape(p.config(), i);
    const float* t = p.data() + leaf_offset(p.config(), i);
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    Tensor v = Tensor::from_vector(std::vector<float>(t, t + n), s).to(dtype);
    out.emplace_back(v, true);
  }
  return out;
}

GPTGrads grads_of(const GPTConfig& cfg, const std::vector<Var>& leaves) {
  MLS_CHECK(leaves.size() == num_leaves(cfg), "grads_of: ", leaves.size(), " leaves, expected ",
            num_leaves(cfg));
  GPTGrads g(cfg);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Var gi = leaves[i].grad();
    if (!gi.defined()) continue;
    const Tensor t = gi.value().to(DType::Float32).compact();
    const float* src = t.data<float>();
    std::copy(src, src + t.numel(), g.data() + leaf_offset(cfg, i));
  }
  return g;
}

Var linear(const Var& x, const Var& w, const Var& b) {
  return A::matmul(x, A::transpose(w, 0, 1)) + b;
}

Var causal_self_attention(const Var& qkv, std::int64_t n_head) {
  // BEGIN SOLUTION
  const std::int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3,
                     hs = C / n_head;
  auto heads = [&](std::int64_t which) {  // [B, H, T, hs]
    Var s = A::slice(qkv, 2, which * C, (which + 1) * C);
    return A::permute(A::reshape(s, {B, T, n_head, hs}), {0, 2, 1, 3});
  };
  Var q = heads(0), k = heads(1), v = heads(2);
  Var scores = A::matmul(q, A::transpose(k)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  // The causal mask: 0 where t2 <= t, -inf where t2 > t (the future), broadcast over B and H.
  std::vector<double> m(static_cast<std::size_t>(T * T), 0.0);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t t2 = t + 1; t2 < T; ++t2)
      m[t * T + t2] = -std::numeric_limits<double>::infinity();
  Var mask = A::constant_like(qkv, Tensor::from_vector(m, {T, T}).to(qkv.dtype()));
  Var att = A::softmax(scores + mask, -1);
  Var y = A::matmul(att, v);  // [B, H, T, hs]
  return A::reshape(A::permute(y, {0, 2, 1, 3}), {B, T, C});
  // END SOLUTION
}

Var attention_sublayer(const Var& x, const Var& ln1w, const Var& ln1b, const Var& qkvw,
                       const Var& qkvb, const Var& projw, const Var& projb, std::int64_t n_head) {
  Var h = A::layer_norm(x, ln1w, ln1b, 1e-5);
  return x + linear(causal_self_attention(linear(h, qkvw, qkvb), n_head), projw, projb);
}

Var mlp_sublayer(const Var& x, const Var& ln2w, const Var& ln2b, const Var& fcw, const Var& fcb,
                 const Var& projw, const Var& projb) {
  // BEGIN SOLUTION
  Var h = A::layer_norm(x, ln2w, ln2b, 1e-5);
  return x + linear(A::gelu(linear(h, fcw, fcb)), projw, projb);
  // END SOLUTION
}

Var moe_sublayer(const GPTConfig& cfg, const Var& x, const Var& ln2w, const Var& ln2b,
                 const Var& router, const Var& fcw, const Var& fcb, const Var& projw,
                 const Var& projb, Var* moe_loss) {
  const std::int64_t B = x.shape()[0], T = x.shape()[1], C = x.shape()[2], N = B * T;
  const std::int64_t E = cfg.moe_experts, K = cfg.moe_top_k, cap = moe_capacity(cfg, N);
  Var h = A::reshape(A::layer_norm(x, ln2w, ln2b, 1e-5), {N, C});
  Var z = A::matmul(h, A::transpose(router, 0, 1));  // [N, E]
  Var probs = A::softmax(z, -1);
  // The routing is discrete (no gradient): the student's moe_route on the probabilities decides
  // which choices exist (sel) and which are kept (keep), as 0/1 constants [N, E].
  const Tensor pv = probs.value().to(DType::Float32).compact();
  std::vector<std::int32_t> expert(static_cast<std::size_t>(N * K)), slot(expert.size()),
      count(static_cast<std::size_t>(E)), token(static_cast<std::size_t>(E * cap));
  std::vector<float> gate(expert.size());
  moe_route(pv.data<float>(), N, E, K, cap, expert.data(), gate.data(), slot.data(), count.data(),
            token.data());
  std::vector<double> sel(static_cast<std::size_t>(N * E), 0.0), keep(sel.size(), 0.0),
      frac(static_cast<std::size_t>(E), 0.0);
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t e = expert[static_cast<std::size_t>(t * K + k)];
      sel[static_cast<std::size_t>(t * E + e)] = 1.0;
      if (slot[static_cast<std::size_t>(t * K + k)] >= 0) keep[static_cast<std::size_t>(t * E + e)] = 1.0;
      frac[static_cast<std::size_t>(e)] += 1.0 / static_cast<double>(N * K);
    }
  auto constant = [&](const std::vector<double>& v, Shape s) {
    return A::constant_like(x, Tensor::from_vector(v, s).to(x.dtype()));
  };
  // Gates: the probability (K = 1) or the probability over the sum of the K chosen (K > 1).
  Var combine = constant(keep, {N, E}) * probs;
  if (K > 1) combine = combine / A::sum(constant(sel, {N, E}) * probs, {-1}, true);
  Var out;
  for (std::int64_t e = 0; e < E; ++e) {
    Var y = linear(A::gelu(linear(h, layer(fcw, e), layer(fcb, e))), layer(projw, e), layer(projb, e));
    Var term = A::slice(combine, 1, e, e + 1) * y;
    out = e == 0 ? term : out + term;
  }
  if (moe_loss) {
    Var aux = A::sum(A::mean(probs, {0}) * constant(frac, {E})) *
              (cfg.moe_aux_coef * static_cast<double>(E));
    Var lse = A::logsumexp(z, -1);
    Var zl = A::mean(lse * lse) * cfg.moe_z_coef;
    *moe_loss = moe_loss->defined() ? *moe_loss + aux + zl : aux + zl;
  }
  return x + A::reshape(out, {B, T, C});
}

Var gpt_logits(const GPTConfig& cfg, const std::vector<Var>& P, const Tensor& inputs,
               Var* moe_loss) {
  MLS_CHECK(!P.empty(), "gpt_logits: no parameters, expected ", num_leaves(cfg));
  return gpt_logits(cfg, P, A::constant_like(P[0], inputs), moe_loss);
}

Var gpt_logits(const GPTConfig& cfg, const std::vector<Var>& P, const Var& idx, Var* moe_loss) {
  MLS_CHECK(cfg.moe_shards == 1, "gpt_logits: shard ", cfg.moe_shard, " of ", cfg.moe_shards,
            " of the experts, expected the whole model (the autodiff model runs every expert here)");
  MLS_CHECK(P.size() == num_leaves(cfg), "gpt_logits: ", P.size(), " parameters, expected ",
            num_leaves(cfg));
  MLS_CHECK(idx.shape().size() == 2, "gpt_logits: inputs of shape ", shape_str(idx.shape()),
            ", expected [B, T]");
  const std::int64_t T = idx.shape()[1];
  MLS_CHECK(T > 0 && T <= cfg.block_size, "gpt_logits: T = ", T,
            ", expected 0 < T <= block_size = ", cfg.block_size);
  Var pos = A::constant_like(P[0], Tensor::arange(T, DType::Int64));
  Var x = A::embedding(P[0], idx) + A::embedding(P[1], pos);
  for (std::int64_t l = 0; l < cfg.n_layer; ++l) {
    x = attention_sublayer(x, layer(P[2], l), layer(P[3], l), layer(P[4], l), layer(P[5], l),
                           layer(P[6], l), layer(P[7], l), cfg.n_head);
    if (is_moe_block(cfg, l)) {
      const std::int64_t m = moe_blocks_before(cfg, l);
      x = moe_sublayer(cfg, x, layer(P[8], l), layer(P[9], l), layer(P[16 + kMoeRouter], m),
                       layer(P[16 + kMoeFcw], m), layer(P[16 + kMoeFcb], m),
                       layer(P[16 + kMoeFcprojw], m), layer(P[16 + kMoeFcprojb], m), moe_loss);
      continue;
    }
    const std::int64_t d = l - moe_blocks_before(cfg, l);  // the MLP tensors stack dense blocks
    x = mlp_sublayer(x, layer(P[8], l), layer(P[9], l), layer(P[10], d), layer(P[11], d),
                     layer(P[12], d), layer(P[13], d));
  }
  x = A::layer_norm(x, P[14], P[15], 1e-5);
  return A::matmul(x, A::transpose(P[0], 0, 1));  // the tied LM head
}

Tensor loss_scale(const Tensor& mask, DType dtype) {
  double den = 0.0;
  const Tensor md = mask.to(DType::Float64).compact();
  for (std::int64_t i = 0; i < md.numel(); ++i) den += md.data<double>()[i];
  return Tensor::scalar(den > 0 ? 1.0 / den : 0.0, dtype);
}

Var gpt_loss(const GPTConfig& cfg, const std::vector<Var>& P, const Tensor& inputs,
             const Tensor& targets, const Tensor& mask) {
  MLS_CHECK(!P.empty(), "gpt_loss: no parameters, expected ", num_leaves(cfg));
  const DType dt = P[0].dtype();
  return gpt_loss(cfg, P, A::constant_like(P[0], inputs), A::constant_like(P[0], targets),
                  A::constant_like(P[0], mask.to(dt)), A::constant_like(P[0], loss_scale(mask, dt)));
}

Var gpt_loss(const GPTConfig& cfg, const std::vector<Var>& P, const Var& inputs,
             const Var& targets, const Var& mask, const Var& scale) {
  Var moe_loss;
  Var logits = gpt_logits(cfg, P, inputs, is_moe(cfg) ? &moe_loss : nullptr);
  Var oh = A::one_hot(targets, cfg.vocab_size, P[0].dtype());
  Var nll = -A::sum(A::log_softmax(logits, -1) * oh, {-1});  // [B, T]
  Var ce = A::sum(nll * mask) * scale;
  return moe_loss.defined() ? ce + moe_loss : ce;  // MoE: plus the balancing and z-losses
}

Tensor ids_tensor(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T) {
  std::vector<std::int64_t> v(ids.begin(), ids.end());
  return Tensor::from_vector(v, {B, T});
}

Tensor mask_tensor(const std::vector<float>& mask, std::int64_t B, std::int64_t T, DType dtype) {
  return Tensor::from_vector(mask, {B, T}).to(dtype);
}

}  // namespace mls::llm::tape
