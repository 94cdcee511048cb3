// Lab 6: expert parallelism on lab 5's simulated ranks — the same outputs, gradients and (after
// 10 SGD steps) parameters as the single-rank fused MoE, drops included; bad input.
#include <catch2/catch.hpp>
#include <cmath>

#include "mls/llm/moe_ep.hpp"
#include "mls/testing.hpp"
#include "moe_ep_testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::parallel::Communicator;

TEST_CASE("expert parallelism: EP on 2 and 4 simulated ranks equals the single-rank MoE over 10 SGD steps",
          "[lab6][moe_ep]") {
  for (const int P : {2, 4})
    for (const std::int64_t K : {1, 2}) {
      const GPTConfig cfg = ep_config(4, K, 0.75);  // tight capacity: choices are dropped
      const std::int64_t B = 2, T = 12, N = B * T, C = cfg.n_embd, Nl = N / P;
      Rng rng(40 + static_cast<std::uint64_t>(P * 10 + K), "moe-ep");
      const GPTParams init = random_params(cfg, rng);
      std::vector<float> resid(static_cast<std::size_t>(N * C)), W(resid.size());
      for (auto& v : resid) v = static_cast<float>(rng.normal(0.0, 1.0));
      for (auto& v : W) v = static_cast<float>(rng.normal(0.0, 1.0));
      INFO("P " << P << " K " << K);
      // The single-rank fused MoE runs first (student code too): its ln2 output is EP's input.
      const MoeSteps single = single_moe_steps(cfg, init, resid, W, B, T);
      std::vector<MoeSteps> ep(static_cast<std::size_t>(P));
      parallel::run_simulated(P, [&](Communicator& comm) {
        ep[static_cast<std::size_t>(comm.rank())] = ep_moe_steps(cfg, comm, init, single.x0, W, Nl);
      });
      double dropped = 0;
      for (int r = 0; r < P; ++r) check_ep_rank(cfg, ep[static_cast<std::size_t>(r)], &single, r, P, Nl);
      for (double d : ep[0].dropped) dropped += d;
      CHECK(dropped > 0);
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
