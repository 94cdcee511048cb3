// Lab 6: gradient accumulation — K micro-batches of B/K rows per step give the step of the whole
// batch (float32 rounding apart) with the activations of one micro-batch: the plain trainer, the
// trainer under a recompute plan, ZeRO stages 0-3 on simulated ranks, and the planner's command.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lab6_helpers.hpp"
#include "util.hpp"
#include "zero_testing.hpp"
#include "mls/common/memory.hpp"
#include "mls/llm/planner.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/train.hpp"
#include "mls/llm/zero.hpp"
#include "mls/parallel/comm.hpp"

using namespace mls;
using namespace mls::llm;
using llm_test::require_error;
using mls::testing::observe;

namespace {

GPTConfig accum_config() {
  GPTConfig c = config_by_name("nano");
  c.vocab_size = 13;
  return c;
}

/// `steps` steps of the plain trainer with `accum` micro-batches on random masked batches (about
/// 70% of the targets counted: the micro-batches count different numbers of them).
struct PlainRun {
  GPTParams params;
  std::vector<double> losses;
  std::vector<float> first_grads;  // the gradient of step 1 (after clipping)
  std::int64_t act_floats = 0;
};
PlainRun plain_run(std::int64_t accum, std::int64_t B = 6, std::int64_t steps = 3) {
  const GPTConfig cfg = accum_config();
  TrainOptions o;
  o.batch = B;
  o.context = 10;
  o.steps = 10;
  o.warmup = 1;
  o.lr = 3e-3;
  o.accum = accum;
  Trainer tr(init_params(cfg, 7), o);
  Rng rng(11, "accum-batches");
  PlainRun r;
  r.act_floats = tr.acts.num_floats() + tr.dacts.num_floats();
  for (std::int64_t s = 0; s < steps; ++s) {
    const Batch b = llm_test::random_batch(cfg, B, o.context, rng);
    r.losses.push_back(tr.step(b).loss);
    if (s == 0) r.first_grads = tr.grads.vec();
  }
  r.params = std::move(tr.params);
  return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::abs(double(x)));
  return m;
}

ZeroRunOptions accum_opts(int stage, Precision p, std::int64_t accum, std::int64_t steps = 4,
                          std::int64_t V = 37) {
  ZeroRunOptions o = llm_test::zero_run_options(stage, p, steps, V);
  o.batch = 4;  // per rank per step: accum 2 runs micro-batches of 2 rows
  o.zero.accum = accum;
  return o;
}

}  // namespace

TEST_CASE("accum: the plain trainer with 2, 3 and 6 micro-batches takes the step of the whole batch (masked loss)",
          "[lab6][train][accum]") {
  std::vector<PlainRun> runs;
  for (std::int64_t K : {2, 3, 6}) runs.push_back(plain_run(K));
  // The oracle: the plain trainer without micro-batches, after the accumulating runs.
  MLS_ORACLE(const PlainRun ref = plain_run(1);)
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const PlainRun& got = runs[i];
    const std::int64_t K = i == 0 ? 2 : i == 1 ? 3 : 6;
    INFO("accum " << K);
    // Each micro-batch divides by the whole batch's count of targets: the same gradient up to
    // the order of the sums over rows, and the same loss.
    llm_test::observe_rel("gradient of step 1", got.first_grads.data(), LAB6_WANT(ref.first_grads.data()),
                          static_cast<std::int64_t>(got.first_grads.size()), 1e-5);
    observe("loss of step 1", got.losses[0], {1e-6, 0});
    observe("losses", got.losses, {1e-5, 0});
    llm_test::observe_rel("parameters", got.params.data(), LAB6_WANT(ref.params.data()), got.params.size(), 1e-5);
    observe("activation floats", got.act_floats);
    MLS_ORACLE_CHECK(
        REQUIRE(got.first_grads.size() == ref.first_grads.size()); REQUIRE(got.losses.size() == ref.losses.size());
        const double gerr = max_abs_diff(got.first_grads, ref.first_grads) / max_abs(ref.first_grads);
        CHECK(gerr < 1e-5);
        for (std::size_t s = 0; s < ref.losses.size(); ++s) CHECK(got.losses[s] == Approx(ref.losses[s]).epsilon(1e-5));
        // Before any update: the same rows' losses, summed in row order (bit for bit where the GEMM's
        // per-row results do not depend on the number of rows, as here).
        CHECK(got.losses[0] == Approx(ref.losses[0]).epsilon(1e-6));
        const double perr = max_abs_diff(got.params.vec(), ref.params.vec());
        CHECK(perr < 2e-5);
        // The activations are those of one micro-batch.
        CHECK(got.act_floats * K == ref.act_floats));  // every buffer scales with B
  }
}

TEST_CASE("accum: a step's activations are the micro-batch's, counted by the tracker",
          "[lab6][train][accum]") {
  mem::Tracker& t = mem::global();
  const GPTConfig cfg = accum_config();
  std::int64_t bytes[2] = {0, 0};
  Rng rng(2, "accum-mem");
  const Batch b = llm_test::random_batch(cfg, 4, 8, rng);
  for (int i = 0; i < 2; ++i) {
    TrainOptions o;
    o.batch = 4;
    o.context = 8;
    o.accum = i == 0 ? 1 : 2;
    t.set_enabled(true);
    t.reset();
    struct Off {  // the tracker is off again however the step ends
      mem::Tracker& t;
      ~Off() { t.set_enabled(false); }
    } off{t};
    double loss = 0;
    {
      Trainer tr(init_params(cfg, 1), o);
      MLS_CHECK_EQ(tr.acts.B, 4 / o.accum);
      loss = tr.step(b).loss;  // no activation buffer beyond the trainer's micro-batch ones
    }
    bytes[i] = t.peak(mem::Tag::Activation, 0);
    t.reset();
    observe("peak activation bytes of a step", bytes[i]);
    // The oracle: the micro-batch's activations and their gradients, after the step.
    MLS_ORACLE_CHECK(CHECK(bytes[i] == 8 * GPTActivations(cfg, 4 / o.accum, 8).num_floats()));
    observe("loss", loss, {1e-6, 0});
  }
  CHECK(bytes[1] < bytes[0]);
  CHECK(2 * bytes[1] == bytes[0]);
}

TEST_CASE("accum: remat_train_step accumulates like step, bit for bit, with a plan for the micro-batch",
          "[lab6][remat][accum]") {
  const GPTConfig cfg = accum_config();
  TrainOptions o;
  o.batch = 4;
  o.context = 8;
  o.accum = 2;
  Trainer b(init_params(cfg, 3), o);
  // The oracle: the trainer without a plan, each step after the planned one.
  MLS_ORACLE(Trainer a(init_params(cfg, 3), o);)
  RematActivations ra(cfg, 2, 8, sqrt_plan(cfg.n_layer));
  Rng rng(5, "accum-remat");
  for (int s = 0; s < 2; ++s) {
    const Batch batch = llm_test::random_batch(cfg, 4, 8, rng);
    const double lb = remat_train_step(b, ra, batch).loss;
    observe("remat loss", lb, {1e-6, 0});
    MLS_ORACLE(const double la = a.step(batch).loss;)
    MLS_ORACLE_CHECK(CHECK(la == lb));
  }
  observe("remat parameters", b.params.vec(), {1e-5, 1e-6});
  MLS_ORACLE_CHECK(CHECK(std::memcmp(a.params.data(), b.params.data(), sizeof(float) * a.params.size()) == 0));
  RematActivations whole(cfg, 4, 8, sqrt_plan(cfg.n_layer));
  Rng r2(6, "accum-remat-bad");
  require_error([&] { remat_train_step(b, whole, llm_test::random_batch(cfg, 4, 8, r2)); },
                "remat_train_step: activations for (4, 8), expected the micro-batch (2, 8) = batch 4 / accum 2");
}

TEST_CASE("accum: bad accumulation values are named (trainer, micro-batch, ZeRO, formula)", "[lab6][train][errors][accum]") {
  const GPTConfig cfg = accum_config();
  auto opts = [](std::int64_t accum) {
    TrainOptions o;
    o.batch = 6;
    o.context = 8;
    o.accum = accum;
    return o;
  };
  require_error([&] { Trainer t(init_params(cfg, 0), opts(0)); }, "train: accum = 0, expected >= 1");
  require_error([&] { Trainer t(init_params(cfg, 0), opts(-2)); }, "train: accum = -2, expected >= 1");
  require_error([&] { Trainer t(init_params(cfg, 0), opts(4)); },
                "train: accum = 4 does not divide batch = 6, expected a divisor of the batch");
  require_error([&] { opts(12).validate(cfg); }, "accum = 12 does not divide batch = 6");
  Rng rng(1);
  const Batch b = llm_test::random_batch(cfg, 6, 8, rng);
  require_error([&] { micro_batch(b, 4, 0); }, "micro_batch: accum = 4, expected a divisor of the batch's B = 6");
  require_error([&] { micro_batch(b, 3, 3); }, "micro_batch: k = 3, expected 0 <= k < accum = 3");
  const MicroBatch m = micro_batch(b, 3, 2);
  MLS_CHECK_EQ(m.B, 2);
  observe("micro-batch inputs offset", static_cast<std::int64_t>(m.inputs - b.inputs.data()));
  observe("micro-batch mask offset", static_cast<std::int64_t>(m.mask - b.mask.data()));
  MLS_ORACLE_CHECK(CHECK(m.inputs == b.inputs.data() + 2 * 2 * 8); CHECK(m.mask == b.mask.data() + 32));
  observe("micro-batch first input", static_cast<std::int64_t>(m.inputs[0]));
  // ZeRO: the options, the run and a direct step.
  ZeroRunOptions z = accum_opts(2, Precision::FP32, 0, 1);
  require_error([&] { z.validate(); }, "ZeRO: accum = 0, expected >= 1 micro-batches per step");
  z.zero.accum = -1;
  require_error([&] { run_zero_simulated(2, z); }, "ZeRO: accum = -1");
  z.zero.accum = 3;
  require_error([&] { z.validate(); }, "ZeRO run: accum = 3 does not divide batch = 4 per rank");
  require_error([] { zero_comm_elements_remat(2, 100, 2, 0, 0); }, "zero_comm_elements_remat: accum = 0");
  std::vector<std::string> msgs(2);
  parallel::run_simulated(2, [&](parallel::Communicator& c) {
    ZeroOptions zo;
    zo.stage = 1;
    zo.accum = 2;
    ZeroTrainer tr(c, cfg, init_params(cfg, 1), zo);
    std::vector<std::int32_t> in(24, 0), tg(24, 1);
    try {
      tr.step(in.data(), tg.data(), 3, 8, 1e-3);
    } catch (const Error& e) {
      msgs[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  for (const auto& msg : msgs) {
    INFO(msg);
    CHECK(msg.find("ZeroTrainer::step: accum = 2 does not divide B = 3") != std::string::npos);
  }
  // Ranks that disagree on accum.
  require_error(
      [&] {
        parallel::run_simulated(2, [&](parallel::Communicator& c) {
          ZeroOptions zo;
          zo.accum = c.rank() == 0 ? 2 : 1;
          ZeroTrainer tr(c, cfg, init_params(cfg, 1), zo);
        });
      },
      "rank 0 has accum (micro-batches per step) = 2, rank 1 has 1");
}

TEST_CASE("accum: ZeRO stages 0-3 with 2 micro-batches, 3 ranks (fp32): pairs bit-identical, within float32 of accum 1",
          "[lab6][zero][accum]") {
  std::vector<GPTParams> p(4);
  std::vector<ZeroRunReport> r;
  for (int s = 0; s <= 3; ++s) r.push_back(run_zero_simulated(3, accum_opts(s, Precision::FP32, 2), &p[s]));
  // The oracle: stage 0 without micro-batches, after the accumulating runs.
  MLS_ORACLE(GPTParams ref; const ZeroRunReport r1 = run_zero_simulated(3, accum_opts(0, Precision::FP32, 1), &ref);)
  // Stages 0 and 1 accumulate locally and reduce once with the same ring; stages 2 and 3
  // reduce-scatter every micro-batch with the same ring: bit-identical within each pair.
  CHECK(std::memcmp(p[1].data(), p[0].data(), sizeof(float) * p[0].size()) == 0);
  CHECK(std::memcmp(p[3].data(), p[2].data(), sizeof(float) * p[2].size()) == 0);
  CHECK(r[1].losses == r[0].losses);
  CHECK(r[3].losses == r[2].losses);
  CHECK(r[2].losses[0] == r[0].losses[0]);  // the same parameters before the first update
  MLS_ORACLE_CHECK(CHECK(r[0].losses[0] == Approx(r1.losses[0]).epsilon(1e-6)));
  for (int s = 0; s <= 3; ++s) {
    INFO("stage " << s);
    observe("final loss", r[s].losses.back(), {1e-5, 0});
    observe("losses", r[s].losses, {1e-5, 0});
    llm_test::observe_rel("parameters", p[s].data(), LAB6_WANT(ref.data()), p[s].size(), 2e-5);
    MLS_ORACLE_CHECK(REQUIRE(p[s].size() == ref.size()); REQUIRE(r[s].losses.size() == r1.losses.size());
                     const double d = max_abs_diff(p[s].vec(), ref.vec());
                     CHECK(d < 2e-5);  // accum 1 sums the rows of the whole batch in another order
                     for (std::size_t i = 0; i < r1.losses.size(); ++i)
                       CHECK(r[s].losses[i] == Approx(r1.losses[i]).epsilon(1e-5)));
  }
  CHECK(r[3].losses.back() < r[3].losses.front());
  // Three micro-batches of 2 (batch 6): within float32 of accum 1 at batch 6.
  ZeroRunOptions o6 = accum_opts(2, Precision::FP32, 3, 2);
  o6.batch = 6;
  GPTParams p6;
  run_zero_simulated(2, o6, &p6);
  // The oracle: the same run without micro-batches, after it.
  MLS_ORACLE(GPTParams q6; o6.zero.accum = 1; run_zero_simulated(2, o6, &q6);)
  llm_test::observe_rel("accum 3 parameters", p6.data(), LAB6_WANT(q6.data()), p6.size(), 2e-5);
  MLS_ORACLE_CHECK(REQUIRE(p6.size() == q6.size()); CHECK(max_abs_diff(p6.vec(), q6.vec()) < 2e-5));
}

TEST_CASE("accum: ZeRO stages 0-3 with 2 micro-batches in bf16, 2 ranks: pairs bit-identical, close to accum 1",
          "[lab6][precision][accum]") {
  std::vector<GPTParams> p(4);
  std::vector<ZeroRunReport> r;
  for (int s = 0; s <= 3; ++s) r.push_back(run_zero_simulated(2, accum_opts(s, Precision::BF16, 2, 3), &p[s]));
  // The oracle: stage 0 without micro-batches, after the accumulating runs.
  MLS_ORACLE(GPTParams ref; const ZeroRunReport r1 = run_zero_simulated(2, accum_opts(0, Precision::BF16, 1, 3), &ref);)
  CHECK(std::memcmp(p[1].data(), p[0].data(), sizeof(float) * p[0].size()) == 0);
  CHECK(std::memcmp(p[3].data(), p[2].data(), sizeof(float) * p[2].size()) == 0);
  for (int s = 0; s <= 3; ++s) {
    INFO("stage " << s);
    std::int64_t not_bf16 = 0;
    for (std::int64_t i = 0; i < p[s].size(); ++i) not_bf16 += round_bf16(p[s].data()[i]) != p[s].data()[i] ? 1 : 0;
    MLS_CHECK_EQ(not_bf16, 0);
    observe("bf16 final loss", r[s].losses.back(), {1e-2, 0});
    observe("bf16 parameters", p[s].vec(), {0, 0.02});
    // bf16 gradients (8 significant bits) summed in another order: a few bf16 steps apart.
    MLS_ORACLE_CHECK(REQUIRE(p[s].size() == ref.size()); CHECK(max_abs_diff(p[s].vec(), ref.vec()) < 0.02);
                     CHECK(r[s].losses.back() == Approx(r1.losses.back()).epsilon(1e-2)));
  }
}

TEST_CASE("accum: ZeRO memory with micro-batches: the model states still match the formula, the activations halve",
          "[lab6][zero_memory][accum]") {
  for (Precision prec : {Precision::FP32, Precision::BF16})
    for (int s = 0; s <= 3; ++s) {
      const ZeroRunReport r1 = run_zero_simulated(3, accum_opts(s, prec, 1, 1));
      const ZeroRunReport r2 = run_zero_simulated(3, accum_opts(s, prec, 2, 1));
      INFO("stage " << s << ", " << to_string(prec) << "\n" << memory_table(r2));
      CHECK(memory_table(r2).find("NO") == std::string::npos);
      CHECK(memory_table(r2).find("micro-batch 2 x accum 2") != std::string::npos);
      MLS_CHECK_EQ(r2.micro_batch, 2);
      CHECK(r2.activation_bytes == remat_activation_bytes(accum_opts(s, prec, 2).cfg, 2, 8, no_remat_plan(3)));
      for (int k = 0; k < 3; ++k) {
        const auto& pk = r2.peak[static_cast<std::size_t>(k)];
        const ZeroBytes e = expected_bytes(r2, k);
        CHECK(pk[0] == static_cast<std::int64_t>(e.params));
        CHECK(pk[1] == static_cast<std::int64_t>(e.grads));
        CHECK(pk[2] == static_cast<std::int64_t>(e.optimizer));
        CHECK(pk[3] == r2.activation_bytes);
        CHECK(pk[3] < r1.peak[static_cast<std::size_t>(k)][3]);
        CHECK(r1.peak[static_cast<std::size_t>(k)][3] == r1.activation_bytes);
      }
      observe("activation bytes, accum 2", r2.peak[0][3]);
      observe("states, accum 2", r2.peak[0][0] + r2.peak[0][1] + r2.peak[0][2]);
    }
}

TEST_CASE("accum: ZeRO traffic per step: stages 0-1 reduce once, stage 2 reduce-scatters per micro-batch, stage 3 does everything per micro-batch",
          "[lab6][zero_comm][accum]") {
  for (int N : {2, 4}) {  // V = 48: every unit divides by N, per-rank counts are exact
    for (int s = 0; s <= 3; ++s) {
      const ZeroRunReport r = run_zero_simulated(N, accum_opts(s, Precision::FP32, 2, 1, 48));
      const double psi = static_cast<double>(r.psi);
      observe("elements sent by every rank, accum 2", r.elements_sent);
      observe("formula, accum 2", zero_comm_elements_remat(s, psi, N, 0, 2), {1e-12, 0});
      // The oracle: the formula written out, after the run.
      MLS_ORACLE(const double f = (N - 1.0) / N;
                 const double expect = s <= 1 ? 2 * psi * f : s == 2 ? 3 * psi * f : 2 * 3 * psi * f;)
      MLS_ORACLE_CHECK(CHECK(zero_comm_elements_remat(s, psi, N, 0, 2) == Approx(expect));
                       for (int k = 0; k < N; ++k) CHECK(static_cast<double>(r.elements_sent[k]) == expect));
      CHECK(comm_table(r).find("accum 2") != std::string::npos);
      CHECK(comm_table(r).find("1.000000") != std::string::npos);
      observe("elements sent, accum 2", r.elements_sent[0]);
    }
  }
  // Stage 3 with a sqrt plan: the recomputed blocks are gathered again in every micro-batch.
  ZeroRunOptions o = accum_opts(3, Precision::FP32, 2, 1, 48);
  o.zero.remat = "sqrt";
  const ZeroRunReport r = run_zero_simulated(2, o);
  observe("formula, stage 3 sqrt accum 2",
          zero_comm_elements_remat(3, static_cast<double>(r.psi), 2, static_cast<double>(r.recomputed_params), 2),
          {1e-12, 0});
  // The oracle: the formula written out, after the run.
  MLS_ORACLE(const double expect = 2 * (3 * static_cast<double>(r.psi) + static_cast<double>(r.recomputed_params)) / 2;)
  MLS_ORACLE_CHECK(CHECK(static_cast<double>(r.elements_sent[0]) == expect);
                   CHECK(zero_comm_elements_remat(3, static_cast<double>(r.psi), 2, static_cast<double>(r.recomputed_params), 2) ==
                         Approx(expect)));
  observe("elements sent, stage 3 sqrt accum 2", r.elements_sent[0]);
}

TEST_CASE("accum: the planner prints an mls-gpt train command that runs its plan", "[lab6][remat][planner][accum]") {
  PlannerInput in;
  in.cfg = config_by_name("nano");
  in.cfg.vocab_size = 37;
  in.batch = 8;
  in.context = 16;
  in.ranks = 2;
  // A budget where the whole batch's activations do not fit next to the states, but a
  // micro-batch's do.
  const double states = zero_memory(0, static_cast<double>(num_params(in.cfg)), 2, 8, 4, 4).total;
  in.budget_bytes = states + static_cast<double>(remat_activation_bytes(in.cfg, 2, 16, no_remat_plan(3))) + 1000;
  const PlannerResult res = plan_memory(in);
  const PlanCandidate& c = res.best;
  const std::string cmd = train_command(in, c, "--config nano");
  INFO(cmd << "\n" << explain(in, res));
  observe("planned accum", c.accum);
  MLS_ORACLE_CHECK(CHECK(c.accum > 1));
  // Parse the printed line back into a run, as mls-gpt train --zero does.
  std::istringstream is(cmd);
  std::vector<std::string> tok;
  for (std::string w; is >> w;) tok.push_back(w);
  REQUIRE(tok.size() >= 2);
  MLS_CHECK_EQ(tok[0], std::string("mls-gpt"));
  MLS_CHECK_EQ(tok[1], std::string("train"));
  std::map<std::string, std::string> flags;
  for (std::size_t i = 2; i + 1 < tok.size(); i += 2) {
    REQUIRE(tok[i].rfind("--", 0) == 0);
    flags[tok[i]] = tok[i + 1];
  }
  REQUIRE((tok.size() - 2) % 2 == 0);
  for (const char* f : {"--zero", "--ranks", "--precision", "--config", "--zero-vocab", "--context", "--batch",
                        "--accum", "--remat"})
    CHECK(flags.count(f) == 1);
  ZeroRunOptions o;
  o.cfg = config_by_name(flags["--config"]);
  o.cfg.vocab_size = std::stoll(flags["--zero-vocab"]);
  o.zero.stage = std::stoi(flags["--zero"]);
  o.zero.precision = parse_precision(flags["--precision"]);
  o.zero.remat = flags["--remat"];
  o.zero.remat_budget = flags.count("--remat-budget") ? static_cast<std::int64_t>(parse_bytes(flags["--remat-budget"])) : 0;
  o.zero.accum = std::stoll(flags["--accum"]);
  o.batch = std::stoll(flags["--batch"]);
  o.context = std::stoll(flags["--context"]);
  o.steps = 1;
  CHECK(o.batch == in.batch);
  CHECK(o.batch / o.zero.accum == c.micro_batch);
  CHECK(o.zero.stage == c.stage);
  const ZeroRunReport r = run_zero_simulated(std::stoi(flags["--ranks"]), o);
  // The run is the plan: its recompute plan, its activation bytes, and states within the budget.
  CHECK(r.plan == c.plan.to_string());
  CHECK(static_cast<double>(r.activation_bytes) == c.act_bytes);
  CHECK(static_cast<double>(r.peak[0][0] + r.peak[0][1] + r.peak[0][2] + r.peak[0][3]) <= in.budget_bytes);
  CHECK(memory_table(r).find("NO") == std::string::npos);
  observe("command", cmd);
  observe("planned micro-batch", c.micro_batch);
  observe("measured activation bytes", r.activation_bytes);
  // An optimal plan is printed with the budget it was planned for.
  PlanCandidate opt = c;
  opt.remat = "optimal";
  CHECK(train_command(in, opt, "--config nano").find("--remat optimal --remat-budget ") != std::string::npos);
  // Bytes per parameter no --precision gives, and a candidate of another batch.
  PlannerInput odd = in;
  odd.k = 10;
  require_error([&] { train_command(odd, c, "--config nano"); }, "train_command: bytes per parameter 4 + 4 + 10");
  PlanCandidate wrong = c;
  wrong.accum = c.accum + 1;
  require_error([&] { train_command(in, wrong, "--config nano"); }, "expected stage 0..3 and micro-batch x accum = the batch 8");
}
