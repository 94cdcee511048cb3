// Lab 6: training — the nano model learns to sort; resuming repeats the same losses.
#include <catch2/catch.hpp>

#include "mls/common/parallel.hpp"
#include "mls/llm/train.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace lab6test;

namespace {

GPTConfig sort_config() {
  GPTConfig c = config_by_name("nano");
  c.vocab_size = kSortV;
  return c;
}

/// The batch of step `s` from its own named stream, so that a resumed run draws the same batches.
Batch batch_at(std::int64_t s, std::int64_t B) {
  Rng r(123, "sort-train-" + std::to_string(s));
  return sort_batch(B, r);
}

/// Exact-match rate of greedy decoding on held-out sequences: with teacher forcing, every sorted
/// digit being the argmax is the same as greedy generation reproducing the whole answer.
double exact_match(const GPTParams& p, std::int64_t n) {
  Rng r(999, "sort-held-out");
  const Batch b = sort_batch(n, r);
  GPTActivations a(p.config(), b.B, b.T);
  gpt_forward(p, a, b.inputs.data(), nullptr, nullptr, b.B, b.T);
  const std::int64_t V = p.config().vocab_size;
  std::int64_t ok = 0;
  for (std::int64_t i = 0; i < b.B; ++i) {
    bool all = true;
    for (std::int64_t t = kSortN; t < kSortT; ++t) {
      const float* l = a.logits + (i * b.T + t) * V;
      const auto arg = std::max_element(l, l + V) - l;
      all = all && arg == b.targets[i * b.T + t];
    }
    ok += all;
  }
  return static_cast<double>(ok) / static_cast<double>(n);
}

}  // namespace

TEST_CASE("training: the nano model learns to sort 6 digits (>= 99% exact match held out)", "[lab6][train][train_sort]") {
  ThreadCountGuard one(1);
  TrainOptions o;
  o.batch = 32;
  o.context = kSortT;
  o.steps = 600;
  o.warmup = 30;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.adamw.weight_decay = 0.0;
  Trainer tr(init_params(sort_config(), 0), o);
  double first = 0, last = 0;
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const double l = tr.step(batch_at(s, o.batch)).loss;
    if (s == 0) first = l;
    last = l;
  }
  INFO("loss " << first << " -> " << last);
  const double em = exact_match(tr.params, 1000);
  INFO("exact match " << em);
  INFO("sort: loss " << first << " -> " << last << ", exact match " << em);
  CHECK(em >= 0.99);
}

TEST_CASE("training: 20 steps straight = 10 steps, save, resume 10 steps (the same losses, bit for bit)", "[lab6][train][resume]") {
  TrainOptions o;
  o.batch = 4;
  o.context = kSortT;
  o.steps = 20;
  o.warmup = 5;
  Trainer straight(init_params(sort_config(), 1), o);
  std::vector<double> a, b;
  for (int s = 0; s < 20; ++s) a.push_back(straight.step(batch_at(s, o.batch)).loss);
  Trainer first(init_params(sort_config(), 1), o);
  for (int s = 0; s < 10; ++s) b.push_back(first.step(batch_at(s, o.batch)).loss);
  // The state a checkpoint holds: params, AdamW's moments and step (the data position is the step).
  const std::vector<float> params = first.params.vec(), m = first.adam.m, v = first.adam.v;
  const std::int64_t step = first.adam.step;
  GPTParams restored(sort_config());
  restored.vec() = params;
  Trainer resumed(std::move(restored), o);
  resumed.adam.m = m;
  resumed.adam.v = v;
  resumed.adam.step = step;
  for (int s = 10; s < 20; ++s) b.push_back(resumed.step(batch_at(s, o.batch)).loss);
  CHECK(a == b);
  CHECK(straight.params.vec() == resumed.params.vec());
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
