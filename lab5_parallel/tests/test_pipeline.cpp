// The pipeline executor on simulated ranks: gradients equal the unsplit model's, the measured
// bubble equals (p-1)/(m+p-1), and 1F1B keeps at most p micro-batches of activations alive.
#include <catch2/catch.hpp>

#include <memory>

#include "mls/parallel/pipeline.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::autodiff::Var;
namespace nn = mls::autodiff::nn;

namespace {
/// Layer l of the test model: Linear(sizes[l], sizes[l+1]) with a random bias, then tanh except last.
std::shared_ptr<nn::Sequential> layer(const std::vector<std::int64_t>& sizes, std::size_t l) {
  Rng rng(11, "pipe-layer-" + std::to_string(l));
  auto lin = std::make_shared<nn::Linear>(sizes[l], sizes[l + 1], rng, nn::Init::Xavier, true, DType::Float64);
  lin->bias = nn::parameter(Tensor::randn({sizes[l + 1]}, rng, 0.0, 0.3, DType::Float64));
  auto seq = std::make_shared<nn::Sequential>();
  seq->add(lin);
  if (l + 2 < sizes.size()) seq->add(std::make_shared<nn::Activation>("tanh"));
  return seq;
}

struct RankOut {
  PipelineStats stats;
  std::vector<std::vector<double>> grads;
};
}  // namespace

TEST_CASE("pipeline: gradients equal the unsplit model's, bubble and live activations measured",
          "[lab5][pipeline]") {
  const std::vector<std::int64_t> sizes = {6, 8, 8, 8, 4};
  const int p = 4;
  Rng rng(3, "pipe-data");
  const std::int64_t B = 16;
  const Tensor x = Tensor::randn({B, sizes.front()}, rng, 0.0, 1.0, DType::Float64);
  const Tensor y = Tensor::randn({B, sizes.back()}, rng, 0.0, 1.0, DType::Float64);

  for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int m : {1, 2, 8}) {
      std::vector<RankOut> out(static_cast<std::size_t>(p));
      PipelineOptions o;
      o.kind = kind;
      o.micro_batches = m;
      o.dtype = DType::Float64;
      run_simulated(p, [&](Communicator& comm) {
        auto stage = layer(sizes, static_cast<std::size_t>(comm.rank()));
        RankOut& r = out[static_cast<std::size_t>(comm.rank())];
        r.stats = pipeline_step(comm, *stage, comm.rank() == 0 ? x : Tensor(), comm.rank() == p - 1 ? y : Tensor(), o);
        for (auto& prm : stage->parameters()) r.grads.push_back(prm.grad().value().to_vector<double>());
      });
      INFO(to_string(kind) << " m = " << m);
      // the unsplit model on the whole batch, after the pipeline ran
      MLS_ORACLE(nn::Sequential full; for (std::size_t l = 0; l + 1 < sizes.size(); ++l) full.add(layer(sizes, l));
                 const Var loss = autodiff::mse_loss(full.forward(Var(x)), Var(y)); loss.backward();
                 std::vector<std::vector<double>> ref;
                 for (auto& prm : full.parameters()) ref.push_back(prm.grad().value().to_vector<double>());
                 std::size_t k = 0;)
      for (int s = 0; s < p; ++s) {
        const RankOut& r = out[static_cast<std::size_t>(s)];
        MLS_OBSERVE(r.stats.loss, {2e-12, 0.0});
        MLS_OBSERVE(r.stats.bubble, {2e-12, 0.0});
        MLS_OBSERVE(r.stats.total_time, {1e-9, 0.0});
        mls::testing::observe("peak live micro, bytes, micro bytes", std::vector<std::int64_t>{
            static_cast<std::int64_t>(r.stats.peak_live_micro), static_cast<std::int64_t>(r.stats.peak_live_bytes),
            static_cast<std::int64_t>(r.stats.micro_bytes)});
        MLS_OBSERVE(r.stats.slots.size());
        for (const auto& g : r.grads) mls::testing::observe("grad", g, {2e-12, 2e-14});
        MLS_ORACLE_CHECK(CHECK(r.stats.loss == Approx(loss.value().item()).epsilon(1e-12));
                         CHECK(r.stats.total_time == Approx(2.0 * (m + p - 1)));
                         CHECK(r.stats.bubble == Approx(bubble_fraction(p, m)).epsilon(1e-12));
                         const int want_live = kind == ScheduleKind::GPipe ? m : std::min(p - s, m);
                         CHECK(r.stats.peak_live_micro == want_live);
                         CHECK(r.stats.peak_live_bytes == want_live * r.stats.micro_bytes);
                         CHECK(r.stats.micro_bytes == (B / m) * (sizes[static_cast<std::size_t>(s)] + sizes[static_cast<std::size_t>(s) + 1]) * 8);
                         CHECK(static_cast<int>(r.stats.slots.size()) == 2 * m);
                         for (const auto& g : r.grads) {
                           REQUIRE(k < ref.size());
                           REQUIRE(g.size() == ref[k].size());
                           for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(ref[k][i]).epsilon(1e-12).margin(1e-14));
                           ++k;
                         });
      }
      MLS_ORACLE_CHECK(CHECK(k == ref.size()));
    }
  }
}

TEST_CASE("pipeline: the worked example p = 4, m = 8 measures a bubble of 3/11 on every stage, 1F1B <= p live",
          "[lab5][pipeline]") {
  const int p = 4, m = 8;
  std::vector<PipelineStats> st(p);
  PipelineOptions o;
  o.micro_batches = m;
  o.kind = ScheduleKind::OneFOneB;
  run_simulated(p, [&](Communicator& comm) {
    Rng rng(1, "pipe-ex");
    nn::Linear lin(4, 4, rng);
    const Tensor x = Tensor::ones({16, 4});
    st[static_cast<std::size_t>(comm.rank())] = pipeline_step(comm, lin, x, x, o);
  });
  for (const auto& s : st) {
    MLS_OBSERVE(s.bubble, {2e-12, 0.0});
    mls::testing::observe("peak live micro, bytes, micro bytes", std::vector<std::int64_t>{
        static_cast<std::int64_t>(s.peak_live_micro), static_cast<std::int64_t>(s.peak_live_bytes),
        static_cast<std::int64_t>(s.micro_bytes)});
    MLS_ORACLE_CHECK(CHECK(s.bubble == Approx(3.0 / 11.0).epsilon(1e-12)); CHECK(s.peak_live_micro <= p);
                     CHECK(s.peak_live_bytes <= p * s.micro_bytes));
  }
  // the executed slots (kind, micro-batch, start, end) follow the ideal-machine timeline of the same schedule
  for (int s = 0; s < p; ++s)
    for (const auto& sl : st[static_cast<std::size_t>(s)].slots)
      mls::testing::observe("executed slot of stage " + std::to_string(s), std::vector<double>{
          sl.step.kind == PipeStep::Forward ? 0.0 : 1.0, static_cast<double>(sl.step.micro), sl.start, sl.end});
  MLS_ORACLE(const Timeline t = simulate_schedule(make_schedule(p, m, ScheduleKind::OneFOneB));)
  MLS_ORACLE_CHECK(std::size_t i = 0; for (int s = 0; s < p; ++s)
    for (const auto& sl : st[static_cast<std::size_t>(s)].slots) {
      REQUIRE(i < t.slots.size());
      CHECK(sl.step == t.slots[i].step);
      CHECK(sl.start == t.slots[i].start);
      CHECK(sl.end == t.slots[i].end);
      ++i;
    });
}

TEST_CASE("pipeline: bad batches are errors on every rank", "[lab5][train_errors]") {
  MLS_OBSERVE(make_schedule(2, 3, ScheduleKind::OneFOneB).size());
  MLS_ORACLE_CHECK(CHECK(make_schedule(2, 3, ScheduleKind::OneFOneB).size() == 2));  // your code first
  PipelineOptions o;
  o.micro_batches = 3;
  mls::testing::require_error(
      [&] {
        run_simulated(2, [&](Communicator& comm) {
          Rng rng(1, "pipe-err");
          nn::Linear lin(2, 2, rng);
          // rank 0's batch does not split; rank 1's targets do (it waits for rank 0, which fails)
          pipeline_step(comm, lin, Tensor::ones({4, 2}), Tensor::ones({3, 2}), o);
        });
      },
      "pipeline_step: batch of 4 rows does not split into 3 equal micro-batches");
}
