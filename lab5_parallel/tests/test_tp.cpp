// Tensor parallelism on simulated ranks: the f/g operators, the Megatron MLP block and attention
// split by heads equal the unsplit block (outputs and gradients), with exactly one allreduce in
// forward and one in backward per block.
#include <catch2/catch.hpp>

#include "mls/parallel/tensor_parallel.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::autodiff::Var;

namespace {
/// Records `got` within Approx(want).epsilon(1e-12).margin(1e-13), on both sides.
void observe_close(const Tensor& got, const std::string& what) { mls::testing::observe_values(what, got, {2e-12, 2e-13}); }
#ifndef MLS_GRADED_BUILD
/// The check against the unsplit block's value (an oracle).
void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": got " << shape_str(got.shape()) << ", want " << shape_str(want.shape()));
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(w[i]).epsilon(1e-12).margin(1e-13));
  }
}
#endif
Tensor rnd(const Shape& s, const char* name, double sd = 0.5) {
  Rng rng(21, name);
  return Tensor::randn(s, rng, 0.0, sd, DType::Float64);
}
struct RankOut {
  Tensor y, gx;
  std::vector<Tensor> grads;
  TpCounters counters;
  std::int64_t allreduce_msgs = 0;
};

/// Records what one rank of a split block produced: output, input gradient, its parameters'
/// gradients, and its allreduce counts.
void observe_rank(const RankOut& o) {
  observe_close(o.y, "output");
  observe_close(o.gx, "input gradient");
  for (const Tensor& g : o.grads) observe_close(g, "parameter gradient");
  mls::testing::observe("allreduces forward, backward", std::vector<std::int64_t>{
      static_cast<std::int64_t>(o.counters.forward_allreduces), static_cast<std::int64_t>(o.counters.backward_allreduces)});
}

#ifndef MLS_GRADED_BUILD
/// Checks rank r of t against the unsplit block (an oracle): its output `y`, input gradient `gx`
/// and its shard of each full parameter gradient (`dims`: the dim each one is split along, -1
/// for replicated), one allreduce each way.
template <std::size_t N>
void check_rank(const RankOut& o, const Tensor& y, const Tensor& gx, const std::vector<Tensor>& full_grads,
                const std::array<std::int64_t, N>& dims, int r, int t) {
  check_close(o.y, y, "output");
  check_close(o.gx, gx, "input gradient");
  REQUIRE(o.grads.size() == N);
  for (std::size_t k = 0; k < N; ++k)
    check_close(o.grads[k], dims[k] < 0 ? full_grads[k] : shard(full_grads[k], dims[k], r, t), "parameter gradient");
  CHECK(o.counters.forward_allreduces == 1);
  CHECK(o.counters.backward_allreduces == 1);
}
#endif
}  // namespace

TEST_CASE("tp: f is identity forward and allreduce backward, g the reverse", "[lab5][tp]") {
  const int t = 3;
  std::vector<Tensor> fx(t), gx(t), gy(t), gz(t);
  std::vector<TpCounters> c(t);
  run_simulated(t, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    Var x(Tensor::full({2}, 1.0 + comm.rank(), DType::Float64), true);
    Var f = copy_to_tp(x, comm, &c[r]);
    fx[r] = f.value().clone();
    autodiff::sum(f * (1.0 + comm.rank())).backward();  // rank r's gradient of f's output is r + 1
    gx[r] = x.grad().value().clone();
    Var z(Tensor::full({2}, 1.0 + comm.rank(), DType::Float64), true);
    Var g = reduce_from_tp(z, comm, &c[r]);
    gy[r] = g.value().clone();
    autodiff::sum(g * 2.0).backward();
    gz[r] = z.grad().value().clone();
  });
  for (int r = 0; r < t; ++r) {
    const auto u = static_cast<std::size_t>(r);
    mls::testing::observe_values("f(x)", fx[u]);
    mls::testing::observe_values("g(z)", gy[u]);
    mls::testing::observe_values("x.grad", gx[u]);
    mls::testing::observe_values("z.grad", gz[u]);
    mls::testing::observe("allreduces forward, backward", std::vector<std::int64_t>{
        static_cast<std::int64_t>(c[u].forward_allreduces), static_cast<std::int64_t>(c[u].backward_allreduces)});
    MLS_ORACLE_CHECK(CHECK(fx[u].to_vector<double>() == std::vector<double>{1.0 + r, 1.0 + r});  // identity
                     CHECK(gz[u].to_vector<double>() == std::vector<double>{2.0, 2.0});          // identity backward
                     CHECK(gx[u].to_vector<double>() == std::vector<double>{6.0, 6.0});          // 1 + 2 + 3
                     CHECK(gy[u].to_vector<double>() == std::vector<double>{6.0, 6.0});
                     CHECK(c[u].forward_allreduces == 1); CHECK(c[u].backward_allreduces == 1));
  }
}

TEST_CASE("tp: the Megatron MLP block equals the unsplit block, one allreduce forward, one backward",
          "[lab5][tp]") {
  const std::int64_t N = 5, D = 6, H = 12;
  const Tensor x = rnd({N, D}, "x", 1.0), w1 = rnd({D, H}, "w1"), b1 = rnd({H}, "b1"), w2 = rnd({H, D}, "w2"),
               b2 = rnd({D}, "b2"), R = rnd({N, D}, "R", 1.0);
  for (int t : {1, 2, 3, 4}) {
    if (H % t) continue;
    std::vector<RankOut> out(static_cast<std::size_t>(t));
    run_simulated(t, [&](Communicator& comm) {
      RankOut& o = out[static_cast<std::size_t>(comm.rank())];
      ParallelMLP mlp(comm, w1, b1, w2, b2, "gelu");
      Var vx(x, true);
      const Var y = mlp.forward(vx);
      autodiff::sum(y * Var(R)).backward();
      o.y = y.value();
      o.gx = vx.grad().value();
      for (auto& prm : mlp.parameters()) o.grads.push_back(prm.grad().value());
      o.counters = mlp.counters;
      o.allreduce_msgs = comm.traffic().by_op["allreduce"].messages_sent;
    });
    // the unsplit block, after the split one ran
    MLS_ORACLE(Var rx(x, true), rw1(w1, true), rb1(b1, true), rw2(w2, true), rb2(b2, true);
               const Var ry = mlp_block(rx, rw1, rb1, rw2, rb2, "gelu");
               autodiff::sum(ry * Var(R)).backward();
               const std::vector<Tensor> full_grads = {rw1.grad().value(), rb1.grad().value(), rw2.grad().value(), rb2.grad().value()};)
    for (int r = 0; r < t; ++r) {
      INFO("t = " << t << ", rank " << r);
      const RankOut& o = out[static_cast<std::size_t>(r)];
      observe_rank(o);
      MLS_ORACLE_CHECK(check_rank(o, ry.value(), rx.grad().value(), full_grads, ParallelMLP::kShardDims, r, t));
      if (t > 1) CHECK(o.allreduce_msgs > 0);
    }
  }
}

TEST_CASE("tp: attention split by heads equals the unsplit attention, one allreduce forward, one backward",
          "[lab5][tp]") {
  const std::int64_t B = 2, T = 4, D = 8;
  const int heads = 4;
  const Tensor x = rnd({B, T, D}, "ax", 1.0), wq = rnd({D, D}, "wq"), wk = rnd({D, D}, "wk"), wv = rnd({D, D}, "wv"),
               wo = rnd({D, D}, "wo"), bo = rnd({D}, "bo"), R = rnd({B, T, D}, "aR", 1.0);
  for (int t : {1, 2, 4}) {
    std::vector<RankOut> out(static_cast<std::size_t>(t));
    run_simulated(t, [&](Communicator& comm) {
      RankOut& o = out[static_cast<std::size_t>(comm.rank())];
      ParallelAttention att(comm, heads, wq, wk, wv, wo, bo, true);
      Var vx(x, true);
      const Var y = att.forward(vx);
      autodiff::sum(y * Var(R)).backward();
      o.y = y.value();
      o.gx = vx.grad().value();
      for (auto& prm : att.parameters()) o.grads.push_back(prm.grad().value());
      o.counters = att.counters;
    });
    // the unsplit attention, after the split one ran
    MLS_ORACLE(Var rx(x, true), rq(wq, true), rk(wk, true), rv(wv, true), ro(wo, true), rb(bo, true);
               const Var ry = attention_block(rx, rq, rk, rv, ro, rb, heads, true);
               autodiff::sum(ry * Var(R)).backward();
               const std::vector<Tensor> full_grads = {rq.grad().value(), rk.grad().value(), rv.grad().value(), ro.grad().value(),
                                                       rb.grad().value()};)
    for (int r = 0; r < t; ++r) {
      INFO("t = " << t << ", rank " << r);
      const RankOut& o = out[static_cast<std::size_t>(r)];
      observe_rank(o);
      MLS_ORACLE_CHECK(check_rank(o, ry.value(), rx.grad().value(), full_grads, ParallelAttention::kShardDims, r, t));
    }
  }
}

TEST_CASE("tp: bad shapes are errors", "[lab5][train_errors]") {
  const Tensor w1 = rnd({4, 6}, "e1"), b1 = rnd({6}, "e2"), w2 = rnd({6, 4}, "e3"), b2 = rnd({4}, "e4");
  mls::testing::require_error(
      [&] { run_simulated(4, [&](Communicator& comm) { ParallelMLP mlp(comm, w1, b1, w2, b2); }); },
      "shard: dim 1 of shape [4, 6] (size 6) does not split into 4 equal parts");
  mls::testing::require_error(
      [&] { run_simulated(1, [&](Communicator& comm) { ParallelMLP mlp(comm, w1, b1, w1, b2); }); },
      "ParallelMLP: weights W1 [4, 6], b1 [6], W2 [4, 6], b2 [4] do not form a block");
  const Tensor w = rnd({4, 4}, "e5"), b = rnd({4}, "e6");
  mls::testing::require_error(
      [&] { run_simulated(2, [&](Communicator& comm) { ParallelAttention a(comm, 1, w, w, w, w, b); }); },
      "ParallelAttention: 1 heads do not split over 2 ranks");
  mls::testing::require_error(
      [&] {
        run_simulated(1, [&](Communicator& comm) {
          ParallelMLP mlp(comm, w1, b1, w2, b2);
          mlp.forward(Var(rnd({2, 5}, "e7")));
        });
      },
      "column_parallel_linear: input [2, 5] does not match the weight shard [4, 6]");
}
