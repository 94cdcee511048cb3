#pragma once
/// The lectures' worked examples, built once and used by the tests and by mls-autodiff-graph.
#include <memory>

#include "mls/autodiff/graph.hpp"
#include "mls/autodiff/workload.hpp"

namespace mls::autodiff::examples {

/// Lecture 002's trace: y = ln(x1) + x1 * x2 - sin(x2) (at (2, 5): y = 11.652,
/// dy/dx1 = 5.5, dy/dx2 = 1.716). Works on eager Vars and graph nodes alike.
Var slide_function(const Var& x1, const Var& x2);
/// Lecture 002's backward-graph example: (exp(v1) + 1) * exp(v1), with exp(v1) one node used
/// twice.
Var exp_example(const Var& v1);

/// A built graph: its inputs, parameters, loss and gradients (as nodes of the same graph).
struct Model {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  std::vector<Var> inputs;  // placeholders
  std::vector<Var> params;  // variables
  Var loss;
  std::vector<Var> grads;   // d loss / d params
};

/// Lecture 000's tinyflow program: y = softmax(x W), loss = mean(-sum(y_ * log y, axis 1)),
/// with x [-1, features] and y_ [-1, classes] placeholders and W [features, classes] from `w0`.
Model logistic_regression(const Tensor& w0);
/// Lecture 000's two-layer MLP: L = MSE(ReLU(x W1) W2, y), x [-1, in], y [-1, out].
Model two_layer_mlp(const Tensor& w1, const Tensor& w2);

/// The eager versions of the same two models: loss as a function of eager Vars.
Var logistic_regression_loss(const Var& x, const Var& y_onehot, const Var& w);
Var two_layer_mlp_loss(const Var& x, const Var& y, const Var& w1, const Var& w2);

// ---- the workload tour's models (examples_tour.cpp): generated data, seeded, a few dozen steps --------
/// The losses of a training run, one per step, and the final accuracy (inference mode).
struct TrainCurve {
  std::vector<double> losses;
  double accuracy = 0.0;
};
/// 8x8 one-channel images of three classes (a horizontal bar, a vertical bar, a diagonal, at random
/// positions, with Gaussian noise of `noise`): x [n, 1, 8, 8] float32, labels [n] int64.
void bar_images(std::int64_t n, double noise, Rng& rng, Tensor& x, Tensor& labels);
/// A small CNN on bar_images: conv 3x3 (4) - relu - max_pool 2 - conv 3x3 (8) - relu - avg_pool 2 -
/// linear, Adam, a fresh batch of `batch` each step.
TrainCurve train_cnn(int steps, std::uint64_t seed, std::int64_t batch = 16);
/// Sequences over `vocab` symbols where each symbol is the sum of the two before it, mod vocab (so a
/// prediction needs memory): [n, t + 1] int64, random first two symbols.
Tensor fib_sequences(std::int64_t n, std::int64_t t, std::int64_t vocab, Rng& rng);
/// A char-RNN on fib_sequences: embedding - LSTM cell (or GRU with `gru`) unrolled over t steps by
/// a C++ loop - linear, next-symbol cross-entropy averaged over the steps, Adam.
TrainCurve train_char_rnn(int steps, std::uint64_t seed, bool gru = false, std::int64_t t = 8);
/// A stochastic block model: `blocks` communities of `per_block` nodes, an edge inside a community
/// with probability p_in, across with p_out (symmetric, no self loops); features [nodes, dim] are
/// the community's one-hot (in the first `blocks` dims) times `signal` plus N(0, 1) noise.
struct Sbm {
  CsrMatrix adjacency;
  Tensor features;  // [nodes, dim] float32
  Tensor labels;    // [nodes] int64
};
Sbm stochastic_block_model(std::int64_t blocks, std::int64_t per_block, double p_in, double p_out, std::int64_t dim,
                           double signal, Rng& rng);
/// A two-layer GCN (GCNLayer - relu - Dropout - GCNLayer) on a stochastic block model, full-batch
/// node classification, Adam; accuracy over every node in inference mode.
TrainCurve train_gcn(int steps, std::uint64_t seed);

}  // namespace mls::autodiff::examples
