// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the GPT on lab 2's autodiff ops (path (a)).
#include "mls/llm/autodiff_model.hpp"

#include <cmath>
#include <limits>

#include "mls/common/error.hpp"

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

}  // namespace

std::vector<Var> to_leaves(const GPTParams& p, DType dtype) {
  const auto shapes = param_shapes(p.config());
  std::vector<Var> out;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const float* t = p.tensor(i);
    std::int64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    Tensor v = Tensor::from_vector(std::vector<float>(t, t + n), shapes[i]).to(dtype);
    out.emplace_back(v, true);
  }
  return out;
}

GPTGrads grads_of(const GPTConfig& cfg, const std::vector<Var>& leaves) {
  MLS_CHECK(leaves.size() == static_cast<std::size_t>(kNumParamTensors),
            "grads_of: ", leaves.size(), " leaves, expected ", kNumParamTensors);
  GPTGrads g(cfg);
  for (int i = 0; i < kNumParamTensors; ++i) {
    Var gi = leaves[i].grad();
    if (!gi.defined()) continue;
    const Tensor t = gi.value().to(DType::Float32).compact();
    const float* src = t.data<float>();
    std::copy(src, src + t.numel(), g.tensor(i));
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

Var gpt_logits(const GPTConfig& cfg, const std::vector<Var>& P, const Tensor& inputs) {
  MLS_CHECK(P.size() == static_cast<std::size_t>(kNumParamTensors), "gpt_logits: ", P.size(),
            " parameters, expected ", kNumParamTensors);
  MLS_CHECK(inputs.ndim() == 2, "gpt_logits: inputs of shape ", shape_str(inputs.shape()),
            ", expected [B, T]");
  const std::int64_t T = inputs.shape()[1];
  MLS_CHECK(T > 0 && T <= cfg.block_size, "gpt_logits: T = ", T,
            ", expected 0 < T <= block_size = ", cfg.block_size);
  Var idx = A::constant_like(P[0], inputs);
  Var pos = A::constant_like(P[0], Tensor::arange(T, DType::Int64));
  Var x = A::embedding(P[0], idx) + A::embedding(P[1], pos);
  for (std::int64_t l = 0; l < cfg.n_layer; ++l) {
    x = attention_sublayer(x, layer(P[2], l), layer(P[3], l), layer(P[4], l), layer(P[5], l),
                           layer(P[6], l), layer(P[7], l), cfg.n_head);
    x = mlp_sublayer(x, layer(P[8], l), layer(P[9], l), layer(P[10], l), layer(P[11], l),
                     layer(P[12], l), layer(P[13], l));
  }
  x = A::layer_norm(x, P[14], P[15], 1e-5);
  return A::matmul(x, A::transpose(P[0], 0, 1));  // the tied LM head
}

Var gpt_loss(const GPTConfig& cfg, const std::vector<Var>& P, const Tensor& inputs,
             const Tensor& targets, const Tensor& mask) {
  Var logits = gpt_logits(cfg, P, inputs);
  Var oh = A::one_hot(A::constant_like(P[0], targets), cfg.vocab_size, P[0].dtype());
  Var nll = -A::sum(A::log_softmax(logits, -1) * oh, {-1});  // [B, T]
  Var m = A::constant_like(P[0], mask.to(P[0].dtype()));
  double den = 0.0;
  const Tensor md = mask.to(DType::Float64).compact();
  for (std::int64_t i = 0; i < md.numel(); ++i) den += md.data<double>()[i];
  return A::sum(nll * m) * (den > 0 ? 1.0 / den : 0.0);
}

Tensor ids_tensor(const std::vector<std::int32_t>& ids, std::int64_t B, std::int64_t T) {
  std::vector<std::int64_t> v(ids.begin(), ids.end());
  return Tensor::from_vector(v, {B, T});
}

Tensor mask_tensor(const std::vector<float>& mask, std::int64_t B, std::int64_t T, DType dtype) {
  return Tensor::from_vector(mask, {B, T}).to(dtype);
}

}  // namespace mls::llm::tape
