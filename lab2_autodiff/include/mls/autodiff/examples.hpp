#pragma once
/// The lectures' worked examples, built once and used by the tests and by mls-autodiff-graph.
#include <memory>

#include "mls/autodiff/graph.hpp"

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

}  // namespace mls::autodiff::examples
