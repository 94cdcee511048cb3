// Lab 6: mixture of experts — routing with capacity (the handout's worked example, a sorting
// reference), the balancing loss and its gradient, the fused MoE path against the autodiff twin,
// float64 gradchecks of the router and the balancing loss, dense configs untouched, training,
// checkpoints and bad input.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "mls/autodiff/gradcheck.hpp"
#include "mls/llm/autodiff_model.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/llmc.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/moe.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/sample.hpp"
#include "mls/llm/train.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
namespace A = mls::autodiff;
using mls::testing::require_error;

namespace {

struct Routing {
  std::vector<std::int32_t> expert, slot, count, token;
  std::vector<float> gate;
  std::int64_t dropped = 0;
};

Routing route(const std::vector<float>& probs, std::int64_t N, std::int64_t E, std::int64_t K,
              std::int64_t cap) {
  Routing r;
  r.expert.assign(static_cast<std::size_t>(N * K), -7);
  r.slot.assign(r.expert.size(), -7);
  r.gate.assign(r.expert.size(), -7.f);
  r.count.assign(static_cast<std::size_t>(E), -7);
  r.token.assign(static_cast<std::size_t>(E * cap), -7);
  r.dropped = moe_route(probs.data(), N, E, K, cap, r.expert.data(), r.gate.data(), r.slot.data(),
                        r.count.data(), r.token.data());
  return r;
}

GPTConfig moe_config(std::int64_t L, std::int64_t E, std::int64_t K, std::int64_t every, double F,
                     double aux, double z) {
  GPTConfig c;
  c.n_layer = L;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 6;
  c.vocab_size = 11;
  c.moe_experts = E;
  c.moe_top_k = K;
  c.moe_every = every;
  c.capacity_factor = F;
  c.moe_aux_coef = aux;
  c.moe_z_coef = z;
  c.validate();
  return c;
}

/// Fused forward + backward: (cross-entropy + MoE losses, grads, stats).
struct FusedRun {
  double loss = 0;
  GPTGrads grads;
  std::vector<MoeBlockStats> stats;
};
FusedRun fused_run(const GPTParams& p, const Batch& b) {
  GPTActivations acts(p.config(), b.B, b.T), dacts(p.config(), b.B, b.T);
  FusedRun r;
  r.grads = GPTGrads(p.config());
  r.loss = gpt_forward(p, acts, b.inputs.data(), b.targets.data(), b.mask.data(), b.B, b.T);
  r.loss += moe_loss_total(p.config(), acts);
  gpt_backward(p, r.grads, acts, dacts, b.inputs.data(), b.targets.data(), b.mask.data());
  r.stats = moe_stats(p.config(), acts);
  return r;
}

#ifndef MLS_GRADED_BUILD
std::pair<double, GPTGrads> autodiff_run(const GPTParams& p, const Batch& b, DType dtype) {
  auto leaves = tape::to_leaves(p, dtype);
  A::Var loss = tape::gpt_loss(p.config(), leaves, tape::ids_tensor(b.inputs, b.B, b.T),
                               tape::ids_tensor(b.targets, b.B, b.T),
                               tape::mask_tensor(b.mask, b.B, b.T, dtype));
  loss.backward();
  return {loss.value().item(), tape::grads_of(p.config(), leaves)};
}
#endif

std::string tensor_name(const GPTConfig& cfg, std::size_t i) {
  return i < kNumParamTensors ? param_names()[i] : moe_param_names()[i - kNumParamTensors];
}

}  // namespace

TEST_CASE("moe_route: the handout's worked example, number for number", "[lab6][moe]") {
  // 6 tokens, 3 experts (handouts/lab6/README.md, "Mixture of experts").
  const std::vector<float> probs = {0.7f, 0.2f, 0.1f,  //
                                    0.6f, 0.3f, 0.1f,  //
                                    0.5f, 0.4f, 0.1f,  //
                                    0.1f, 0.8f, 0.1f,  //
                                    0.2f, 0.2f, 0.6f,  //
                                    0.3f, 0.1f, 0.6f};
  SECTION("K = 1 (Switch), F = 1: cap = ceil(1 * 1 * 6 / 3) = 2, token 2 dropped") {
    GPTConfig c = moe_config(1, 3, 1, 1, 1.0, 0.01, 0.0);
    MLS_OBSERVE(moe_capacity(c, 6));
    const Routing r = route(probs, 6, 3, 1, moe_capacity(c, 6));
    MLS_OBSERVE(r.dropped);
    mls::testing::observe("moe_route K=1 expert", r.expert);
    mls::testing::observe("moe_route K=1 slot", r.slot);
    mls::testing::observe("moe_route K=1 count", r.count);
    mls::testing::observe("moe_route K=1 gate", r.gate, {1e-6, 0.0});
    MLS_ORACLE_CHECK(CHECK(moe_capacity(c, 6) == 2); CHECK(r.dropped == 1);
                     CHECK(r.expert == std::vector<std::int32_t>{0, 0, 0, 1, 2, 2});
                     CHECK(r.slot == std::vector<std::int32_t>{0, 1, -1, 2, 4, 5});
                     CHECK(r.count == std::vector<std::int32_t>{2, 1, 2});
                     CHECK(r.token[0] == 0); CHECK(r.token[1] == 1); CHECK(r.token[2] == 3);
                     CHECK(r.token[4] == 4); CHECK(r.token[5] == 5);
                     for (int t = 0; t < 6; ++t) CHECK(r.gate[t] == probs[t * 3 + r.expert[t]]););
    // The balancing loss (coef 1): frac = (3, 1, 2) / 6, P = (2.4, 2.0, 1.6) / 6,
    // 3 * (0.5 * 0.4 + 1/6 * 1/3 + 1/3 * 0.26667) = 1.03333.
    std::vector<float> frac(3);
    const double bl = moe_balance_loss_forward(probs.data(), r.expert.data(), 6, 3, 1, 1.0, frac.data());
    mls::testing::observe("moe_balance_loss_forward(example, K=1)", bl, {1e-6, 0.0});
    mls::testing::observe("moe_balance_loss_forward frac", frac, {1e-6, 0.0});
    MLS_ORACLE_CHECK(CHECK(bl == Approx(31.0 / 30.0).epsilon(1e-6)); CHECK(frac[0] == Approx(0.5));
                     CHECK(frac[1] == Approx(1.0 / 6)); CHECK(frac[2] == Approx(1.0 / 3)););
  }
  SECTION("K = 2 (GShard), F = 1: cap = 4, tokens 4 and 5 lose their second choice") {
    GPTConfig c = moe_config(1, 3, 2, 1, 1.0, 0.01, 0.0);
    MLS_OBSERVE(moe_capacity(c, 6));
    const Routing r = route(probs, 6, 3, 2, moe_capacity(c, 6));
    MLS_OBSERVE(r.dropped);
    mls::testing::observe("moe_route K=2 expert", r.expert);
    mls::testing::observe("moe_route K=2 slot", r.slot);
    mls::testing::observe("moe_route K=2 count", r.count);
    mls::testing::observe("moe_route K=2 gate", r.gate, {1e-6, 0.0});
    MLS_ORACLE_CHECK(
        CHECK(moe_capacity(c, 6) == 4); CHECK(r.dropped == 2);
        CHECK(r.expert == std::vector<std::int32_t>{0, 1, 0, 1, 0, 1, 1, 0, 2, 0, 2, 0});
        CHECK(r.slot == std::vector<std::int32_t>{0, 5, 1, 6, 2, 7, 4, 3, 8, -1, 9, -1});
        CHECK(r.count == std::vector<std::int32_t>{4, 4, 2});
        const double want_gate[] = {0.7 / 0.9, 0.2 / 0.9, 0.6 / 0.9, 0.3 / 0.9, 0.5 / 0.9, 0.4 / 0.9,
                                    0.8 / 0.9, 0.1 / 0.9, 0.6 / 0.8, 0.2 / 0.8, 0.6 / 0.9, 0.3 / 0.9};
        for (int i = 0; i < 12; ++i) CHECK(r.gate[i] == Approx(want_gate[i]).epsilon(1e-6)););
  }
}

TEST_CASE("moe_route: random probabilities against a sorting reference", "[lab6][moe]") {
  Rng rng(31, "moe-route");
  for (int trial = 0; trial < 20; ++trial) {
    const std::int64_t N = rng.randint(1, 40), E = rng.randint(1, 9), K = rng.randint(1, E + 1);
    const std::int64_t cap = rng.randint(1, 2 * N * K / E + 2);
    std::vector<float> probs(static_cast<std::size_t>(N * E));
    for (auto& x : probs) x = static_cast<float>(rng.randint(0, 6)) / 8.f;  // ties on purpose
    INFO("trial " << trial << ": N " << N << " E " << E << " K " << K << " cap " << cap);
    const Routing r = route(probs, N, E, K, cap);
    MLS_OBSERVE(r.dropped);
    mls::testing::observe("moe_route expert", r.expert);
    mls::testing::observe("moe_route slot", r.slot);
    mls::testing::observe("moe_route count", r.count);
    mls::testing::observe("moe_route gate", r.gate, {1e-6, 1e-7});
    // The oracle: a stable sort of each row by descending probability, then the claims.
    MLS_ORACLE(
        std::vector<std::int32_t> ex(static_cast<std::size_t>(N * K)), sl(ex.size()), cnt(static_cast<std::size_t>(E), 0);
        std::int64_t drop = 0;
        for (std::int64_t t = 0; t < N; ++t) {
          std::vector<std::int32_t> order(static_cast<std::size_t>(E));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[t * E + a] > probs[t * E + b]; });
          for (std::int64_t k = 0; k < K; ++k) ex[t * K + k] = order[k];
        } for (std::int64_t k = 0; k < K; ++k) for (std::int64_t t = 0; t < N; ++t) {
          const auto e = ex[t * K + k];
          if (cnt[e] < cap) sl[t * K + k] = static_cast<std::int32_t>(e * cap + cnt[e]++);
          else sl[t * K + k] = -1, ++drop;
        })
    MLS_ORACLE_CHECK(CHECK(r.expert == ex); CHECK(r.slot == sl); CHECK(r.count == cnt); CHECK(r.dropped == drop);
                     for (std::int64_t t = 0; t < N; ++t) {
                       double s = 0;
                       for (std::int64_t k = 0; k < K; ++k) s += probs[t * E + ex[t * K + k]];
                       for (std::int64_t k = 0; k < K; ++k) {
                         const double want = K == 1 ? probs[t * E + ex[t * K]] : probs[t * E + ex[t * K + k]] / s;
                         CHECK(r.gate[t * K + k] == Approx(want).epsilon(1e-6).margin(1e-7));
                       }
                       for (std::int64_t k = 0; k < K; ++k)
                         if (sl[t * K + k] >= 0) CHECK(r.token[sl[t * K + k]] == t);
                     });
  }
}

TEST_CASE("moe balancing loss: forward and gradient against a double reference", "[lab6][moe]") {
  Rng rng(32, "moe-balance");
  for (int trial = 0; trial < 8; ++trial) {
    const std::int64_t N = rng.randint(1, 30), E = rng.randint(2, 7), K = rng.randint(1, E + 1);
    std::vector<float> probs(static_cast<std::size_t>(N * E));
    for (std::int64_t t = 0; t < N; ++t) {
      double s = 0;
      for (std::int64_t e = 0; e < E; ++e) s += probs[t * E + e] = rng.uniform_float() + 0.01f;
      for (std::int64_t e = 0; e < E; ++e) probs[t * E + e] = static_cast<float>(probs[t * E + e] / s);
    }
    const Routing r = route(probs, N, E, K, N * K);
    const double coef = 0.5 + trial;
    const float scale = 0.25f * static_cast<float>(trial + 1);
    std::vector<float> frac(static_cast<std::size_t>(E));
    const double loss = moe_balance_loss_forward(probs.data(), r.expert.data(), N, E, K, coef, frac.data());
    std::vector<float> dp(probs.size(), 1.f);  // accumulates onto 1
    moe_balance_loss_backward(dp.data(), frac.data(), N, E, coef, scale);
    mls::testing::observe("moe_balance_loss_forward", loss, {1e-6, 1e-9});
    mls::testing::observe("moe_balance_loss_forward frac", frac, {1e-6, 0.0});
    mls::testing::observe("moe_balance_loss_backward dprobs", dp, {1e-6, 1e-9});
    MLS_ORACLE(std::vector<double> f(static_cast<std::size_t>(E), 0.0), P(static_cast<std::size_t>(E), 0.0);
               for (std::int64_t i = 0; i < N * K; ++i) f[r.expert[i]] += 1.0 / (N * K);
               for (std::int64_t t = 0; t < N; ++t) for (std::int64_t e = 0; e < E; ++e) P[e] += probs[t * E + e] / double(N);
               double want = 0; for (std::int64_t e = 0; e < E; ++e) want += coef * E * f[e] * P[e];)
    MLS_ORACLE_CHECK(CHECK(loss == Approx(want).epsilon(1e-6));
                     for (std::int64_t e = 0; e < E; ++e) {
                       CHECK(frac[e] == Approx(f[e]).epsilon(1e-6));
                       for (std::int64_t t = 0; t < N; ++t)
                         CHECK(dp[t * E + e] == Approx(1.0 + scale * coef * E * f[e] / N).epsilon(1e-6));
                     });
  }
}

TEST_CASE("fused MoE: the same loss and gradients as the autodiff path, drops included",
          "[lab6][moe]") {
  struct Case {
    std::int64_t L, E, K, every;
    double F, aux, z;
  };
  const Case cases[] = {{2, 4, 2, 1, 0.6, 0.05, 0.0},   // GShard top-2, every block, tight capacity
                        {3, 3, 1, 2, 0.5, 0.1, 0.02},   // Switch, every 2nd block, z-loss
                        {2, 5, 3, 1, 2.0, 0.01, 0.01}};  // top-3, room for every choice
  Rng rng(33, "moe-fused");
  int with_drops = 0;
  for (const Case& k : cases) {
    const GPTConfig cfg = moe_config(k.L, k.E, k.K, k.every, k.F, k.aux, k.z);
    const GPTParams p = random_params(cfg, rng);
    const Batch b = random_batch(cfg, 3, 6, rng);
    INFO("L " << k.L << " E " << k.E << " K " << k.K << " every " << k.every << " F " << k.F);
    const FusedRun f = fused_run(p, b);
    MLS_OBSERVE(f.loss, {2e-5, 0.0});
    for (const auto& s : f.stats) {
      mls::testing::observe("moe_stats tokens, layer " + std::to_string(s.layer), s.tokens);
      mls::testing::observe("moe_stats dropped, layer " + std::to_string(s.layer), s.dropped);
      with_drops += s.dropped > 0;
    }
    MLS_ORACLE(const auto [la, ga] = autodiff_run(p, b, DType::Float32);
               const auto [l64, g64] = autodiff_run(p, b, DType::Float64);)
    MLS_ORACLE_CHECK(CHECK(f.loss == Approx(la).epsilon(1e-5)); CHECK(f.loss == Approx(l64).epsilon(1e-5)));
    const auto ranges = param_ranges(cfg);
    REQUIRE(ranges.size() == tape::num_leaves(cfg));
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const std::int64_t n = ranges[i].end - ranges[i].begin;
      if (n == 0) continue;
      INFO("tensor " << tensor_name(cfg, i));
      observe_rel(tensor_name(cfg, i), f.grads.data() + ranges[i].begin,
                  LAB6_WANT(g64.data() + ranges[i].begin), n, 2e-4);
      MLS_ORACLE_CHECK(CHECK(rel_err(f.grads.data() + ranges[i].begin, ga.data() + ranges[i].begin, n) < 2e-4);
                       CHECK(rel_err(f.grads.data() + ranges[i].begin, g64.data() + ranges[i].begin, n) < 2e-4));
    }
  }
  CHECK(with_drops > 0);  // capacity dropped choices in the checked passes
}

TEST_CASE("MoE autodiff twin: float64 gradcheck of the router, the experts and the balancing loss",
          "[lab6][moe]") {
  Rng rng(34, "moe-gradcheck");
  for (const std::int64_t K : {1, 2}) {
    const GPTConfig cfg = moe_config(1, 3, K, 1, 0.7, 0.3, 0.05);
    const std::int64_t B = 2, T = 3, C = cfg.n_embd, E = 3;
    auto rnd = [&](Shape s, double sd, double mean = 0.0) {
      return Tensor::randn(s, rng, mean, sd, DType::Float64);
    };
    const std::vector<Tensor> in = {rnd({B, T, C}, 1.0), rnd({C}, 0.3, 1.0), rnd({C}, 0.3), rnd({E, C}, 0.5), rnd({E, 4 * C, C}, 0.3),
                                    rnd({E, 4 * C}, 0.1), rnd({E, C, 4 * C}, 0.3), rnd({E, C}, 0.1)};
    const A::GradFn f = [&](const std::vector<A::Var>& v) {
      A::Var loss;
      A::Var y = tape::moe_sublayer(cfg, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], &loss);
      return A::sum(y * y) * 0.1 + loss;
    };
    // The student's routing decides the pass; record its value and the router's gradient.
    std::vector<A::Var> leaves;
    for (const Tensor& t : in) leaves.emplace_back(t, true);
    A::Var out = f(leaves);
    out.backward();
    mls::testing::observe("moe_sublayer loss, K=" + std::to_string(K), out.value().item(), {1e-9, 1e-12});
    const Tensor gr = leaves[3].grad().value().compact();
    mls::testing::observe("moe_sublayer d(router), K=" + std::to_string(K),
                          std::vector<double>(gr.data<double>(), gr.data<double>() + gr.numel()), {1e-7, 1e-10});
    A::GradcheckOptions o;
    o.mode = A::CheckMode::Eager;
    MLS_ORACLE(const A::GradcheckResult res = A::gradcheck(f, in, o);)
    MLS_ORACLE_CHECK(INFO(res.report); CHECK(res.ok););
  }
}

TEST_CASE("dense configs: the MoE fields change nothing while moe_experts = 0", "[lab6][moe]") {
  Rng rng(35, "moe-dense");
  GPTConfig c = config_by_name("nano");
  c.vocab_size = 13;
  GPTConfig d = c;
  d.moe_top_k = 7, d.moe_every = 9, d.capacity_factor = -1, d.moe_aux_coef = 3, d.moe_z_coef = 2;
  CHECK_NOTHROW(d.validate());
  const GPTParams pc = init_params(c, 5);
  GPTParams pd = init_params(d, 5);
  REQUIRE(pc.vec() == pd.vec());
  const Batch b = random_batch(c, 2, 8, rng);
  const FusedRun rc = fused_run(pc, b);
  const FusedRun rd = fused_run(pd, b);
  MLS_OBSERVE(rd.loss, {2e-5, 0.0});
  CHECK(rc.loss == rd.loss);
  CHECK(rc.grads.vec() == rd.grads.vec());
  CHECK(rd.stats.empty());
  CHECK(param_ranges(d).size() == static_cast<std::size_t>(kNumParamTensors));
  CHECK(num_active_params(d) == num_params(d));
  const auto L = c.n_layer, C = c.n_embd, V = c.vocab_size, T = c.block_size;
  CHECK(num_params(d) == L * (12 * C * C + 13 * C) + V * C + T * C + 2 * C);
  CHECK(GPTActivations(d, 2, 8).num_floats() == GPTActivations(c, 2, 8).num_floats());
}

TEST_CASE("MoE counts: parameters, active parameters and the layout", "[lab6][plumbing]") {
  const GPTConfig c = moe_config(4, 4, 2, 2, 1.25, 0.01, 0.0);  // blocks 1 and 3 are MoE
  const std::int64_t C = c.n_embd, V = c.vocab_size, T = c.block_size, mlp = 8 * C * C + 5 * C;
  MLS_OBSERVE(num_params(c));
  MLS_OBSERVE(num_active_params(c));
  MLS_OBSERVE(flops_params(c));
  CHECK(num_moe_blocks(c) == 2);
  CHECK(!is_moe_block(c, 0));
  CHECK(is_moe_block(c, 1));
  CHECK(is_moe_block(c, 3));
  CHECK(num_params(c) == 4 * (4 * C * C + 8 * C) + 2 * mlp + 2 * 4 * (mlp + C) + V * C + T * C + 2 * C);
  CHECK(num_active_params(c) == num_params(c) - 2 * 2 * mlp);
  const auto r = param_ranges(c);
  CHECK(r.back().end == num_params(c));
  CHECK(GPTParams(c).size() == num_params(c));
  // capacity = ceil(F K N / E): 1.25 * 2 * 10 / 4 = 6.25 -> 7
  CHECK(moe_capacity(c, 10) == 7);
}

TEST_CASE("MoE training: the trainer lowers the loss on the sort task, checkpoints round-trip",
          "[lab6][moe]") {
  GPTConfig cfg = moe_config(2, 4, 2, 1, 1.25, 0.01, 0.001);
  cfg.vocab_size = kSortV;
  cfg.block_size = kSortT;
  cfg.n_embd = 16;
  TrainOptions o;
  o.batch = 8;
  o.context = kSortT;
  o.steps = 40;
  o.warmup = 2;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  Trainer tr(init_params(cfg, 1), o);
  Rng rng(36, "moe-train");
  double first = 0, last = 0;
  for (int s = 0; s < o.steps; ++s) {
    const StepStats st = tr.step(sort_batch(o.batch, rng));
    if (s == 0) first = st.loss;
    last = st.loss;
  }
  MLS_OBSERVE(first, {1e-3, 0.0});
  MLS_OBSERVE(last, {1e-3, 0.0});
  CHECK(last < first - 0.3);
  // Round trip: the MoE config and tensors come back.
  Checkpoint ck = trainer_checkpoint(tr, "", 0);
  const Checkpoint back = parse_checkpoint(serialize_checkpoint(ck), "moe.ckpt");
  CHECK(back.config == cfg);
  CHECK(get_params(back, "") == tr.params.vec());
  Trainer tr2(GPTParams(cfg), o);
  restore_trainer(tr2, back);
  CHECK(tr2.params.vec() == tr.params.vec());
}

TEST_CASE("MoE bad input: top-k, capacity factor, every, loading across dense and MoE, llm.c export",
          "[lab6][config]") {
  GPTConfig c = moe_config(2, 4, 2, 1, 1.25, 0.01, 0.0);
  GPTConfig d = c;
  d.moe_top_k = 5;
  require_error([&] { d.validate(); }, "moe_top_k = 5, expected 1..moe_experts = 4");
  d = c, d.moe_top_k = 0;
  require_error([&] { d.validate(); }, "moe_top_k = 0, expected 1..moe_experts = 4");
  d = c, d.capacity_factor = 0;
  require_error([&] { d.validate(); }, "capacity_factor = 0, expected a finite value > 0");
  d = c, d.capacity_factor = -1.5;
  require_error([&] { d.validate(); }, "capacity_factor = -1.5, expected a finite value > 0");
  d = c, d.moe_every = 3;
  require_error([&] { d.validate(); }, "moe_every = 3, expected 1..n_layer = 2");
  d = c, d.moe_experts = -1;
  require_error([&] { d.validate(); }, "moe_experts = -1, expected 0 (dense) or 1..1024");
  d = c, d.moe_aux_coef = -0.5;
  require_error([&] { d.validate(); }, "moe_aux_coef = -0.5, expected a finite value >= 0");
  d = c, d.moe_z_coef = -1;
  require_error([&] { d.validate(); }, "moe_z_coef = -1, expected a finite value >= 0");
  std::vector<float> probs(8, 0.25f);
  std::vector<std::int32_t> ib(16);
  std::vector<float> fb(16);
  require_error([&] { moe_route(probs.data(), 2, 4, 5, 2, ib.data(), fb.data(), ib.data(), ib.data(), ib.data()); },
                "moe_route: N = 2, E = 4, K = 5, cap = 2, expected N >= 0, 1 <= K <= E and cap >= 1");
  // Loading an MoE checkpoint into a dense config, and the reverse.
  GPTConfig dense = c;
  dense.moe_experts = 0;
  require_error([&] { check_resume_compatible(c, dense); },
                "resume: the checkpoint holds capacity_factor = 1.25, moe_aux_coef = 0.01");
  require_error([&] { check_resume_compatible(dense, c); },
                "resume: the checkpoint holds a dense model (moe_experts = 0), the run asks for capacity_factor");
  Checkpoint ck;
  ck.config = c;
  add_params(ck, "", init_params(c, 2).vec());
  Checkpoint as_dense = parse_checkpoint(serialize_checkpoint(ck), "moe.ckpt");
  as_dense.config = dense;
  require_error([&] { get_params(as_dense, ""); }, "array 'fcw' has shape [0, 32, 8], the config needs [2, 32, 8]");
  TrainOptions small;
  small.batch = 2;
  small.context = 4;
  Trainer tr(init_params(dense, 3), small);
  require_error([&] { restore_trainer(tr, parse_checkpoint(serialize_checkpoint(ck), "moe.ckpt")); },
                "the checkpoint holds capacity_factor = 1.25");
  require_error([&] { serialize_llmc(c, init_params(c, 2).vec()); },
                "export llm.c: an MoE model (moe_experts = 4) has no llm.c layout");
}

TEST_CASE("MoE sampling: the KV cache gives the logits of the full forward pass", "[lab6][moe]") {
  // F = E / K: capacity K·N/K... = N rows per expert, so the full pass drops nothing either.
  for (const std::int64_t K : {1, 2}) {
    const GPTConfig cfg = moe_config(3, 4, K, 2, 4.0 / static_cast<double>(K), 0.01, 0.0);
    Rng rng(37, "moe-sample");
    const GPTParams p = random_params(cfg, rng);
    const std::int64_t T = cfg.block_size;
    std::vector<std::int32_t> ids;
    for (std::int64_t t = 0; t < T; ++t) ids.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
    KVCache cache(cfg);
    std::vector<float> cached(static_cast<std::size_t>(T * cfg.vocab_size));
    for (std::int64_t t = 0; t < T; ++t)
      forward_cached(p, cache, ids[static_cast<std::size_t>(t)], cached.data() + t * cfg.vocab_size);
    observe_rel("forward_cached logits, K=" + std::to_string(K), cached.data(), nullptr, T * cfg.vocab_size, 0);
    GPTActivations acts(cfg, 1, T);
    gpt_forward(p, acts, ids.data(), nullptr, nullptr, 1, T);
    for (const auto& s : moe_stats(cfg, acts)) CHECK(s.dropped == 0);
    CHECK(rel_err(cached.data(), acts.logits, T * cfg.vocab_size) < 1e-5);
  }
}

TEST_CASE("MoE under recompute: the sqrt plan gives the plain step's loss, parameters and routing bit for bit",
          "[lab6][moe]") {
  GPTConfig cfg = moe_config(4, 4, 2, 2, 0.8, 0.02, 0.01);  // blocks 1 and 3 MoE, drops
  TrainOptions o;
  o.batch = 3;
  o.context = 6;
  o.steps = 3;
  o.warmup = 1;
  Rng rng(38, "moe-remat");
  const GPTParams init = random_params(cfg, rng);
  Trainer plain(init, o), remat(init, o);
  RematActivations ra(cfg, o.batch, o.context, sqrt_plan(cfg.n_layer));
  MoeRecord record;  // the segments keep one block at a time: each MoE forward records its routing
  ra.seg.moe_record = &record;
  for (int s = 0; s < 3; ++s) {
    const Batch b = random_batch(cfg, o.batch, o.context, rng);
    const StepStats a = plain.step(b), r = remat.step(b, ra);
    MLS_OBSERVE(r.loss, {1e-6, 0.0});
    CHECK(a.loss == r.loss);
    const std::vector<MoeBlockStats> want = moe_stats(cfg, plain.acts), got = record.stats(cfg);
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      CHECK(got[k].layer == want[k].layer);
      CHECK(got[k].tokens == want[k].tokens);
      CHECK(got[k].dropped == want[k].dropped);
      CHECK(got[k].balance_loss == want[k].balance_loss);
    }
  }
  CHECK(plain.params.vec() == remat.params.vec());
}
