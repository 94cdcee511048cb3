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
      const MoeSteps single = single_moe_steps(cfg, init, {resid}, {W}, B, T);
      std::vector<MoeSteps> ep(static_cast<std::size_t>(P));
      parallel::run_simulated(P, [&](Communicator& comm) {
        const std::int64_t r = comm.rank();
        ep[static_cast<std::size_t>(r)] = ep_moe_steps(cfg, comm, init, single.x0.data() + r * Nl * C, W.data() + r * Nl * C, Nl);
      });
      double dropped = 0;
      for (int r = 0; r < P; ++r) check_ep_rank(cfg, ep[static_cast<std::size_t>(r)], &single, r, P, Nl);
      for (double d : ep[0].dropped) dropped += d;
      CHECK(dropped > 0);
    }
}

TEST_CASE("expert parallelism x data parallelism: EP 2 x DP 2 on a 2-D mesh of 4 simulated ranks", "[lab6][moe_ep]") {
  // World rank w = d * 2 + e: EP groups {0, 1} and {2, 3} (split by d), DP groups {0, 2} and
  // {1, 3} (split by e). Each DP replica has its own 24 tokens, routed (and capacity decided)
  // within its EP group; the gradients are summed over DP. The reference: the single-rank MoE on
  // each replica's tokens, the two gradients summed.
  const int EP = 2, DP = 2;
  const GPTConfig cfg = ep_config(4, 2, 0.75);
  const std::int64_t B = 2, T = 12, N = B * T, C = cfg.n_embd, Nl = N / EP;
  Rng rng(50, "moe-ep-dp");
  const GPTParams init = random_params(cfg, rng);
  const DpInputs in = dp_inputs(DP, N * C, rng);
  const std::vector<std::vector<float>>&resids = in.resids, &Ws = in.Ws;
  const MoeSteps single = single_moe_steps(cfg, init, resids, Ws, B, T);
  std::vector<MoeSteps> ep(static_cast<std::size_t>(EP * DP));
  parallel::run_simulated(EP * DP, [&](Communicator& world) {
    const int w = world.rank(), d = w / EP, e = w % EP;
    Communicator ep_comm = world.split(d, e), dp_comm = world.split(e, d);
    const std::int64_t row0 = d * N + e * Nl;
    ep[static_cast<std::size_t>(w)] = ep_moe_steps(cfg, ep_comm, init, single.x0.data() + row0 * C,
                                                   Ws[static_cast<std::size_t>(d)].data() + e * Nl * C, Nl, &dp_comm);
  });
  for (int w = 0; w < EP * DP; ++w) {
    INFO("world rank " << w);
    MoeSteps per_replica = ep[static_cast<std::size_t>(w)];
    // The losses and drops are per EP group; the reference sums both replicas': compare the sum.
    const MoeSteps& other = ep[static_cast<std::size_t>((w + EP) % (EP * DP))];
    for (int s = 0; s < kEpSteps; ++s) {
      per_replica.losses[static_cast<std::size_t>(s)] += other.losses[static_cast<std::size_t>(s)];
      per_replica.dropped[static_cast<std::size_t>(s)] += other.dropped[static_cast<std::size_t>(s)];
    }
    check_ep_rank(cfg, per_replica, &single, w % EP, EP, Nl, (w / EP) * N + (w % EP) * Nl);
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

namespace {
/// A small MoE GPT for the EP training runs: every block MoE with E experts, top-K, tight capacity.
EpRunOptions ep_run_options(std::int64_t E, std::int64_t K, std::int64_t batch) {
  EpRunOptions o;
  o.cfg.n_layer = 2, o.cfg.n_head = 2, o.cfg.n_embd = 16, o.cfg.block_size = 8, o.cfg.vocab_size = 13;
  o.cfg.moe_experts = E, o.cfg.moe_top_k = K, o.cfg.moe_every = 1, o.cfg.capacity_factor = 1.0;
  o.cfg.moe_aux_coef = 0.05, o.cfg.moe_z_coef = 0.01;
  o.batch = batch, o.context = 8, o.steps = 10, o.lr = 3e-3, o.seed = 7;
  return o;
}
}  // namespace

TEST_CASE("expert parallelism in the GPT: train --ep on 2 and 4 simulated ranks equals the single-rank run over the union batch",
          "[lab6][moe_ep]") {
  // The whole GPT (2 MoE blocks, the dense part data parallel), 10 AdamW steps: the same losses
  // and drops per step and the same parameters (every expert gathered from its owner) as one rank
  // training on the ranks' batches together, within float32 rounding (the router's GEMM and the
  // dense gradients are summed over other row blocks; AdamW then divides by sqrt(v)).
  for (const int P : {2, 4})
    for (const std::int64_t K : {1, 2}) {
      INFO("P " << P << " K " << K);
      const EpRunOptions o = ep_run_options(4, K, 2);
      EpRunOptions whole = o;
      whole.batch = P * o.batch;
      const EpRunReport ep = run_ep_simulated(P, o);
      const EpRunReport single = run_ep_simulated(1, whole);
      const std::string at = ", P " + std::to_string(P) + ", K " + std::to_string(K);
      mls::testing::observe("GPT EP dropped choices per step" + at, ep.dropped);
      mls::testing::observe("GPT EP losses per step" + at, ep.losses, {1e-4, 1e-6});
      observe_rel("GPT EP parameters after 10 steps" + at, ep.final_params.data(),
                  LAB6_WANT(single.final_params.data()), static_cast<std::int64_t>(ep.final_params.size()), 5e-5);
      std::int64_t dropped = 0;
      for (auto d : ep.dropped) dropped += d;
      CHECK(dropped > 0);  // steps with drops are among the ten
      CHECK(ep.bytes_sent_per_step > 0);
      MLS_ORACLE_CHECK({
        CHECK(ep.dropped == single.dropped);
        for (std::size_t s = 0; s < ep.losses.size(); ++s) CHECK(ep.losses[s] == Approx(single.losses[s]).epsilon(1e-5));
        const double err = rel_err(ep.final_params.data(), single.final_params.data(),
                                   static_cast<std::int64_t>(ep.final_params.size()));
        INFO("relative error of the parameters " << err);
        CHECK(err < 5e-5);  // measured: 2e-6 .. 5e-6
      });
    }
}

TEST_CASE("expert parallelism in the GPT: one step on 2 ranks, then bad input", "[lab6][moe_ep]") {
  EpRunOptions o = ep_run_options(4, 2, 2);
  {  // one step through the student's code (routing, exchanges, the step) first
    EpRunOptions one = o;
    one.steps = 1;
    const EpRunReport ep = run_ep_simulated(2, one);
    mls::testing::observe("GPT EP one step: loss", ep.losses, {1e-4, 1e-6});
    mls::testing::observe("GPT EP one step: dropped", ep.dropped);
    one.batch = 2 * o.batch;
    const EpRunReport single = run_ep_simulated(1, one);
    MLS_ORACLE_CHECK(CHECK(ep.losses[0] == Approx(single.losses[0]).epsilon(1e-6)); CHECK(ep.dropped == single.dropped));
  }
  mls::testing::require_error([&] { (void)run_ep_simulated(3, o); },
                              "train --ep 3: --moe-experts 4 is not divisible by the expert-parallel group's 3 ranks");
  EpRunOptions dense = o;
  dense.cfg.moe_experts = 0;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, dense); }, "train --ep 2: a dense model (--moe-experts 0)");
  EpRunOptions b = o;
  b.batch = 0;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, b); }, "train --ep: batch = 0, expected >= 1 rows per rank");
  b = o;
  b.context = 9;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, b); }, "train --ep: context = 9");
  b = o;
  b.steps = 0;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, b); }, "train --ep: steps = 0");
  b = o;
  b.lr = 0;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, b); }, "train --ep: lr = 0");
  mls::testing::require_error([&] { (void)run_ep_simulated(0, o); }, "train --ep: 0 ranks");
  // A dispatch fed another number of tokens than it was built for.
  mls::testing::require_error(
      [&] {
        parallel::run_simulated(2, [&](Communicator& c) {
          EpDispatch d(o.cfg, c, 4);
          GPTParams p(o.cfg);
          std::vector<float> x(static_cast<std::size_t>(5 * o.cfg.n_embd)), y(x.size()), loss(2);
          d.forward(shift_layers(p.views(), o.cfg, 0), x.data(), y.data(), 5, loss.data());
        });
      },
      "EpDispatch::forward: 5 tokens, expected the 4 tokens per rank it was built for");
}
