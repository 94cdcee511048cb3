// The workload tour's example models train on generated data (seeded, a few dozen steps): the loss
// falls and the trained model beats chance. No timing. Not scored (no group): the tag is [tour].
#include <numeric>

#include "helpers.hpp"
#include "mls/autodiff/workload.hpp"

using namespace mls;
using namespace mls::autodiff;

namespace {
/// The mean of the first and of the last `k` losses.
std::pair<double, double> ends(const std::vector<double>& l, std::size_t k) {
  REQUIRE(l.size() >= 2 * k);
  const double first = std::accumulate(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(k), 0.0) /
                       static_cast<double>(k);
  const double last = std::accumulate(l.end() - static_cast<std::ptrdiff_t>(k), l.end(), 0.0) /
                      static_cast<double>(k);
  return {first, last};
}
/// Records a training run for the graded comparison: the first and last losses (float32 training:
/// a student's kernels may round differently over 40 steps) and the accuracy.
void observe_curve(const std::string& what, const examples::TrainCurve& c) {
  mls::testing::observe(what + ": first loss", c.losses.front(), {1e-4, 1e-6});
  mls::testing::observe(what + ": last loss", c.losses.back(), {5e-2, 1e-3});
  mls::testing::observe(what + ": accuracy", c.accuracy, {0.0, 0.1});
}
}  // namespace

TEST_CASE("workload tour: a CNN with max and average pooling learns bar images", "[lab2][tour]") {
  const examples::TrainCurve c = examples::train_cnn(40, 1);
  const auto [first, last] = ends(c.losses, 5);
  observe_curve("train_cnn", c);
  INFO("loss " << first << " -> " << last << ", accuracy " << c.accuracy);
  CHECK(last < 0.6 * first);
  CHECK(c.accuracy > 0.6);  // chance: 1/3
}

TEST_CASE("workload tour: a char-LSTM and a char-GRU, unrolled by a C++ loop, learn a recurrence",
          "[lab2][tour]") {
  for (bool gru : {false, true}) {
    const examples::TrainCurve c = examples::train_char_rnn(40, 2, gru);
    const auto [first, last] = ends(c.losses, 5);
    observe_curve(gru ? "train_char_rnn (GRU)" : "train_char_rnn (LSTM)", c);
    INFO((gru ? "GRU" : "LSTM") << ": loss " << first << " -> " << last << ", accuracy "
                                << c.accuracy);
    CHECK(last < 0.8 * first);
    CHECK(c.accuracy > 0.35);  // chance: 1/5
  }
}

TEST_CASE(
    "workload tour: a two-layer GCN with dropout classifies the nodes of a stochastic block model",
    "[lab2][tour]") {
  const examples::TrainCurve c = examples::train_gcn(40, 3);
  const auto [first, last] = ends(c.losses, 5);
  observe_curve("train_gcn", c);
  INFO("loss " << first << " -> " << last << ", accuracy " << c.accuracy);
  CHECK(last < 0.6 * first);
  CHECK(c.accuracy > 0.8);  // chance: 1/3
}

TEST_CASE("workload tour: generated data is seeded and well formed", "[lab2][tour]") {
  Rng r1(5, "d"), r2(5, "d");
  Tensor x1, y1, x2, y2;
  examples::bar_images(6, 0.1, r1, x1, y1);
  examples::bar_images(6, 0.1, r2, x2, y2);
  CHECK(x1.shape() == Shape{6, 1, 8, 8});
  CHECK(equal(x1, x2));
  CHECK(equal(y1, y2));
  const Tensor s = examples::fib_sequences(3, 6, 5, r1);
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t k = 2; k <= 6; ++k)
      CHECK(s.at({i, k}) == static_cast<double>((static_cast<std::int64_t>(s.at({i, k - 1})) +
                                                 static_cast<std::int64_t>(s.at({i, k - 2}))) %
                                                5));
  const examples::Sbm g = examples::stochastic_block_model(2, 5, 1.0, 0.0, 3, 1.0, r1);
  CHECK(g.adjacency.nnz() == 2 * 2 * 10);  // two cliques of 5: 10 edges each, both directions
  {  // The generated graph through your tape: d sum(A_hat X) / dX is the column sums of A_hat.
    const CsrMatrix a = gcn_normalize(g.adjacency);
    Var x(Tensor::ones({10, 2}, DType::Float64), true);
    sum(spmm(a, x)).backward();
    autodiff_test::observe_var("d sum(A_hat X) / dX on the generated graph", x.grad(), {1e-12, 1e-12});
    MLS_ORACLE_CHECK(CHECK(x.grad().value().shape() == Shape{10, 2}));
  }
  const Tensor d = g.adjacency.to_dense();
  CHECK(allclose(d, d.transpose().compact(), 0.0, 0.0));
  CHECK(g.labels.to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1});
}
