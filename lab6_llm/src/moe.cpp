// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: mixture of experts — routing with capacity, the balancing loss, the fused MoE MLP.
#include "mls/llm/moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"

namespace mls::llm {

// ---- the student's three functions -------------------------------------------------------------

std::int64_t moe_route(const float* probs, std::int64_t N, std::int64_t E, std::int64_t K,
                       std::int64_t cap, std::int32_t* expert, float* gate, std::int32_t* slot,
                       std::int32_t* count, std::int32_t* token) {
  MLS_CHECK(N >= 0 && E >= 1 && K >= 1 && K <= E && cap >= 1, "moe_route: N = ", N, ", E = ", E,
            ", K = ", K, ", cap = ", cap, ", expected N >= 0, 1 <= K <= E and cap >= 1");
  // BEGIN SOLUTION
  // Top-k of each row: K passes of "the largest not yet taken" (strict >, so ties go to the
  // lower expert), then the gates.
  for (std::int64_t t = 0; t < N; ++t) {
    const float* p = probs + t * E;
    std::int32_t* ex = expert + t * K;
    float* g = gate + t * K;
    double sum = 0.0;
    for (std::int64_t k = 0; k < K; ++k) {
      std::int64_t best = -1;
      for (std::int64_t e = 0; e < E; ++e) {
        if (std::find(ex, ex + k, static_cast<std::int32_t>(e)) != ex + k) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      ex[k] = static_cast<std::int32_t>(best);
      g[k] = p[best];
      sum += p[best];
    }
    if (K > 1)
      for (std::int64_t k = 0; k < K; ++k) g[k] = static_cast<float>(g[k] / sum);
  }
  // Capacity: the rows are claimed choice-major, tokens in order within a choice.
  std::fill(count, count + E, 0);
  std::int64_t dropped = 0;
  for (std::int64_t k = 0; k < K; ++k) {
    for (std::int64_t t = 0; t < N; ++t) {
      const std::int32_t e = expert[t * K + k];
      if (count[e] < cap) {
        const std::int64_t row = e * cap + count[e];
        slot[t * K + k] = static_cast<std::int32_t>(row);
        token[row] = static_cast<std::int32_t>(t);
        ++count[e];
      } else {
        slot[t * K + k] = -1;
        ++dropped;
      }
    }
  }
  return dropped;
  // END SOLUTION
}

double moe_balance_loss_forward(const float* probs, const std::int32_t* expert, std::int64_t N,
                                std::int64_t E, std::int64_t K, double coef, float* frac) {
  // BEGIN SOLUTION
  std::vector<double> routed(static_cast<std::size_t>(E), 0.0), mean(static_cast<std::size_t>(E), 0.0);
  for (std::int64_t i = 0; i < N * K; ++i) routed[static_cast<std::size_t>(expert[i])] += 1.0;
  for (std::int64_t t = 0; t < N; ++t)
    for (std::int64_t e = 0; e < E; ++e) mean[static_cast<std::size_t>(e)] += probs[t * E + e];
  double loss = 0.0;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = N > 0 ? routed[static_cast<std::size_t>(e)] / static_cast<double>(N * K) : 0.0;
    const double P = N > 0 ? mean[static_cast<std::size_t>(e)] / static_cast<double>(N) : 0.0;
    frac[e] = static_cast<float>(f);
    loss += f * P;
  }
  return coef * static_cast<double>(E) * loss;
  // END SOLUTION
}

void moe_balance_loss_backward(float* dprobs, const float* frac, std::int64_t N, std::int64_t E,
                               double coef, float scale) {
  // BEGIN SOLUTION
  if (N == 0) return;
  for (std::int64_t e = 0; e < E; ++e) {
    const float d = static_cast<float>(static_cast<double>(scale) * coef * static_cast<double>(E) *
                                       frac[e] / static_cast<double>(N));
    for (std::int64_t t = 0; t < N; ++t) dprobs[t * E + e] += d;
  }
  // END SOLUTION
}

// ---- the pieces of the fused MoE MLP (the single-rank path and expert parallelism share them) ----

void moe_router_softmax(float* probs, float* lse, std::int64_t N, std::int64_t E) {
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* z = probs + t * E;
      const float mx = *std::max_element(z, z + E);
      double s = 0.0;
      for (std::int64_t e = 0; e < E; ++e) s += std::exp(static_cast<double>(z[e]) - mx);
      const double l = mx + std::log(s);
      lse[t] = static_cast<float>(l);
      for (std::int64_t e = 0; e < E; ++e) z[e] = static_cast<float>(std::exp(z[e] - l));
    }
  });
}

void moe_experts_forward(const ParamPtrs& p, std::int64_t E, std::int64_t cap, const std::int32_t* count,
                         const float* xin, float* h, float* hg, float* y, std::int64_t C) {
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t n = count[e], r = e * cap;
    if (n == 0) continue;
    matmul_forward(h + r * 4 * C, xin + r * C, p.moe_fcw + e * 4 * C * C, p.moe_fcb + e * 4 * C, n, C, 4 * C);
    gelu_forward(hg + r * 4 * C, h + r * 4 * C, n * 4 * C);
    matmul_forward(y + r * C, hg + r * 4 * C, p.moe_fcprojw + e * C * 4 * C, p.moe_fcprojb + e * C, n, 4 * C, C);
  }
}

void moe_experts_backward(const ParamPtrs& p, ParamPtrs& g, std::int64_t E, std::int64_t cap,
                          const std::int32_t* count, const float* xin, const float* h, const float* hg,
                          const float* dy, float* dxin, float* dh, float* dhg, std::int64_t C) {
  std::fill(dhg, dhg + E * cap * 4 * C, 0.f);
  std::fill(dxin, dxin + E * cap * C, 0.f);
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int64_t n = count[e], r = e * cap;
    if (n == 0) continue;
    matmul_backward(dhg + r * 4 * C, g.moe_fcprojw + e * C * 4 * C, g.moe_fcprojb + e * C, dy + r * C,
                    hg + r * 4 * C, p.moe_fcprojw + e * C * 4 * C, n, 4 * C, C);
    std::fill(dh + r * 4 * C, dh + (r + n) * 4 * C, 0.f);
    gelu_backward(dh + r * 4 * C, h + r * 4 * C, dhg + r * 4 * C, n * 4 * C);
    matmul_backward(dxin + r * C, g.moe_fcw + e * 4 * C * C, g.moe_fcb + e * 4 * C, dh + r * C * 4, xin + r * C,
                    p.moe_fcw + e * 4 * C * C, n, C, 4 * C);
  }
}

void moe_gates_backward(float* dp, const float* probs, const std::int32_t* expert, const float* gate,
                        const float* dgate, std::int64_t N, std::int64_t E, std::int64_t K) {
  std::fill(dp, dp + N * E, 0.f);
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int32_t* ex = expert + t * K;
      const float* gt = gate + t * K;
      const float* dg = dgate + t * K;
      float* d = dp + t * E;
      if (K == 1) {
        d[ex[0]] += dg[0];
        continue;
      }
      // g_j = p_j / S over the K choices: dp_j = (dg_j - Σ_k dg_k g_k) / S
      double S = 0.0, dot = 0.0;
      for (std::int64_t k = 0; k < K; ++k) {
        S += probs[t * E + ex[k]];
        dot += static_cast<double>(dg[k]) * gt[k];
      }
      for (std::int64_t k = 0; k < K; ++k) d[ex[k]] += static_cast<float>((dg[k] - dot) / S);
    }
  });
}

void moe_router_softmax_backward(float* dp, const float* probs, const float* lse, std::int64_t N,
                                 std::int64_t E, float zc) {
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const float* pr = probs + t * E;
      float* d = dp + t * E;
      float s = 0.f;
      for (std::int64_t e = 0; e < E; ++e) s += pr[e] * d[e];
      const float zt = zc * lse[t];
      for (std::int64_t e = 0; e < E; ++e) d[e] = pr[e] * (d[e] - s) + zt * pr[e];
    }
  });
}

// ---- the fused MoE MLP ---------------------------------------------------------------------------

void moe_mlp_forward(const GPTConfig& cfg, const ParamPtrs& p, GPTActivations& a_all,
                     std::int64_t l) {
  MLS_CHECK(a_all.moe_probs != nullptr && p.moe_router != nullptr,
            "moe_mlp_forward: block ", l, " needs an MoE config's activations and a block view");
  GPTActivations a = block_view(cfg, a_all, l);
  const std::int64_t N = a.B * a.T, C = cfg.n_embd, E = cfg.moe_experts, K = cfg.moe_top_k,
                     cap = a.moe_cap;
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, N, C);
  if (a.moe_dispatch) {  // the experts run elsewhere (expert parallelism: moe_ep.hpp)
    a.moe_dispatch->forward(p, a.ln2, a.fcproj, N, a.moe_loss);
    residual_forward(a.residual3, a.residual2, a.fcproj, N * C);
    return;
  }
  MLS_CHECK(cfg.moe_shards == 1, "moe_mlp_forward: block ", l, " holds shard ", cfg.moe_shard, " of ",
            cfg.moe_shards, " of the experts, expected an expert-parallel dispatch (moe_ep.hpp) to run them");
  // The router: logits (N, E), then a softmax per row in place, keeping logsumexp for the z-loss.
  matmul_forward(a.moe_probs, a.ln2, p.moe_router, nullptr, N, C, E);
  moe_router_softmax(a.moe_probs, a.moe_lse, N, E);
  moe_route(a.moe_probs, N, E, K, cap, a.moe_expert, a.moe_gate, a.moe_slot, a.moe_count,
            a.moe_token);
  a.moe_loss[0] = static_cast<float>(
      moe_balance_loss_forward(a.moe_probs, a.moe_expert, N, E, K, cfg.moe_aux_coef, a.moe_frac));
  double zsum = 0.0;
  for (std::int64_t t = 0; t < N; ++t) zsum += static_cast<double>(a.moe_lse[t]) * a.moe_lse[t];
  a.moe_loss[1] = static_cast<float>(N > 0 ? cfg.moe_z_coef * zsum / static_cast<double>(N) : 0.0);
  if (a.moe_record) a.moe_record->blocks[p.moe_router] = moe_block_stats(cfg, a, l);
  // Dispatch: gather each expert's rows.
  parallel_for(0, E * cap, 64, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      if (r % cap < a.moe_count[r / cap])
        std::memcpy(a.moe_xin + r * C, a.ln2 + static_cast<std::int64_t>(a.moe_token[r]) * C,
                    sizeof(float) * C);
  });
  // The experts: one GEMM per expert and layer on its rows.
  moe_experts_forward(p, E, cap, a.moe_count, a.moe_xin, a.moe_h, a.moe_hg, a.moe_y, C);
  // Combine: each token's kept choices weighted by their gates, choices in order.
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* o = a.fcproj + t * C;
      std::fill(o, o + C, 0.f);
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t s = a.moe_slot[t * K + k];
        if (s < 0) continue;
        const float g = a.moe_gate[t * K + k];
        const float* y = a.moe_y + s * C;
        for (std::int64_t c = 0; c < C; ++c) o[c] += g * y[c];
      }
    }
  });
  residual_forward(a.residual3, a.residual2, a.fcproj, N * C);
}

void moe_mlp_backward(const GPTConfig& cfg, const ParamPtrs& p, ParamPtrs& g,
                      const GPTActivations& a_all, GPTActivations& da_all, std::int64_t l,
                      float* dresidual) {
  const GPTActivations a = block_view(cfg, a_all, l);
  GPTActivations da = block_view(cfg, da_all, l);
  const std::int64_t N = a.B * a.T, C = cfg.n_embd, E = cfg.moe_experts, K = cfg.moe_top_k,
                     cap = a.moe_cap, R = E * cap;
  const float scale = da.moe_grad_scale;
  if (a.moe_dispatch) {  // expert parallelism: d(ln2) from the dispatch, then the layernorm
    a.moe_dispatch->backward(p, g, dresidual, da.ln2, N, scale);
    layernorm_backward(dresidual, g.ln2w, g.ln2b, da.ln2, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    return;
  }
  // Combine backward: dy of each kept row = gate · dout; dgate = dout · y.
  float* dy = da.moe_y;
  float* dgate = da.moe_gate;
  std::fill(dy, dy + R * C, 0.f);
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const float* d = dresidual + t * C;
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t s = a.moe_slot[t * K + k];
        if (s < 0) {
          dgate[t * K + k] = 0.f;
          continue;
        }
        const float gt = a.moe_gate[t * K + k];
        const float* y = a.moe_y + s * C;
        float* dys = dy + s * C;
        float dot = 0.f;
        for (std::int64_t c = 0; c < C; ++c) {
          dot += d[c] * y[c];
          dys[c] = gt * d[c];
        }
        dgate[t * K + k] = dot;
      }
    }
  });
  // The experts backward, on their rows.
  moe_experts_backward(p, g, E, cap, a.moe_count, a.moe_xin, a.moe_h, a.moe_hg, dy, da.moe_xin, da.moe_h,
                       da.moe_hg, C);
  // Dispatch backward: scatter the rows' gradients back to their tokens (choices in order).
  float* dln2 = da.ln2;
  parallel_for(0, N, 64, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      float* d = dln2 + t * C;
      std::fill(d, d + C, 0.f);
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t s = a.moe_slot[t * K + k];
        if (s < 0) continue;
        const float* dx = da.moe_xin + s * C;
        for (std::int64_t c = 0; c < C; ++c) d[c] += dx[c];
      }
    }
  });
  // The gates into the router probabilities, the balancing loss, then the softmax and z-loss.
  float* dp = da.moe_probs;
  moe_gates_backward(dp, a.moe_probs, a.moe_expert, a.moe_gate, dgate, N, E, K);
  moe_balance_loss_backward(dp, a.moe_frac, N, E, cfg.moe_aux_coef, scale);
  const float zc = N > 0 ? static_cast<float>(2.0 * cfg.moe_z_coef * scale / static_cast<double>(N)) : 0.f;
  moe_router_softmax_backward(dp, a.moe_probs, a.moe_lse, N, E, zc);
  matmul_backward(dln2, g.moe_router, nullptr, dp, a.ln2, p.moe_router, N, C, E);
  layernorm_backward(dresidual, g.ln2w, g.ln2b, dln2, a.residual2, p.ln2w, a.ln2_mean, a.ln2_rstd,
                     N, C);
}

void moe_token_forward(const GPTConfig& cfg, const ParamPtrs& p, const float* x, float* out) {
  MLS_CHECK(p.moe_router != nullptr, "moe_token_forward: not an MoE block's view");
  MLS_CHECK(cfg.moe_shards == 1, "moe_token_forward: shard ", cfg.moe_shard, " of ", cfg.moe_shards,
            " of the experts, expected the whole model (load the gathered checkpoint)");
  const std::int64_t C = cfg.n_embd, E = cfg.moe_experts, K = cfg.moe_top_k;
  std::vector<float> probs(static_cast<std::size_t>(E)), gate(static_cast<std::size_t>(K)),
      h(static_cast<std::size_t>(4 * C)), hg(h.size()), y(static_cast<std::size_t>(C));
  std::vector<std::int32_t> expert(static_cast<std::size_t>(K)), slot(expert.size()),
      count(static_cast<std::size_t>(E)), token(static_cast<std::size_t>(E));
  matmul_forward(probs.data(), x, p.moe_router, nullptr, 1, C, E);
  const float mx = *std::max_element(probs.begin(), probs.end());
  double s = 0.0;
  for (float z : probs) s += std::exp(static_cast<double>(z) - mx);
  const double lse = mx + std::log(s);
  for (float& z : probs) z = static_cast<float>(std::exp(z - lse));
  moe_route(probs.data(), 1, E, K, 1, expert.data(), gate.data(), slot.data(), count.data(),
            token.data());
  std::fill(out, out + C, 0.f);
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t e = expert[static_cast<std::size_t>(k)];
    matmul_forward(h.data(), x, p.moe_fcw + e * 4 * C * C, p.moe_fcb + e * 4 * C, 1, C, 4 * C);
    gelu_forward(hg.data(), h.data(), 4 * C);
    matmul_forward(y.data(), hg.data(), p.moe_fcprojw + e * C * 4 * C, p.moe_fcprojb + e * C, 1,
                   4 * C, C);
    for (std::int64_t c = 0; c < C; ++c) out[c] += gate[static_cast<std::size_t>(k)] * y[static_cast<std::size_t>(c)];
  }
}

// ---- what the last forward routed ---------------------------------------------------------------

MoeBlockStats moe_block_stats(const GPTConfig& cfg, const GPTActivations& v, std::int64_t layer) {
  MoeBlockStats s;
  s.layer = layer;
  s.choices = v.B * v.T * cfg.moe_top_k;
  std::int64_t kept = 0;
  for (std::int64_t e = 0; e < cfg.moe_experts; ++e) {
    s.tokens.push_back(v.moe_count[e]);
    kept += v.moe_count[e];
  }
  s.dropped = s.choices - kept;
  s.balance_loss = v.moe_loss[0];
  s.z_loss = v.moe_loss[1];
  return s;
}

std::vector<MoeBlockStats> moe_stats(const GPTConfig& cfg, const GPTActivations& acts) {
  std::vector<MoeBlockStats> out;
  if (!is_moe(cfg) || acts.moe_probs == nullptr) return out;
  for (std::int64_t l = 0; l < cfg.n_layer; ++l)
    if (is_moe_block(cfg, l)) out.push_back(moe_block_stats(cfg, block_view(cfg, acts, l), l));
  return out;
}

std::vector<MoeBlockStats> MoeRecord::stats(const GPTConfig& cfg) const {
  std::vector<MoeBlockStats> out;
  for (const auto& [router, s] : blocks) {
    out.push_back(s);
    out.back().layer = moe_block_layer(cfg, static_cast<std::int64_t>(out.size()) - 1);
  }
  return out;
}

double moe_loss_total(const GPTConfig& cfg, const GPTActivations& acts) {
  double s = 0.0;
  for (const auto& b : moe_stats(cfg, acts)) s += b.balance_loss + b.z_loss;
  return s;
}

double forward_flops_per_token(const GPTConfig& cfg, std::int64_t T) {
  return 2.0 * static_cast<double>(flops_params(cfg)) +
         4.0 * static_cast<double>(cfg.n_layer * T * cfg.n_embd);
}

}  // namespace mls::llm
