// Lab 6, part 2: rematerialization — plans, the optimal planner against brute force, the chain's
// measured peak and FLOPs, and the fused GPT path under a plan (bit-identical gradients).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "mls/llm/remat.hpp"
#include "mls/llm/train.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::testing::observe;
using mls::testing::require_error;

namespace {


ChainCosts random_costs(std::int64_t n, Rng& rng) {
  ChainCosts c;
  for (std::int64_t i = 0; i < n; ++i) {
    c.act_bytes.push_back(rng.randint(1, 20) * 64);
    c.ckpt_bytes.push_back(rng.randint(1, 8) * 64);
    c.fwd_flops.push_back(static_cast<double>(rng.randint(1, 100)));
  }
  return c;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("remat plans: none and sqrt cut the chain as documented", "[lab6][remat]") {
  MLS_CHECK_EQ(no_remat_plan(5).to_string(), std::string("[0,5)"));
  MLS_CHECK_EQ(sqrt_plan(9).to_string(), std::string("[0,3) [3,6) [6,9)"));
  MLS_CHECK_EQ(sqrt_plan(10).to_string(), std::string("[0,4) [4,8) [8,10)"));
  MLS_CHECK_EQ(sqrt_plan(1).to_string(), std::string("[0,1)"));
  observe("sqrt(10)", sqrt_plan(10).to_string());
  std::vector<std::int64_t> max_segment, num_segments, recomputed;
  for (std::int64_t n = 1; n <= 200; ++n) {
    const RematPlan p = sqrt_plan(n);
    p.validate();
    max_segment.push_back(p.max_segment());
    num_segments.push_back(p.num_segments());
    recomputed.push_back(p.recomputed_layers());
    MLS_ORACLE_CHECK(const auto k = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(n)) - 1e-12));
                     CHECK(p.max_segment() == k); CHECK(p.num_segments() == (n + k - 1) / k);
                     CHECK(p.recomputed_layers() == p.starts.back()));
    if (n % 37 == 0) observe("sqrt segments", p.num_segments());
  }
  observe("sqrt plans' max segments", max_segment);
  observe("sqrt plans' segments", num_segments);
  observe("sqrt plans' recomputed layers", recomputed);
}

TEST_CASE("remat plans: the peak and recompute formulas on a worked example", "[lab6][remat]") {
  // 4 layers: a = 10, 20, 30, 40; c = 1, 2, 3, 4; f = 1, 2, 3, 4.
  ChainCosts c{{10, 20, 30, 40}, {1, 2, 3, 4}, {1, 2, 3, 4}};
  const RematPlan p{4, {0, 2, 3}};  // [0,2) [2,3) [3,4)
  // segment 0: 1 + 30 = 31; segment 1: 1 + 3 + 30 = 34; segment 2: 1 + 3 + 4 + 40 = 48.
  MLS_CHECK_EQ(plan_peak_bytes(c, p), 48);
  MLS_CHECK_EQ(plan_recompute_flops(c, p), 6.0);  // layers 0, 1, 2
  MLS_CHECK_EQ(plan_peak_bytes(c, no_remat_plan(4)), 101);
  MLS_CHECK_EQ(plan_recompute_flops(c, no_remat_plan(4)), 0.0);
  observe("peak", plan_peak_bytes(c, p));
  observe("recompute", plan_recompute_flops(c, p));
  // The optimal plan at budget 48 recomputes less than p does, within 48 bytes.
  const RematPlan o = optimal_plan(c, 48);
  observe("optimal(48) peak", plan_peak_bytes(c, o));
  observe("optimal(48) recompute", plan_recompute_flops(c, o));
  MLS_ORACLE_CHECK(CHECK(plan_peak_bytes(c, o) <= 48); CHECK(plan_recompute_flops(c, o) <= 6.0));
  observe("optimal(48)", o.to_string());
  MLS_ORACLE_CHECK(CHECK(min_peak_bytes(c) <= 48));
  observe("min peak", min_peak_bytes(c));
}

TEST_CASE("remat optimal planner: equal to brute force over every plan (random chains)",
          "[lab6][remat]") {
  Rng rng(16, "remat-brute");
  for (int trial = 0; trial < 30; ++trial) {
    const std::int64_t n = rng.randint(1, 10);
    const ChainCosts c = random_costs(n, rng);
    const auto plans = all_plans(n);
    // The budgets (test inputs) span the peaks of every plan, by the code's plan_peak_bytes.
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
    for (const auto& p : plans) {
      lo = std::min(lo, plan_peak_bytes(c, p));
      hi = std::max(hi, plan_peak_bytes(c, p));
    }
    observe("min peak", min_peak_bytes(c));
    MLS_ORACLE_CHECK(CHECK(min_peak_bytes(c) == lo));
    for (int b = 0; b < 5; ++b) {
      const std::int64_t budget = lo + (hi - lo) * b / 4;
      const RematPlan o = optimal_plan(c, budget);
      INFO("n = " << n << ", budget = " << budget << ", plan " << o.to_string());
      observe("optimal recompute", plan_recompute_flops(c, o));
      observe("optimal peak", plan_peak_bytes(c, o));
      // The oracle: brute force over every plan, after the planner ran.
      MLS_ORACLE(double best = std::numeric_limits<double>::infinity();
                 for (const auto& p : plans)
                   if (plan_peak_bytes(c, p) <= budget) best = std::min(best, plan_recompute_flops(c, p));)
      MLS_ORACLE_CHECK(CHECK(plan_peak_bytes(c, o) <= budget); CHECK(plan_recompute_flops(c, o) == best));
    }
    // Enough memory for everything: nothing recomputed.
    MLS_CHECK_EQ(plan_recompute_flops(c, optimal_plan(c, hi)), 0.0);
  }
}

TEST_CASE("remat optimal planner: a budget too small for any plan is a named error",
          "[lab6][remat]") {
  const ChainCosts c = ChainCosts::uniform(16, 1000, 1000, 1.0);
  require_error([&] { optimal_plan(c, 1999); }, "budget of 1999 bytes");
  require_error([&] { make_plan("optimal", c, 100); }, "optimal_plan");
  require_error([&] { make_plan("bogus", c); }, "'bogus'");
  require_error([&] { sqrt_plan(0); }, "n = 0");
  require_error([&] { RematPlan{4, {0, 2, 2}}.validate(); }, "strictly increasing");
  require_error([&] { RematPlan{4, {1}}.validate(); }, "start at 0");
  require_error([&] { plan_peak_bytes(c, sqrt_plan(9)); }, "a plan for 9 layers");
  require_error([&] { (ChainCosts{{1, 2}, {1}, {1, 2}}).validate(); }, "ChainCosts");
  // min_peak_bytes is the threshold.
  const std::int64_t mp = min_peak_bytes(c);
  observe("min peak", mp);
  CHECK_NOTHROW(optimal_plan(c, mp));
  CHECK_THROWS_AS(optimal_plan(c, mp - 1), Error);
}

TEST_CASE("remat chain: gradients bit-identical, peak = formula <= (2 sqrt n + 4) layers, "
          "FLOPs <= 4/3",
          "[lab6][remat]") {
  Rng rng(7, "remat-chain-test");
  const std::int64_t B = 3, d = 8;
  for (std::int64_t n : {1, 4, 9, 16, 25, 50, 100}) {
    const ChainModel chain(n, d, 100 + static_cast<std::uint64_t>(n));
    std::vector<float> x0(static_cast<std::size_t>(B * d));
    for (auto& x : x0) x = static_cast<float>(rng.normal(0.0, 1.0));
    const ChainCosts costs = chain.costs(B);
    const std::int64_t layer = chain.layer_bytes(B);
    std::vector<RematPlan> plans;
    std::vector<decltype(chain.train_step(x0, B, no_remat_plan(n)))> runs;
    for (const char* kind : {"none", "sqrt", "optimal"}) {
      const RematPlan plan = make_plan(kind, costs);
      const auto r = chain.train_step(x0, B, plan);
      observe("peak bytes", r.peak_bytes);
      observe("flops", r.flops);
      observe("forward flops", r.forward_flops);
      observe("loss", r.loss);
      observe("dW", r.dW);
      observe("db", r.db);
      observe("plan peak bytes", plan_peak_bytes(costs, plan));
      observe("plan recompute flops", plan_recompute_flops(costs, plan));
      plans.push_back(plan);
      runs.push_back(r);
    }
    observe("layer bytes", layer);
    // The oracle: the run without recompute, after the planned runs.
    MLS_ORACLE(const auto base = chain.train_step(x0, B, no_remat_plan(n));)
    MLS_ORACLE_CHECK(
        for (std::size_t i = 0; i < runs.size(); ++i) {
          const auto& r = runs[i];
          const RematPlan& plan = plans[i];
          INFO("n = " << n << ", plan " << plan.to_string());
          CHECK(r.loss == base.loss);
          CHECK(same_floats(r.dW, base.dW));
          CHECK(same_floats(r.db, base.db));
          // Measured: the plan's formula plus the two gradient buffers, to the byte.
          CHECK(r.peak_bytes == plan_peak_bytes(costs, plan) + 2 * layer);
          CHECK(r.flops <= 4.0 / 3.0 * base.flops);
          CHECK(r.forward_flops - base.forward_flops == plan_recompute_flops(costs, plan));
          if (i > 0) {
            CHECK(static_cast<double>(r.peak_bytes) <=
                  (2.0 * std::sqrt(static_cast<double>(n)) + 4.0) * static_cast<double>(layer));
          }
        }
        CHECK(base.peak_bytes == (n + 3) * layer));  // every output, the input, two gradients
  }
}

TEST_CASE("remat gpt: the fused path under none/sqrt/optimal plans gives bit-identical loss and "
          "gradients",
          "[lab6][remat]") {
  Rng rng(61, "remat-gpt");
  for (int trial = 0; trial < 4; ++trial) {
    GPTConfig cfg = random_config(rng);
    cfg.n_layer = rng.randint(1, 7);
    const GPTParams p = random_params(cfg, rng);
    const std::int64_t B = rng.randint(1, 3), T = rng.randint(1, cfg.block_size + 1);
    const Batch b = random_batch(cfg, B, T, rng);
    std::vector<double> losses;
    std::vector<std::vector<float>> grads;
    for (const char* kind : {"none", "sqrt", "optimal"}) {
      RematActivations ra(cfg, B, T, gpt_plan(kind, cfg, B, T));
      observe("bytes", ra.bytes());
      observe("plan", ra.plan().to_string());
      MLS_ORACLE_CHECK(CHECK(ra.bytes() == remat_activation_bytes(cfg, B, T, ra.plan())));
      GPTGrads g(cfg);
      const double loss =
          gpt_forward_remat(p, ra, b.inputs.data(), b.targets.data(), b.mask.data(), B, T);
      gpt_backward_remat(p, g, ra, b.inputs.data(), b.targets.data(), b.mask.data());
      INFO("L = " << cfg.n_layer << ", plan " << ra.plan().to_string());
      MLS_ORACLE_CHECK(CHECK(ra.blocks_run == cfg.n_layer + ra.plan().recomputed_layers()));
      observe("loss", loss);
      observe("grads", g.vec());
      observe("blocks run", ra.blocks_run);
      losses.push_back(loss);
      grads.push_back(g.vec());
    }
    // The oracle: the fused path without a plan, after the planned runs.
    MLS_ORACLE(GPTActivations acts(cfg, B, T), dacts(cfg, B, T);
               GPTGrads g0(cfg);
               const double loss0 = gpt_forward(p, acts, b.inputs.data(), b.targets.data(), b.mask.data(), B, T);
               gpt_backward(p, g0, acts, dacts, b.inputs.data(), b.targets.data(), b.mask.data());)
    MLS_ORACLE_CHECK(for (std::size_t i = 0; i < losses.size(); ++i) {
      INFO("plan " << i);
      CHECK(losses[i] == loss0);
      CHECK(same_floats(grads[i], g0.vec()));
    });
  }
}

TEST_CASE("remat gpt: sqrt keeps fewer bytes than the full activations, and trains the same",
          "[lab6][remat]") {
  Rng rng(5, "remat-train");
  GPTConfig cfg = config_by_name("nano");
  cfg.n_layer = 9;
  cfg.vocab_size = kSortV;
  const std::int64_t B = 4, T = kSortT;
  RematActivations full(cfg, B, T, no_remat_plan(9)), sq(cfg, B, T, sqrt_plan(9));
  observe("sqrt bytes", sq.bytes());
  observe("full bytes", full.bytes());
  observe("full segment floats", full.seg.num_floats());
  observe("block activation floats", block_activation_floats(cfg, B, T));
  observe("head activation floats", head_activation_floats(cfg, B, T));
  // The oracles: the closed forms and the plain activations, after the code ran.
  MLS_ORACLE(const GPTActivations plain(cfg, B, T);
             const std::int64_t block = 4 * block_activation_floats(cfg, B, T);)
  MLS_ORACLE_CHECK(CHECK(sq.bytes() < full.bytes());
                   // sqrt: 3 checkpoints + 3 blocks (+ their gradients' scratch) instead of 9 blocks.
                   CHECK(sq.bytes() == 4 * 3 * B * T * cfg.n_embd + 2 * 3 * block +
                                           2 * 4 * head_activation_floats(cfg, B, T));
                   CHECK(full.seg.num_floats() == plain.num_floats());
                   CHECK(plain.num_floats() ==
                         9 * block_activation_floats(cfg, B, T) + head_activation_floats(cfg, B, T)));

  TrainOptions opt;
  opt.batch = B;
  opt.context = T;
  opt.steps = 3;
  opt.warmup = 1;
  Trainer c(init_params(cfg, 3), opt);
  // The oracle: the trainer without a plan, each step after the planned trainer's.
  MLS_ORACLE(Trainer a(init_params(cfg, 3), opt);)
  for (int s = 0; s < 3; ++s) {
    const Batch b = sort_batch(B, rng);
    const StepStats sc = remat_train_step(c, sq, b);
    observe("loss", sc.loss);
    MLS_ORACLE(const StepStats sa = a.step(b);)
    MLS_ORACLE_CHECK(CHECK(sa.loss == sc.loss));
  }
  observe("parameters", c.params.vec());
  MLS_ORACLE_CHECK(CHECK(same_floats(a.params.vec(), c.params.vec())));
  require_error([&] { remat_train_step(c, sq, sort_batch(B + 1, rng)); }, "remat_train_step");
  require_error([&] { RematActivations(cfg, B, T, sqrt_plan(4)); }, "a plan for 4 layers");
}

TEST_CASE("remat gpt optimal planner: the fewest recomputed blocks within a budget, as brute force",
          "[lab6][remat]") {
  Rng rng(9, "remat-gpt-optimal");
  for (int trial = 0; trial < 6; ++trial) {
    GPTConfig cfg = random_config(rng);
    cfg.n_layer = rng.randint(1, 9);
    const std::int64_t B = rng.randint(1, 4), T = rng.randint(1, cfg.block_size + 1);
    const auto plans = all_plans(cfg.n_layer);
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = 0;
    for (const auto& p : plans) {
      lo = std::min(lo, remat_activation_bytes(cfg, B, T, p));
      hi = std::max(hi, remat_activation_bytes(cfg, B, T, p));
      // The static footprint is never below the segment formula of the chain (block + scratch).
      ChainCosts c = gpt_chain_costs(cfg, B, T);
      for (auto& a : c.act_bytes) a *= 2;
      CHECK(plan_peak_bytes(c, p) <= remat_activation_bytes(cfg, B, T, p));
    }
    for (int b = 0; b < 4; ++b) {
      const std::int64_t budget = lo + (hi - lo) * b / 3;
      const RematPlan o = gpt_optimal_plan(cfg, B, T, budget);
      INFO("L = " << cfg.n_layer << ", budget " << budget << ", plan " << o.to_string());
      observe("plan", o.to_string());
      observe("plan bytes", remat_activation_bytes(cfg, B, T, o));
      observe("recomputed layers", o.recomputed_layers());
      // The oracle: brute force over every plan, after the planner ran.
      MLS_ORACLE(std::int64_t best = cfg.n_layer + 1;
                 for (const auto& p : plans)
                   if (remat_activation_bytes(cfg, B, T, p) <= budget) best = std::min(best, p.recomputed_layers());)
      MLS_ORACLE_CHECK(CHECK(remat_activation_bytes(cfg, B, T, o) <= budget); CHECK(o.recomputed_layers() == best));
    }
    require_error([&] { gpt_optimal_plan(cfg, B, T, lo - 1); }, "budget of " + std::to_string(lo - 1));
  }
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = 11;
  require_error([&] { gpt_plan("fast", cfg, 2, 8); }, "'fast'");
  // The default budget of "optimal" is the sqrt plan's: never more memory, never more recompute.
  cfg.n_layer = 10;
  const RematPlan o = gpt_plan("optimal", cfg, 2, 8), s = gpt_plan("sqrt", cfg, 2, 8);
  observe("optimal(10)", o.to_string());
  observe("sqrt(10)", s.to_string());
  observe("optimal(10) bytes", remat_activation_bytes(cfg, 2, 8, o));
  observe("sqrt(10) bytes", remat_activation_bytes(cfg, 2, 8, s));
  MLS_ORACLE_CHECK(CHECK(remat_activation_bytes(cfg, 2, 8, o) <= remat_activation_bytes(cfg, 2, 8, s));
                   CHECK(o.recomputed_layers() <= s.recomputed_layers()));
}
