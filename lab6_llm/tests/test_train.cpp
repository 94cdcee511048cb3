// Lab 6: training — the nano model learns to sort; resuming repeats the same losses.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/parallel.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/sample.hpp"
#include "mls/llm/train.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;

namespace {

GPTConfig sort_config() {
  GPTConfig c = config_by_name("nano");
  c.vocab_size = kSortV;
  return c;
}

}  // namespace

TEST_CASE(
    "training: the nano model learns to sort 6 digits, at least 99 percent exact match on held-out "
    "problems",
    "[lab6][train][train_sort]") {
  SortTask task(6, 0);
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = task.vocab_size();
  TrainOptions o;
  o.batch = 32;
  o.context = task.seq_len();
  o.steps = 600;
  o.warmup = 30;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.adamw.weight_decay = 0.0;
  Trainer tr(init_params(cfg, 0), o);
  double first = 0, last = 0;
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const double l = tr.step(task.next_train(o.batch, o.context)).loss;
    if (s == 0) first = l;
    last = l;
  }
  // greedy decoding with the KV cache on held-out problems (the val split never trains)
  const GreedyFn greedy = [&](const std::vector<std::int32_t>& prompt, int n_new) {
    SampleOptions g;
    g.greedy = true;
    Rng unused(0);
    return generate(tr.params, prompt, n_new, g, true, unused);
  };
  const double em = exact_match(task, greedy, 500, true);
  INFO("sort: loss " << first << " -> " << last << ", exact match " << em);
  MLS_OBSERVE(em, {0.0, 0.01});  // each build in [0.99, 1]
  MLS_ORACLE_CHECK(CHECK(em >= 0.99));
}

TEST_CASE(
    "training: 20 steps straight = 10 steps, checkpoint, resume 10 steps (the same losses, bit for "
    "bit)",
    "[lab6][train][resume]") {
  const std::string path = "lab6_resume_test.ckpt";
  SortTask task(6, 5);
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = task.vocab_size();
  TrainOptions o;
  o.batch = 4;
  o.context = task.seq_len();
  o.steps = 20;
  o.warmup = 5;
  std::vector<double> b;
  {
    SortTask data(6, 5);
    Trainer first(init_params(cfg, 1), o);
    for (int s = 0; s < 10; ++s) b.push_back(first.step(data.next_train(o.batch, o.context)).loss);
    save_checkpoint(path, trainer_checkpoint(first, task.tokenizer().serialize(), data.position()));
  }
  {
    SortTask data(6, 5);
    Trainer resumed(init_params(cfg, 99), o);  // another init: everything must come from the file
    data.seek(restore_trainer(resumed, load_checkpoint(path)));
    MLS_CHECK_EQ(resumed.adam.step, 10);
    for (int s = 10; s < 20; ++s)
      b.push_back(resumed.step(data.next_train(o.batch, o.context)).loss);
  }
  std::remove(path.c_str());
  MLS_OBSERVE(b, {1e-3, 1e-5});  // the resumed run's losses; across builds float32 sums may differ in order
  // The oracle: 20 steps straight, after the interrupted run.
  MLS_ORACLE(std::vector<double> a;
             {
               SortTask data(6, 5);
               Trainer straight(init_params(cfg, 1), o);
               for (int s = 0; s < 20; ++s) a.push_back(straight.step(data.next_train(o.batch, o.context)).loss);
             })
  MLS_ORACLE_CHECK(REQUIRE(a.size() == 20); CHECK(a == b));
}

TEST_CASE("errors: resuming from a checkpoint of another config", "[lab6][plumbing]") {
  SortTask task(6, 5);
  GPTConfig cfg = config_by_name("nano");
  cfg.vocab_size = task.vocab_size();
  TrainOptions o;
  o.batch = 2;
  o.context = task.seq_len();
  Trainer tr(init_params(cfg, 1), o);
  const Checkpoint ck = trainer_checkpoint(tr, task.tokenizer().serialize(), 0);
  GPTConfig other = cfg;
  other.n_embd = 24;
  Trainer tr2(init_params(other, 1), o);
  MLS_OBSERVE(ck.step);
  MLS_OBSERVE(ck.arrays.size());
  mls::testing::require_error([&] { restore_trainer(tr2, ck); }, "n_embd");
}

TEST_CASE("errors: training options out of range", "[lab6][train][errors]") {
  TrainOptions o;
  o.context = 33;
  mls::testing::require_error([&] { Trainer t(init_params(sort_config(), 0), o); }, "context = 33");
  o = {};
  o.context = 12;
  o.lr = -1;
  mls::testing::require_error([&] { Trainer t(init_params(sort_config(), 0), o); }, "lr = -1");
  o = {};
  o.context = 12;
  o.batch = 2;
  Trainer t(init_params(sort_config(), 0), o);
  Rng r(0);
  mls::testing::require_error([&] { t.step(sort_batch(3, r)); }, "Trainer::step: batch (3, 12)");
}

TEST_CASE(
    "training: --attention flash and naive give the same losses and gradients within float32 "
    "rounding (plain step, accumulation and recompute)",
    "[lab6][train][attention]") {
  GPTConfig cfg = config_by_name("nano");  // 3 layers, 3 heads of 16, block 32
  cfg.vocab_size = 64;
  for (auto [accum, remat] : {std::pair<std::int64_t, bool>{1, false}, {2, false}, {1, true}}) {
    TrainOptions o;
    o.batch = 4;
    o.context = 32;
    o.steps = 5;
    o.warmup = 1;
    o.lr = 3e-3;
    o.accum = accum;
    std::vector<double> losses[2];
    std::vector<float> grads[2];  // of the first step (the same parameters on both sides)
    for (int k = 0; k < 2; ++k) {
      o.attention = k == 0 ? Attention::Naive : Attention::Flash;
      Trainer tr(init_params(cfg, 3), o);
      RematActivations ra(cfg, o.micro_batch(), o.context,
                          gpt_plan(RecomputeKind::Sqrt, cfg, o.micro_batch(), o.context), o.attention);
      Rng r(7);
      for (int s = 0; s < 5; ++s) {
        Batch b;
        b.B = o.batch;
        b.T = o.context;
        for (std::int64_t i = 0; i < b.B * b.T; ++i) {
          b.inputs.push_back(static_cast<std::int32_t>(r.randint(0, 64)));
          b.targets.push_back(static_cast<std::int32_t>(r.randint(0, 64)));
        }
        losses[k].push_back((remat ? tr.step(b, ra) : tr.step(b)).loss);
        if (s == 0) grads[k] = tr.grads.vec();
      }
    }
    // the activations differ only in what attention keeps: flash saves (B, H, T) floats per layer
    CHECK(GPTActivations(cfg, 4, 32, Attention::Flash).num_floats() ==
          GPTActivations(cfg, 4, 32).num_floats() - cfg.n_layer * 4 * cfg.n_head * 32 * 31);
    const std::string c = "accum " + std::to_string(accum) + (remat ? ", remat sqrt" : "");
    mls::testing::observe("flash training losses, " + c, losses[1], {1e-4, 0.0});
    mls::testing::observe("naive training losses, " + c, losses[0], {1e-4, 0.0});
    // float32: the two kernels sum in different orders, (T + hs) roundings per score and output
    // (~50 eps, 6e-6); through 3 layers and the backward pass 4x that per layer: 1e-4 of the
    // largest gradient. The losses of 5 steps (AdamW, lr 3e-3) stay within 1e-4 relative.
    // (Parameters are not compared: AdamW's first steps move a parameter by about lr whatever
    // its gradient's size, so a near-zero gradient's rounding can flip a step.)
    for (int s = 0; s < 5; ++s) CHECK(losses[1][s] == Approx(losses[0][s]).epsilon(1e-4));
    double worst = 0, gmax = 0;
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(grads[0][i] - grads[1][i])));
      gmax = std::max(gmax, static_cast<double>(std::fabs(grads[0][i])));
    }
    INFO(c << ": largest gradient difference " << worst << " of largest gradient " << gmax);
    CHECK(worst <= 1e-4 * gmax);
  }
}

TEST_CASE("errors: an unknown attention kernel, flash attention_backward without the forward's output",
          "[lab6][plumbing]") {
  mls::testing::require_error([] { parse_attention("sparse", "train: --attention"); },
                              "train: --attention: 'sparse', expected flash or naive");
  CHECK(parse_attention("flash") == Attention::Flash);
  CHECK(parse_attention("naive") == Attention::Naive);
  mls::testing::observe("to_string(Attention::Flash), to_string(Attention::Naive)",
                        std::string(to_string(Attention::Flash)) + " " + to_string(Attention::Naive));
  std::vector<float> x(3 * 4 * 2, 0.f), lse(2, 0.f), dx(3 * 4 * 2, 0.f), dy(4 * 2, 0.f);
  mls::testing::require_error(
      [&] {
        attention_backward(dx.data(), nullptr, dy.data(), x.data(), lse.data(), 1, 2, 4, 1, Attention::Flash);
      },
      "attention_backward: flash attention needs the forward's output");
}
