// Lab 6: expert parallelism on lab 5's simulated ranks — the same outputs, gradients and (after
// 10 SGD steps) parameters as the single-rank fused MoE, drops included; bad input.
#include <catch2/catch.hpp>
#include <cmath>

#include "lab6_helpers.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/moe_ep.hpp"
#include "mls/llm/tokenizer.hpp"
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

// ---- the sharded model: memory, the step path's other modes, checkpoints, utilisation ----------

namespace {
/// The EP run on P simulated ranks and the single-rank run over the union batch agree: losses,
/// drops, utilisation and (within float32 rounding, 5e-5 relative) the parameters.
void check_ep_equals_single(const std::string& what, int P, const EpRunOptions& o) {
  EpRunOptions whole = o;
  whole.batch = P * o.batch;
  whole.save.clear();
  const EpRunReport ep = run_ep_simulated(P, o);
  mls::testing::observe(what + ": losses", ep.losses, {1e-4, 1e-6});
  mls::testing::observe(what + ": dropped", ep.dropped);
  REQUIRE(ep.moe.size() == ep.losses.size());
  mls::testing::observe(what + ": tokens per expert, last step", ep.moe.back().tokens);
  MLS_ORACLE_CHECK({
    const EpRunReport single = run_ep_simulated(1, whole);
    observe_rel(what + ": parameters", ep.final_params.data(), single.final_params.data(),
                static_cast<std::int64_t>(ep.final_params.size()), 5e-5);
    CHECK(ep.dropped == single.dropped);
    CHECK(ep.moe.back().tokens == single.moe.back().tokens);
    for (std::size_t s = 0; s < ep.losses.size(); ++s) CHECK(ep.losses[s] == Approx(single.losses[s]).epsilon(1e-5));
    const double err = rel_err(ep.final_params.data(), single.final_params.data(),
                               static_cast<std::int64_t>(ep.final_params.size()));
    INFO(what << ": relative error of the parameters " << err);
    CHECK(err < 5e-5);
  });
}
}  // namespace

TEST_CASE("expert parallelism in the GPT: each rank allocates, updates and keeps moments for its own experts only",
          "[lab6][moe_ep]") {
  for (const int P : {2, 4}) {
    INFO("P " << P);
    EpRunOptions o = ep_run_options(4, 2, 2);
    o.steps = 2;
    const EpRunReport ep = run_ep_simulated(P, o);  // the student's exchanges first
    mls::testing::observe("sharded run: parameters per rank, P " + std::to_string(P),
                          std::vector<std::int64_t>{ep.param_floats, ep.expert_floats});
    const GPTConfig& full = o.cfg;
    const std::int64_t experts_all = num_params(full) - moe_param_offsets(full)[kMoeFcw];
    // The expert part shrinks by P; the rest (embeddings, attention, routers) is replicated.
    CHECK(ep.expert_floats * P == experts_all);
    CHECK(ep.param_floats - ep.expert_floats == num_params(full) - experts_all);
    for (int r = 0; r < P; ++r) {
      const GPTConfig c = sharded(full, P, r);
      GPTParams p(c);
      GPTGrads g(c);
      AdamWState adam(p.size());
      CHECK(p.size() == ep.param_floats);
      CHECK(static_cast<std::int64_t>(g.vec().size()) == ep.param_floats);
      CHECK(static_cast<std::int64_t>(adam.m.size() + adam.v.size()) == 2 * ep.param_floats);
      // The shard's initial values are the whole model's, its experts' slices.
      CHECK(init_params(c, o.seed).vec() == shard_experts(c, init_params(full, o.seed).vec()));
    }
    // The memory tracker sees the same: each rank's parameter, gradient and AdamW bytes.
    mem::Tracker& t = mem::global();
    t.set_enabled(true);
    t.reset();
    (void)run_ep_simulated(P, o);
    std::vector<std::int64_t> bytes;
    for (int r = 0; r < P; ++r)
      for (mem::Tag tag : {mem::Tag::Parameter, mem::Tag::Gradient, mem::Tag::OptimizerState})
        bytes.push_back(t.peak(tag, r));
    t.set_enabled(false);
    mls::testing::observe("sharded run: tracked parameter, gradient, AdamW bytes per rank, P " + std::to_string(P), bytes);
    for (int r = 0; r < P; ++r) {
      CHECK(bytes[static_cast<std::size_t>(3 * r)] == 4 * ep.param_floats);
      CHECK(bytes[static_cast<std::size_t>(3 * r + 1)] == 4 * ep.param_floats);
      CHECK(bytes[static_cast<std::size_t>(3 * r + 2)] == 8 * ep.param_floats);
    }
    // Gathering every rank's shard rebuilds the whole model.
    const std::vector<float> all = init_params(full, 3).vec();
    parallel::run_simulated(P, [&](Communicator& comm) {
      const GPTConfig c = sharded(full, P, comm.rank());
      const std::vector<float> back = gather_experts(comm, c, shard_experts(c, all));
      if (comm.rank() == 0) CHECK(back == all);
    });
  }
}

TEST_CASE("expert parallelism in the GPT: --accum, --remat and --data equal the single-rank run", "[lab6][moe_ep]") {
  {
    EpRunOptions o = ep_run_options(4, 2, 4);
    o.accum = 2;  // rank r's micro-batch k: global rows (k·P + r)·b ...
    check_ep_equals_single("EP 2, accum 2", 2, o);
    o.batch = 2;
    check_ep_equals_single("EP 4, accum 2", 4, o);
  }
  {
    EpRunOptions o = ep_run_options(4, 1, 2);
    o.cfg.n_layer = 4;
    o.remat = RecomputeKind::Sqrt;  // the recomputed MoE blocks exchange again and route the same
    check_ep_equals_single("EP 2, remat sqrt", 2, o);
    o.accum = 2;
    check_ep_equals_single("EP 2, remat sqrt, accum 2", 2, o);
  }
  {
    const std::string text = random_words(800, 5);  // generated text (tests never read the benchmark data)
    auto tok = train_char_tokenizer(text);
    EpRunOptions o = ep_run_options(4, 2, 2);
    o.cfg.vocab_size = tok->vocab_size();
    o.text = std::make_shared<const TextData>(text, *tok, o.cfg.block_size, o.seed);
    o.tokenizer = tok->serialize();
    check_ep_equals_single("EP 2, text", 2, o);
  }
}

TEST_CASE("expert parallelism in the GPT: checkpoints hold the whole model, an EP run's resume on one rank and back",
          "[lab6][moe_ep]") {
  llm_test::TempDir dir("ep_ckpt");
  EpRunOptions o = ep_run_options(4, 2, 2);
  EpRunOptions half = o;
  half.steps = 5;
  half.save = dir.file("ep.bin");
  (void)run_ep_simulated(2, half);  // EP 2 for 5 steps, the experts gathered into one file
  const Checkpoint ck = load_checkpoint(half.save);
  CHECK(ck.config == o.cfg);
  CHECK(ck.step == 5);
  // One rank continues the EP run: the same as one rank all along (float32 rounding).
  EpRunOptions one = o;
  one.batch = 2 * o.batch;
  one.resume = half.save;
  const EpRunReport resumed = run_ep_simulated(1, one);
  CHECK(resumed.first_step == 5);
  CHECK(resumed.losses.size() == 5);
  mls::testing::observe("EP 2 -> 1 rank resume: losses", resumed.losses, {1e-4, 1e-6});
  // And back: a single-rank checkpoint into EP 2 (every rank keeps its experts).
  EpRunOptions single_half = one;
  single_half.resume.clear();
  single_half.steps = 5;
  single_half.save = dir.file("one.bin");
  (void)run_ep_simulated(1, single_half);
  EpRunOptions back = o;
  back.resume = single_half.save;
  const EpRunReport ep_resumed = run_ep_simulated(2, back);
  mls::testing::observe("1 rank -> EP 2 resume: losses", ep_resumed.losses, {1e-4, 1e-6});
  MLS_ORACLE_CHECK({
    EpRunOptions straight = o;
    straight.batch = 2 * o.batch;
    const EpRunReport all = run_ep_simulated(1, straight);
    CHECK(rel_err(resumed.final_params.data(), all.final_params.data(),
                  static_cast<std::int64_t>(all.final_params.size())) < 5e-5);
    CHECK(rel_err(ep_resumed.final_params.data(), all.final_params.data(),
                  static_cast<std::int64_t>(all.final_params.size())) < 5e-5);
    for (std::size_t s = 0; s < 5; ++s) {
      CHECK(resumed.losses[s] == Approx(all.losses[s + 5]).epsilon(1e-5));
      CHECK(ep_resumed.losses[s] == Approx(all.losses[s + 5]).epsilon(1e-5));
    }
  });
  // --init-from: the weights only, from step 0.
  EpRunOptions init = o;
  init.init_from = half.save;
  init.steps = 1;
  CHECK(run_ep_simulated(2, init).first_step == 0);
  // Bad input.
  EpRunOptions both = back;
  both.init_from = half.save;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, both); },
                              ", expected one of them (resume continues a run, init-from starts from its weights)");
  EpRunOptions done = back;
  done.steps = 5;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, done); },
                              "the checkpoint is at step 5, expected fewer than --steps 5 (the total)");
  EpRunOptions other = back;
  other.cfg.moe_experts = 2;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, other); }, "train --ep --resume");
  EpRunOptions dense = back;
  dense.resume = dir.file("dense.bin");
  {
    Checkpoint d;
    d.config = o.cfg;
    d.config.moe_experts = 0;
    add_params(d, "", init_params(d.config, 1).vec());
    save_checkpoint(dense.resume, d);
  }
  mls::testing::require_error([&] { (void)run_ep_simulated(2, dense); }, "a dense model (moe_experts = 0)");
  Checkpoint shard;
  shard.config = sharded(o.cfg, 2, 1);
  mls::testing::require_error([&] { (void)serialize_checkpoint(shard); },
                              "checkpoint: a config of expert shard 1 of 2, expected the whole model");
}

TEST_CASE("expert parallelism in the GPT: the group's utilisation per step, and what a sharded config refuses",
          "[lab6][moe_ep]") {
  EpRunOptions o = ep_run_options(4, 2, 2);
  o.steps = 3;
  const EpRunReport ep = run_ep_simulated(2, o);
  REQUIRE(ep.moe.size() == 3);
  for (const MoeRow& m : ep.moe) {
    mls::testing::observe("EP 2 utilisation, step " + std::to_string(m.step), m.tokens);
    std::int64_t kept = 0;
    for (auto t : m.tokens) kept += t;
    CHECK(m.tokens.size() == 4);
    CHECK(m.choices == 2 * 2 * 2 * 8 * 2);  // 2 blocks x (2 ranks x 2 rows x 8 tokens) x K = 2
    CHECK(kept + m.dropped == m.choices);
    CHECK(m.dropped == ep.dropped[static_cast<std::size_t>(m.step)]);
  }
  MLS_ORACLE_CHECK({
    EpRunOptions whole = o;
    whole.batch = 4;
    const EpRunReport single = run_ep_simulated(1, whole);
    for (std::size_t s = 0; s < 3; ++s) CHECK(ep.moe[s].tokens == single.moe[s].tokens);
  });
  // A sharded config runs only with an expert-parallel dispatch, and names itself.
  const GPTConfig c = sharded(o.cfg, 2, 1);
  GPTParams p = init_params(c, 1);
  GPTActivations a(c, 1, 8);
  std::vector<std::int32_t> in(8, 1);
  FlatModel m(c, p.views(), ParamPtrs{});
  mls::testing::require_error([&] { (void)model_forward(c, m, PassBuffers::keep(a), MicroBatch{in.data(), nullptr, nullptr, 1, 8}); },
                              "moe_mlp_forward: block 0 holds shard 1 of 2 of the experts, expected an expert-parallel dispatch");
  mls::testing::require_error([&] { (void)sharded(o.cfg, 3, 0); }, "sharded: moe_experts = 4 over 3 shards (shard 0)");
  mls::testing::require_error([&] { (void)sharded(o.cfg, 2, 2); }, "sharded: moe_experts = 4 over 2 shards (shard 2)");
  mls::testing::require_error([&] { (void)sharded(c, 2, 0); }, "sharded: the config is already shard 1 of 2");
  GPTConfig bad = o.cfg;
  bad.moe_shards = 3;
  mls::testing::require_error([&] { bad.validate(); }, "GPTConfig: moe_shards = 3, moe_shard = 0 with moe_experts = 4");
  EpRunOptions acc = o;
  acc.accum = 3;
  mls::testing::require_error([&] { (void)run_ep_simulated(2, acc); },
                              "train --ep: accum = 3 with batch = 2, expected accum >= 1 dividing the rows per rank");
  parallel::run_simulated(2, [&](Communicator& comm) {
    mls::testing::require_error([&] { EpDispatch d(sharded(o.cfg, 2, 1 - comm.rank()), comm, 4); },
                                "EpDispatch: a config of expert shard");
  });
}

TEST_CASE("expert parallelism in the GPT: bf16 (fp32 master) agrees with one rank within bf16 rounding and follows fp32",
          "[lab6][moe_ep]") {
  EpRunOptions o = ep_run_options(4, 2, 2);
  o.bf16 = true;
  const EpRunReport ep = run_ep_simulated(2, o);
  mls::testing::observe("EP 2 bf16: losses", ep.losses, {2e-2, 2e-3});
  MLS_ORACLE_CHECK({
    EpRunOptions whole = o;
    whole.batch = 4;
    const EpRunReport single = run_ep_simulated(1, whole);
    EpRunOptions fp32 = o;
    fp32.bf16 = false;
    const EpRunReport full = run_ep_simulated(2, fp32);
    for (std::size_t s = 0; s < ep.losses.size(); ++s) {
      // The same step up to bf16 rounding: a gradient element or a weight that rounds the other way
      // can move a token's gates across a tie, so the routing (and the drops) may differ slightly.
      CHECK(ep.losses[s] == Approx(single.losses[s]).epsilon(2e-3));
      CHECK(std::abs(ep.losses[s] - full.losses[s]) < 2e-2);  // bf16 follows the fp32 curve
    }
    // The master weights: EP against one rank differ about as much as bf16 against fp32 does (the
    // same rounding flips), far less than the weights moved in training.
    const auto n = static_cast<std::int64_t>(ep.final_params.size());
    const double err = rel_err(ep.final_params.data(), single.final_params.data(), n),
                 bf16_vs_fp32 = rel_err(ep.final_params.data(), full.final_params.data(), n);
    const std::vector<float> init = init_params(o.cfg, o.seed).vec();
    const double moved = rel_err(full.final_params.data(), init.data(), n);
    INFO("relative difference of the fp32 master weights: EP vs one rank " << err << ", bf16 vs fp32 " << bf16_vs_fp32
                                                                           << ", trained vs initial " << moved);
    CHECK(err > 0);  // the rounding happened
    CHECK(err < 2 * bf16_vs_fp32);
    CHECK(err < moved / 2);
  });
}
