#pragma once
// Expert parallelism's equivalence runs, shared by the simulated-rank test (test_moe_ep.cpp) and
// the MPI test (mpi_moe_ep.cpp): the single-rank fused MoE and EP, each over `steps` SGD steps of
// the MoE tensors on loss = sum(out · W) + the MoE losses.
#include <string>
#include <vector>

#include "mls/llm/moe_ep.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

namespace llm_test {

inline GPTConfig ep_config(std::int64_t E, std::int64_t K, double F) {
  GPTConfig c;
  c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.block_size = 12, c.vocab_size = 5;
  c.moe_experts = E, c.moe_top_k = K, c.moe_every = 1, c.capacity_factor = F;
  c.moe_aux_coef = 0.05, c.moe_z_coef = 0.01;
  c.validate();
  return c;
}

/// A view of the stacked MoE tensors of block 0 from expert `first` on.
inline ParamPtrs experts_from(const ParamPtrs& p, std::int64_t first, std::int64_t C) {
  ParamPtrs q = p;
  q.moe_fcw += first * 4 * C * C;
  q.moe_fcb += first * 4 * C;
  q.moe_fcprojw += first * C * 4 * C;
  q.moe_fcprojb += first * C;
  return q;
}

/// One step of SGD on the MoE tensors only.
inline void sgd_moe(const GPTConfig& cfg, GPTParams& p, const GPTGrads& g, float lr) {
  for (const TensorRange& r : param_ranges(cfg))
    if (r.begin >= moe_param_offsets(cfg)[0])
      for (std::int64_t i = r.begin; i < r.end; ++i) p.data()[i] -= lr * g.data()[i];
}

struct MoeSteps {
  std::vector<std::vector<float>> out;  // per step: the outputs (this rank's tokens for EP)
  std::vector<double> losses, dropped;  // per step: balancing + z-loss, dropped choices
  std::vector<float> final_params;      // after the steps
  std::vector<float> x0;                // the MoE's input (single rank: ln2 of the residual)
  std::int64_t bytes_sent = 0;          // EP: the last step's exchanges
};

/// D data-parallel replicas' inputs: each a residual stream and an output weight W of n normals,
/// drawn replica by replica (residual, then W).
struct DpInputs {
  std::vector<std::vector<float>> resids, Ws;
};
inline DpInputs dp_inputs(int D, std::int64_t n, mls::Rng& rng) {
  DpInputs in{std::vector<std::vector<float>>(static_cast<std::size_t>(D)),
              std::vector<std::vector<float>>(static_cast<std::size_t>(D))};
  for (std::size_t d = 0; d < static_cast<std::size_t>(D); ++d) {
    in.resids[d].resize(static_cast<std::size_t>(n));
    in.Ws[d].resize(static_cast<std::size_t>(n));
    for (auto& v : in.resids[d]) v = static_cast<float>(rng.normal(0.0, 1.0));
    for (auto& v : in.Ws[d]) v = static_cast<float>(rng.normal(0.0, 1.0));
  }
  return in;
}

constexpr int kEpSteps = 10;
constexpr float kEpLr = 0.02f;  // small: the objective sum(out · W) is linear, large steps blow the router up

/// The single-rank fused MoE (moe_mlp_forward / moe_mlp_backward on block 0, B × T tokens) on D
/// data-parallel replicas (resids[d], Ws[d]: each its own tokens and routing), their gradients
/// summed before each step: what EP × DP computes. out[step] holds the replicas' outputs in order,
/// x0 their MoE inputs (ln2 of the residual) in order.
inline MoeSteps single_moe_steps(const GPTConfig& cfg, GPTParams params, const std::vector<std::vector<float>>& resids,
                                 const std::vector<std::vector<float>>& Ws, std::int64_t B, std::int64_t T) {
  const std::int64_t N = B * T, C = cfg.n_embd, E = cfg.moe_experts;
  const std::size_t D = resids.size();
  MoeSteps s;
  std::vector<GPTActivations> a, da;
  for (std::size_t d = 0; d < D; ++d) {
    a.emplace_back(cfg, B, T), da.emplace_back(cfg, B, T);
    std::copy(resids[d].begin(), resids[d].end(), a[d].residual2);
  }
  for (int step = 0; step < kEpSteps; ++step) {
    const ParamPtrs p = shift_layers(param_views(params.data(), cfg), cfg, 0);
    GPTGrads g(cfg);
    ParamPtrs gp = shift_layers(g.views(), cfg, 0);
    std::vector<float> out;
    double dropped = 0, losses = 0;
    for (std::size_t d = 0; d < D; ++d) {
      moe_mlp_forward(cfg, p, a[d], 0);
      if (step == 0) s.x0.insert(s.x0.end(), a[d].ln2, a[d].ln2 + N * C);
      out.insert(out.end(), a[d].fcproj, a[d].fcproj + N * C);
      std::int64_t kept = 0;
      for (std::int64_t e = 0; e < E; ++e) kept += a[d].moe_count[e];
      dropped += static_cast<double>(N * cfg.moe_top_k - kept);
      losses += static_cast<double>(a[d].moe_loss[0]) + a[d].moe_loss[1];
      std::vector<float> dres = Ws[d];
      moe_mlp_backward(cfg, p, gp, a[d], da[d], 0, dres.data());
    }
    s.out.push_back(std::move(out));
    s.dropped.push_back(dropped);
    s.losses.push_back(losses);
    sgd_moe(cfg, params, g, kEpLr);
  }
  s.final_params = params.vec();
  return s;
}

/// EP on `comm` (this rank's n_local tokens: x and W from row 0 of the pointers), with the
/// gradients of the router and the local experts summed over `dp` (EP × DP) when it is given.
inline MoeSteps ep_moe_steps(const GPTConfig& cfg, mls::parallel::Communicator& comm, GPTParams params,
                             const float* x, const float* W, std::int64_t n_local,
                             mls::parallel::Communicator* dp = nullptr) {
  const std::int64_t C = cfg.n_embd;
  MoeSteps s;
  EpMoe ep(cfg, comm, n_local);
  std::vector<float> out(static_cast<std::size_t>(n_local * C)), dx(out.size());
  for (int step = 0; step < kEpSteps; ++step) {
    const ParamPtrs p = experts_from(shift_layers(param_views(params.data(), cfg), cfg, 0), ep.first_expert(), C);
    ep.forward(p, x, out.data());
    s.out.push_back(out);
    s.losses.push_back(ep.balance_loss + ep.z_loss);
    s.dropped.push_back(static_cast<double>(ep.dropped));
    GPTGrads g(cfg);
    ParamPtrs gp = experts_from(shift_layers(g.views(), cfg, 0), ep.first_expert(), C);
    ep.backward(p, gp, W, dx.data());
    if (dp) {  // data parallel over the EP groups: the replicas' gradients summed
      mls::tensor::Tensor t = mls::tensor::Tensor::from_vector(std::vector<float>(g.vec().begin() + moe_param_offsets(cfg)[0], g.vec().end()));
      dp->allreduce(t, mls::parallel::ReduceOp::Sum);
      std::copy(t.data<float>(), t.data<float>() + t.numel(), g.data() + moe_param_offsets(cfg)[0]);
    }
    sgd_moe(cfg, params, g, kEpLr);
  }
  s.bytes_sent = ep.bytes_sent;
  s.final_params = params.vec();
  return s;
}

/// Observes (and, with oracles, checks) rank r's EP run against the single rank's: outputs,
/// dropped choices and losses per step, then the router and rank r's experts after the steps.
inline void check_ep_rank(const GPTConfig& cfg, const MoeSteps& ep, const MoeSteps* single, int r, int P,
                          std::int64_t n_local, std::int64_t row0 = -1) {
  if (row0 < 0) row0 = r * n_local;  // this rank's first token among the single run's
  const std::int64_t C = cfg.n_embd, E = cfg.moe_experts, El = E / P;
  for (int step = 0; step < kEpSteps; ++step) {
    const auto st = static_cast<std::size_t>(step);
    const std::string at = ", rank " + std::to_string(r) + ", step " + std::to_string(step);
    observe_rel("EP MoE output" + at, ep.out[st].data(),
                LAB6_WANT(single ? single->out[st].data() + row0 * C : nullptr), n_local * C, 1e-5);
    mls::testing::observe("EP dropped choices" + at, ep.dropped[st]);
    mls::testing::observe("EP MoE losses" + at, ep.losses[st], {1e-5, 1e-7});
    MLS_ORACLE_CHECK(if (single) {
      CHECK(rel_err(ep.out[st].data(), single->out[st].data() + row0 * C, n_local * C) < 1e-5);
      CHECK(ep.dropped[st] == single->dropped[st]);
      CHECK(ep.losses[st] == Approx(single->losses[st]).epsilon(1e-5));
    });
  }
  const auto mo = moe_param_offsets(cfg);
  const float* mine = ep.final_params.data();
  const std::string after = " after " + std::to_string(kEpSteps) + " steps, rank " + std::to_string(r);
  observe_rel("EP router" + after, mine + mo[kMoeRouter],
              LAB6_WANT(single ? single->final_params.data() + mo[kMoeRouter] : nullptr), E * C, 1e-5);
  MLS_ORACLE_CHECK(if (single) CHECK(rel_err(mine + mo[kMoeRouter], single->final_params.data() + mo[kMoeRouter], E * C) < 1e-5));
  const std::int64_t sizes[] = {4 * C * C, 4 * C, C * 4 * C, C};
  for (int t = kMoeFcw; t <= kMoeFcprojb; ++t) {
    const std::int64_t n = El * sizes[t - 1], off = mo[t] + r * n;
    observe_rel(std::string("EP ") + moe_param_names()[t] + after, mine + off,
                LAB6_WANT(single ? single->final_params.data() + off : nullptr), n, 1e-5);
    MLS_ORACLE_CHECK(if (single) CHECK(rel_err(mine + off, single->final_params.data() + off, n) < 1e-5));
  }
  CHECK(ep.bytes_sent > 0);
}

}  // namespace llm_test
