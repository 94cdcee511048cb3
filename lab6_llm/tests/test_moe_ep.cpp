// Lab 6: expert parallelism on lab 5's simulated ranks — the same outputs, gradients and (after
// 10 SGD steps) parameters as the single-rank fused MoE, drops included; bad input.
#include <catch2/catch.hpp>
#include <cmath>

#include "mls/llm/moe_ep.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::parallel::Communicator;

namespace {

GPTConfig ep_config(std::int64_t E, std::int64_t K, double F) {
  GPTConfig c;
  c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.block_size = 12, c.vocab_size = 5;
  c.moe_experts = E, c.moe_top_k = K, c.moe_every = 1, c.capacity_factor = F;
  c.moe_aux_coef = 0.05, c.moe_z_coef = 0.01;
  c.validate();
  return c;
}

/// Expert e's slices of the stacked MoE tensors of block 0 (a view of E experts from `first`).
ParamPtrs experts_from(const ParamPtrs& p, std::int64_t first, std::int64_t C) {
  ParamPtrs q = p;
  q.moe_fcw += first * 4 * C * C;
  q.moe_fcb += first * 4 * C;
  q.moe_fcprojw += first * C * 4 * C;
  q.moe_fcprojb += first * C;
  return q;
}

}  // namespace

TEST_CASE("expert parallelism: EP on 2 and 4 simulated ranks equals the single-rank MoE over 10 SGD steps",
          "[lab6][moe_ep]") {
  for (const int P : {2, 4})
    for (const std::int64_t K : {1, 2}) {
      const GPTConfig cfg = ep_config(4, K, 0.75);  // tight capacity: choices are dropped
      const std::int64_t B = 2, T = 12, N = B * T, C = cfg.n_embd, E = cfg.moe_experts, Nl = N / P;
      Rng rng(40 + static_cast<std::uint64_t>(P * 10 + K), "moe-ep");
      GPTParams single = random_params(cfg, rng);
      std::vector<float> resid(static_cast<std::size_t>(N * C)), W(resid.size());
      for (auto& v : resid) v = static_cast<float>(rng.normal(0.0, 1.0));
      for (auto& v : W) v = static_cast<float>(rng.normal(0.0, 1.0));
      const float lr = 0.05f;
      // The EP ranks' copies of the MoE tensors (every rank the whole router; its experts only).
      GPTParams ep_params = single;
      INFO("P " << P << " K " << K);
      // The single-rank path: moe_mlp_forward / moe_mlp_backward on block 0 of a 1-block model.
      GPTActivations a(cfg, B, T), da(cfg, B, T);
      std::copy(resid.begin(), resid.end(), a.residual2);
      std::vector<double> single_losses, single_dropped;
      std::vector<std::vector<float>> single_out;
      std::vector<float> x0;  // the MoE's input (ln2 of the residual), fixed
      for (int step = 0; step < 10; ++step) {
        const ParamPtrs p = shift_layers(param_views(single.data(), cfg), cfg, 0);
        moe_mlp_forward(cfg, p, a, 0);
        if (step == 0) x0.assign(a.ln2, a.ln2 + N * C);
        single_out.emplace_back(a.fcproj, a.fcproj + N * C);
        std::int64_t kept = 0;
        for (std::int64_t e = 0; e < E; ++e) kept += a.moe_count[e];
        single_dropped.push_back(static_cast<double>(N * K - kept));
        single_losses.push_back(a.moe_loss[0] + a.moe_loss[1]);
        GPTGrads g(cfg);
        ParamPtrs gp = shift_layers(g.views(), cfg, 0);
        std::vector<float> dres = W;
        moe_mlp_backward(cfg, p, gp, a, da, 0, dres.data());
        for (const TensorRange& r : param_ranges(cfg))
          if (r.begin >= moe_param_offsets(cfg)[0])
            for (std::int64_t i = r.begin; i < r.end; ++i) single.data()[i] -= lr * g.data()[i];
      }
      // EP: P simulated ranks, each with its Nl tokens and E/P experts.
      std::vector<std::vector<std::vector<float>>> ep_out(static_cast<std::size_t>(P));
      std::vector<std::vector<double>> ep_losses(static_cast<std::size_t>(P)), ep_dropped(static_cast<std::size_t>(P));
      std::vector<std::vector<float>> ep_final(static_cast<std::size_t>(P));
      std::vector<std::int64_t> ep_bytes(static_cast<std::size_t>(P));
      parallel::run_simulated(P, [&](Communicator& comm) {
        GPTParams mine = ep_params;  // this rank's copy (it updates only its experts and the router)
        EpMoe ep(cfg, comm, Nl);
        const std::int64_t r = comm.rank();
        std::vector<float> out(static_cast<std::size_t>(Nl * C)), dx(out.size());
        for (int step = 0; step < 10; ++step) {
          const ParamPtrs all = shift_layers(param_views(mine.data(), cfg), cfg, 0);
          const ParamPtrs p = experts_from(all, ep.first_expert(), C);
          ep.forward(p, x0.data() + r * Nl * C, out.data());
          ep_out[static_cast<std::size_t>(r)].push_back(out);
          ep_losses[static_cast<std::size_t>(r)].push_back(ep.balance_loss + ep.z_loss);
          ep_dropped[static_cast<std::size_t>(r)].push_back(static_cast<double>(ep.dropped));
          GPTGrads g(cfg);
          const ParamPtrs gall = shift_layers(g.views(), cfg, 0);
          ParamPtrs gp = experts_from(gall, ep.first_expert(), C);
          ep.backward(p, gp, W.data() + r * Nl * C, dx.data());
          for (const TensorRange& rg : param_ranges(cfg))
            if (rg.begin >= moe_param_offsets(cfg)[0])
              for (std::int64_t i = rg.begin; i < rg.end; ++i) mine.data()[i] -= lr * g.data()[i];
        }
        ep_bytes[static_cast<std::size_t>(r)] = ep.bytes_sent;
        ep_final[static_cast<std::size_t>(r)] = mine.vec();
      });
      double dropped_total = 0;
      for (int step = 0; step < 10; ++step) {
        std::vector<float> got;
        for (int r = 0; r < P; ++r)
          got.insert(got.end(), ep_out[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)].begin(),
                     ep_out[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)].end());
        observe_rel("EP MoE output, step " + std::to_string(step), got.data(),
                    LAB6_WANT(single_out[static_cast<std::size_t>(step)].data()), N * C, 1e-4);
        mls::testing::observe("EP dropped choices, step " + std::to_string(step), ep_dropped[0][static_cast<std::size_t>(step)]);
        mls::testing::observe("EP MoE losses, step " + std::to_string(step), ep_losses[0][static_cast<std::size_t>(step)],
                              {1e-4, 1e-7});
        dropped_total += ep_dropped[0][static_cast<std::size_t>(step)];
        MLS_ORACLE_CHECK(CHECK(rel_err(got.data(), single_out[static_cast<std::size_t>(step)].data(), N * C) < 1e-4);
                         CHECK(ep_dropped[0][static_cast<std::size_t>(step)] == single_dropped[static_cast<std::size_t>(step)]);
                         CHECK(ep_losses[0][static_cast<std::size_t>(step)] ==
                               Approx(single_losses[static_cast<std::size_t>(step)]).epsilon(1e-4)));
      }
      CHECK(dropped_total > 0);
      // After 10 steps: the router (every rank) and each rank's experts equal the single rank's.
      const auto mo = moe_param_offsets(cfg);
      const std::int64_t El = E / P;
      for (int r = 0; r < P; ++r) {
        const float* mine = ep_final[static_cast<std::size_t>(r)].data();
        observe_rel("EP router after 10 steps, rank " + std::to_string(r), mine + mo[kMoeRouter],
                    LAB6_WANT(single.data() + mo[kMoeRouter]), E * C, 1e-4);
        MLS_ORACLE_CHECK(CHECK(rel_err(mine + mo[kMoeRouter], single.data() + mo[kMoeRouter], E * C) < 1e-4));
        const std::int64_t sizes[] = {4 * C * C, 4 * C, C * 4 * C, C};
        for (int t = kMoeFcw; t <= kMoeFcprojb; ++t) {
          const std::int64_t n = El * sizes[t - 1], off = mo[t] + r * n;
          observe_rel(std::string("EP ") + moe_param_names()[t] + " after 10 steps, rank " + std::to_string(r),
                      mine + off, LAB6_WANT(single.data() + off), n, 1e-4);
          MLS_ORACLE_CHECK(CHECK(rel_err(mine + off, single.data() + off, n) < 1e-4));
        }
        CHECK(ep_bytes[static_cast<std::size_t>(r)] > 0);
      }
    }
}

TEST_CASE("expert parallelism: experts not divisible by the group, counts that disagree", "[lab6][moe_ep]") {
  const GPTConfig cfg = ep_config(3, 1, 1.0);
  mls::testing::require_error([&] { parallel::run_simulated(2, [&](Communicator& c) { EpMoe ep(cfg, c, 4); }); },
                              "EpMoe: moe_experts = 3 is not divisible by the expert-parallel group's 2 ranks");
  // ep_exchange with receive counts that disagree with what the other rank sends.
  mls::testing::require_error(
      [] {
        parallel::run_simulated(2, [](Communicator& c) {
          std::vector<std::int64_t> recv = {c.rank() == 1 ? 2 : 1, 1};  // rank 1 expects 2 rows from rank 0, which sends 1
          (void)ep_exchange(c, Tensor::ones({4}), 2, {1, 1}, recv);
        });
      },
      "all_to_allv: the counts disagree between ranks");
  // The counts learnt: rank r sends r + 1 rows of 3 to each rank.
  std::vector<std::vector<std::int64_t>> learnt(2);
  std::vector<Tensor> got(2);
  parallel::run_simulated(2, [&](Communicator& c) {
    std::vector<std::int64_t> recv;
    const std::int64_t r = c.rank();
    got[static_cast<std::size_t>(r)] =
        ep_exchange(c, Tensor::full({2 * (r + 1) * 3}, static_cast<double>(r + 1)), 3, {r + 1, r + 1}, recv);
    learnt[static_cast<std::size_t>(r)] = recv;
  });
  mls::testing::observe("ep_exchange learnt counts, rank 0", learnt[0]);
  mls::testing::observe("ep_exchange learnt counts, rank 1", learnt[1]);
  mls::testing::observe("ep_exchange rows, rank 1", got[1].to_vector<double>());
  MLS_ORACLE_CHECK(CHECK(learnt[0] == std::vector<std::int64_t>{1, 2}); CHECK(learnt[1] == std::vector<std::int64_t>{1, 2});
                   CHECK(got[1].to_vector<double>() == std::vector<double>{1, 1, 1, 2, 2, 2, 2, 2, 2}));
}
