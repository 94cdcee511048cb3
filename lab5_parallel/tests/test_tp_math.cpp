// Megatron block math on one rank, no communicator: column/row shards of an MLP block and the
// partial sums that one allreduce would add.
#include <catch2/catch.hpp>

#include "mls/parallel/tensor_parallel.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::autodiff::Var;
using mls::testing::require_error;

TEST_CASE("tp math: shard and unshard are inverse along any dim", "[lab5][tp]") {
  Rng rng(3, "tp-math");
  const Tensor w = Tensor::randn({4, 6}, rng, 0.0, 1.0, DType::Float64);
  for (std::int64_t dim : {0, 1}) {
    for (int parts : {1, 2}) {
      std::vector<Tensor> sh;
      for (int r = 0; r < parts; ++r) sh.push_back(shard(w, dim, r, parts));
      const Tensor back = unshard(sh, dim);
      for (const Tensor& s : sh) mls::testing::observe_values("shard", s);
      mls::testing::observe_values("unshard", back);
      MLS_ORACLE_CHECK(CHECK(sh[0].size(dim) == w.size(dim) / parts); CHECK(back.to_vector<double>() == w.to_vector<double>()));
    }
  }
  MLS_OBSERVE(shard(w, 1, 2, 3).at({1, 0}));
  MLS_ORACLE_CHECK(CHECK(shard(w, 1, 2, 3).at({1, 0}) == w.at({1, 4})));
  // a column shard of W gives the matching columns of x W
  const Tensor x = Tensor::randn({3, 4}, rng, 0.0, 1.0, DType::Float64);
  const Tensor cols = column_parallel_linear(Var(x), Var(shard(w, 1, 1, 2)), Var()).value();
  mls::testing::observe_values("column shard of x W", cols, {2e-14, 1e-15});
  MLS_ORACLE(const Tensor full = autodiff::matmul(Var(x), Var(w)).value();)
  MLS_ORACLE_CHECK(REQUIRE(cols.shape() == Shape{3, 3}); for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 3; ++j) CHECK(cols.at({i, j}) == Approx(full.at({i, 3 + j})).epsilon(1e-14)));
  require_error([&] { shard(w, 0, 0, 3); }, "shard: dim 0 of shape [4, 6] (size 4) does not split into 3 equal parts");
  require_error([&] { shard(w, 1, 3, 3); }, "shard: rank 3 of 3 parts");
  require_error([] { unshard({}, 0); }, "unshard: no shards");
}

TEST_CASE("tp math: the sum of the ranks' partial row-parallel outputs is the unsplit MLP block", "[lab5][tp]") {
  Rng rng(5, "tp-math");
  const std::int64_t N = 5, D = 4, H = 8;
  const Tensor x = Tensor::randn({N, D}, rng, 0.0, 1.0, DType::Float64);
  const Tensor w1 = Tensor::randn({D, H}, rng, 0.0, 0.5, DType::Float64), b1 = Tensor::randn({H}, rng, 0.0, 0.5, DType::Float64);
  const Tensor w2 = Tensor::randn({H, D}, rng, 0.0, 0.5, DType::Float64), b2 = Tensor::randn({D}, rng, 0.0, 0.5, DType::Float64);
  const auto full = mlp_block(Var(x), Var(w1), Var(b1), Var(w2), Var(b2), "tanh").value().to_vector<double>();
  MLS_OBSERVE(full, {2e-12, 0.0});
  // naive reference: loops (after the code under test ran)
  MLS_ORACLE(std::vector<double> ref(static_cast<std::size_t>(N * D), 0.0);
  for (std::int64_t n = 0; n < N; ++n) {
    std::vector<double> h(static_cast<std::size_t>(H));
    for (std::int64_t j = 0; j < H; ++j) {
      double a = b1.at({j});
      for (std::int64_t i = 0; i < D; ++i) a += x.at({n, i}) * w1.at({i, j});
      h[static_cast<std::size_t>(j)] = std::tanh(a);
    }
    for (std::int64_t o = 0; o < D; ++o) {
      double a = b2.at({o});
      for (std::int64_t j = 0; j < H; ++j) a += h[static_cast<std::size_t>(j)] * w2.at({j, o});
      ref[static_cast<std::size_t>(n * D + o)] = a;
    }
  })
  MLS_ORACLE_CHECK(REQUIRE(full.size() == ref.size());
                   for (std::size_t i = 0; i < ref.size(); ++i) CHECK(full[i] == Approx(ref[i]).epsilon(1e-12)));
  for (int t : {1, 2, 4}) {
    Tensor sum = Tensor::zeros({N, D}, DType::Float64);
    for (int r = 0; r < t; ++r) {
      const Var h = autodiff::tanh(column_parallel_linear(Var(x), Var(shard(w1, 1, r, t)), Var(shard(b1, 0, r, t))));
      sum += autodiff::matmul(h, Var(shard(w2, 0, r, t))).value();  // rank r's partial sum
    }
    sum += b2;
    mls::testing::observe_values("sum of partials", sum, {2e-12, 0.0});
    MLS_ORACLE(const auto got = sum.to_vector<double>();)
    MLS_ORACLE_CHECK(REQUIRE(got.size() == ref.size());
                     for (std::size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(1e-12)));
  }
  require_error([&] { column_parallel_linear(Var(x), Var(w2), Var()); },
                "column_parallel_linear: input [5, 4] does not match the weight shard [8, 4]");
}

TEST_CASE("tp math: attention heads computed separately and concatenated match per-head slices", "[lab5][tp]") {
  Rng rng(9, "tp-math");
  const std::int64_t B = 2, T = 3, D = 4;
  const Tensor x = Tensor::randn({B, T, D}, rng, 0.0, 1.0, DType::Float64);
  Tensor w[4];
  for (auto& wi : w) wi = Tensor::randn({D, D}, rng, 0.0, 0.5, DType::Float64);
  const Tensor bo = Tensor::randn({D}, rng, 0.0, 0.5, DType::Float64);
  // your column-parallel linear is the projection of one head
  mls::testing::observe("column_parallel_linear shape", column_parallel_linear(Var(x), Var(w[0]), Var(bo)).shape());
  MLS_ORACLE_CHECK(CHECK(column_parallel_linear(Var(x), Var(w[0]), Var(bo)).shape() == Shape{B, T, D}));
  // one head = plain single-head attention, written with loops (causal)
  const Var y1 = attention_block(Var(x), Var(w[0]), Var(w[1]), Var(w[2]), Var(w[3]), Var(bo), 1, true);
  mls::testing::observe_values("one head", y1.value(), {2e-10, 0.0});
  MLS_ORACLE_CHECK(REQUIRE(y1.value().shape() == Shape{B, T, D}); for (std::int64_t b = 0; b < B; ++b) {
    // q, k, v rows
    auto proj = [&](const Tensor& wm, std::int64_t t, std::int64_t o) {
      double a = 0;
      for (std::int64_t i = 0; i < D; ++i) a += x.at({b, t, i}) * wm.at({i, o});
      return a;
    };
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> sc(static_cast<std::size_t>(t + 1));
      double mx = -1e300;
      for (std::int64_t u = 0; u <= t; ++u) {
        double s = 0;
        for (std::int64_t o = 0; o < D; ++o) s += proj(w[0], t, o) * proj(w[1], u, o);
        sc[static_cast<std::size_t>(u)] = s / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, sc[static_cast<std::size_t>(u)]);
      }
      double z = 0;
      for (auto& s : sc) z += (s = std::exp(s - mx));
      std::vector<double> att(static_cast<std::size_t>(D), 0.0);
      for (std::int64_t u = 0; u <= t; ++u)
        for (std::int64_t o = 0; o < D; ++o) att[static_cast<std::size_t>(o)] += sc[static_cast<std::size_t>(u)] / z * proj(w[2], u, o);
      for (std::int64_t o = 0; o < D; ++o) {
        double a = bo.at({o});
        for (std::int64_t i = 0; i < D; ++i) a += att[static_cast<std::size_t>(i)] * w[3].at({i, o});
        CHECK(y1.value().at({b, t, o}) == Approx(a).epsilon(1e-10));
      }
    }
  });
  require_error([&] { attention_block(Var(x), Var(w[0]), Var(w[1]), Var(w[2]), Var(w[3]), Var(bo), 3); },
                "attention_block: D = 4 does not split into 3 heads");
}
