// Lab 6, part 2: the memory planner (ZeRO stage x recompute plan x micro-batch) against brute
// force over every plan, its formulas, and its errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "mls/llm/planner.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/zero.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::testing::observe;
using mls::testing::require_error;

namespace {

PlannerInput small_input(Rng& rng) {
  PlannerInput in;
  in.cfg.n_layer = rng.randint(1, 6);
  in.cfg.n_head = rng.randint(1, 3);
  in.cfg.n_embd = in.cfg.n_head * 8 * rng.randint(1, 3);
  in.cfg.block_size = 16;
  in.cfg.vocab_size = rng.randint(5, 40);
  in.batch = std::vector<std::int64_t>{4, 6, 8}[static_cast<std::size_t>(rng.randint(0, 3))];
  in.context = rng.randint(4, 17);
  in.ranks = std::vector<int>{1, 2, 4, 3}[static_cast<std::size_t>(rng.randint(0, 4))];
  in.flops_per_s = 1e9;
  in.budget_bytes = 1;  // set by the caller
  return in;
}

}  // namespace

TEST_CASE("remat planner: the cheapest candidate equals brute force over every stage, micro-batch and "
          "plan",
          "[lab6][remat][planner]") {
  Rng rng(16, "planner-brute");
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    PlannerInput in = small_input(rng);
    if (trial % 2) {  // bf16 mixed precision
      in.param_bytes = 2;
      in.grad_bytes = 2;
      in.k = 12;
    }
    // Every candidate, at a huge budget first, to find the range of footprints.
    in.budget_bytes = 1e18;
    std::vector<PlanCandidate> all;
    for (int stage = 0; stage <= 3; ++stage)
      for (auto mb : micro_batches(in.batch))
        for (const auto& p : all_plans(in.cfg.n_layer))
          all.push_back(evaluate_candidate(in, stage, mb, p));
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (const auto& c : all) {
      lo = std::min(lo, c.total_bytes);
      hi = std::max(hi, c.total_bytes);
    }
    for (int b = 0; b < 5; ++b) {
      in.budget_bytes = lo + (hi - lo) * b / 4.0;
      const PlannerResult r = plan_memory(in);
      INFO("L = " << in.cfg.n_layer << ", ranks " << in.ranks << ", budget " << in.budget_bytes
                  << "\n" << explain(in, r));
      CHECK(r.best.fits);
      // The oracle: brute force over every candidate, after the planner ran.
      MLS_ORACLE(const PlanCandidate* best = nullptr;
                 for (const auto& c : all) {
                   if (c.total_bytes > in.budget_bytes) continue;
                   if (!best || c.total_s < best->total_s ||
                       (c.total_s == best->total_s && c.total_bytes < best->total_bytes))
                     best = &c;
                 })
      MLS_ORACLE_CHECK(REQUIRE(best != nullptr); CHECK(r.best.total_bytes <= in.budget_bytes);
                       CHECK(r.best.total_s == Approx(best->total_s).epsilon(1e-12));
                       CHECK(r.best.total_s <= best->total_s * (1 + 1e-12)));
      observe("best stage", r.best.stage);
      observe("best micro-batch", r.best.micro_batch);
      observe("best time", r.best.total_s, {1e-9, 0});
      observe("best bytes", r.best.total_bytes, {1e-12, 0});
      ++checked;
    }
  }
  MLS_CHECK_EQ(checked, 60);
}

TEST_CASE("remat planner: a candidate's bytes are the ZeRO formula plus the remat activations",
          "[lab6][remat][planner]") {
  PlannerInput in;
  in.cfg = config_by_name("nano");
  in.cfg.vocab_size = 65;
  in.batch = 8;
  in.context = 32;
  in.ranks = 4;
  in.budget_bytes = 64 * 1048576.0;
  const double psi = static_cast<double>(num_params(in.cfg));
  for (int stage = 0; stage <= 2; ++stage) {
    const PlanCandidate c = evaluate_candidate(in, stage, 4, sqrt_plan(3));
    observe("state bytes", c.state_bytes);
    observe("activation bytes", c.act_bytes);
    observe("recompute flops", c.recompute_flops, {1e-12, 0});
    MLS_CHECK_EQ(c.accum, 2);
    // The oracle: the formulas, after the code ran.
    MLS_ORACLE_CHECK(CHECK(c.state_bytes == zero_memory(stage, psi, 4, 8, 4, 4).total);
                     CHECK(c.act_bytes == static_cast<double>(remat_activation_bytes(in.cfg, 4, 32, sqrt_plan(3))));
                     CHECK(c.recompute_flops == 2.0 * 2.0 * block_forward_flops(in.cfg, 4, 32)));
    observe("comm s", c.comm_s, {1e-9, 0});
  }
  // One rank sends nothing.
  in.ranks = 1;
  for (int stage = 0; stage <= 3; ++stage) {
    const PlanCandidate c = evaluate_candidate(in, stage, 8, no_remat_plan(3));
    MLS_CHECK_EQ(c.comm_s, 0.0);
    MLS_CHECK_EQ(c.recompute_flops, 0.0);
    observe("flops", c.flops);
  }
  require_error([&] { evaluate_candidate(in, 4, 8, no_remat_plan(3)); }, "ZeRO stage 4");
  require_error([&] { evaluate_candidate(in, 0, 3, no_remat_plan(3)); }, "micro-batch 3");
}

TEST_CASE("remat planner: a budget too small for any plan is a named error", "[lab6][remat][planner]") {
  PlannerInput in;
  in.cfg = config_by_name("small");
  in.cfg.vocab_size = 65;
  in.batch = 4;
  in.context = 64;
  in.ranks = 2;
  in.budget_bytes = 1048576.0;  // 1 MiB: the states alone need more
  require_error([&] { plan_memory(in); }, "budget of 1.000 MiB");
  require_error([&] { plan_memory(in); }, "plan_memory");
  in.budget_bytes = 0;
  require_error([&] { plan_memory(in); }, "memory budget = 0");
  in.budget_bytes = 1e9;
  in.ranks = 0;
  require_error([&] { plan_memory(in); }, "ranks = 0");
  in.ranks = 2;
  const PlannerResult r = plan_memory(in);
  CHECK(r.best.fits);
  MLS_CHECK_EQ(r.why.size(), 4u);
  observe("choice", r.best.stage);
  observe("remat", r.best.remat);
}

TEST_CASE("remat planner: sizes parse and print, deeper ZeRO fits larger models", "[lab6][remat][planner]") {
  MLS_CHECK_EQ(parse_bytes("512MiB"), 536870912.0);
  MLS_CHECK_EQ(parse_bytes("1.5GiB"), 1.5 * 1073741824.0);
  MLS_CHECK_EQ(parse_bytes("800MB"), 8e8);
  MLS_CHECK_EQ(parse_bytes("1e9"), 1e9);
  observe("parsed", parse_bytes("3KiB"));
  require_error([] { parse_bytes("lots"); }, "'lots'");
  require_error([] { parse_bytes("5 parsecs"); }, "unit ' parsecs'");
  require_error([] { parse_bytes("-5MiB"); }, "'-5MiB'");
  PlannerInput in;
  in.cfg.vocab_size = 65;
  in.batch = 4;
  in.context = 32;
  in.ranks = 4;
  in.budget_bytes = 64 * 1048576.0;
  std::int64_t prev = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::int64_t L = largest_fitting(in, stage, 16);
    CHECK(L >= prev);
    prev = L;
    observe("largest L", L);
  }
  CHECK(prev > largest_fitting(in, 0, 16));  // stage 3 beats plain data parallel on 4 ranks
  // Without recompute plans, never a larger model; every choice keeps all activations.
  PlannerInput nr = in;
  nr.remat = false;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::int64_t L = largest_fitting(nr, stage, 16);
    CHECK(L <= largest_fitting(in, stage, 16));
    observe("largest L without remat", L);
  }
  nr.cfg = family_config(4, 32, 65);
  for (const auto& c : plan_memory(nr).per_stage) CHECK(c.remat == "none");
  require_error([&] { largest_fitting(in, 5); }, "ZeRO stage 5");
  require_error([] { family_config(0, 8, 8); }, "L = 0");
}

TEST_CASE("zero remat planner: the planner's choice trains on the ZeRO trainer at the bytes it predicted",
          "[lab6][remat][planner]") {
  // The ZeRO trainer now runs the recompute plan, so the planner's memory model can be checked
  // against a real run: its stage, micro-batch and plan, measured by the tracker on every rank.
  PlannerInput in;
  in.cfg = config_by_name("nano");
  in.cfg.vocab_size = 37;  // uneven units: the shards differ from psi/N by under one per unit
  in.batch = 4;
  in.context = 16;
  in.ranks = 2;
  const double units = static_cast<double>(zero_units(in.cfg).size());
  int fitted = 0;
  for (double mib : {0.45, 0.6, 0.8, 1.0, 1.3, 1.7, 2.2, 3.0}) {
    in.budget_bytes = mib * 1048576.0;
    PlannerResult pr;
    try {
      pr = plan_memory(in);
    } catch (const Error&) {
      continue;  // too small for anything (its own test checks the message)
    }
    ++fitted;
    const PlanCandidate& c = pr.best;
    ZeroRunOptions o;
    o.cfg = in.cfg;
    o.zero.stage = c.stage;
    o.zero.remat = "optimal";
    o.zero.remat_budget = static_cast<std::int64_t>(c.act_bytes);
    o.batch = c.micro_batch;
    o.context = in.context;
    o.steps = 1;
    const ZeroRunReport r = run_zero_simulated(in.ranks, o);
    INFO("budget " << mib << " MiB: stage " << c.stage << ", micro-batch " << c.micro_batch << ", plan "
                   << c.plan.to_string() << "; ran " << r.plan << "\n" << memory_table(r));
    CHECK(r.recomputed_blocks == c.plan.recomputed_layers());
    for (int k = 0; k < in.ranks; ++k) {
      const auto& pk = r.peak[static_cast<std::size_t>(k)];
      const double states = static_cast<double>(pk[0] + pk[1] + pk[2]);
      CHECK(std::abs(states - c.state_bytes) <= 16.0 * units);
      CHECK(static_cast<double>(pk[3]) == c.act_bytes);  // the activations to the byte
      CHECK(states + static_cast<double>(pk[3]) <= in.budget_bytes + 16.0 * units);
      observe("measured states + activations", pk[0] + pk[1] + pk[2] + pk[3]);
    }
    observe("choice", std::vector<std::int64_t>{c.stage, c.micro_batch, c.plan.recomputed_layers()});
  }
  CHECK(fitted >= 4);
  observe("budgets that fit", fitted);
}
