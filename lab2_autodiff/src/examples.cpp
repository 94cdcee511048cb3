// The lectures' worked examples as functions and graphs.
#include "mls/autodiff/examples.hpp"

namespace mls::autodiff::examples {

Var slide_function(const Var& x1, const Var& x2) {
  const Var v3 = log(x1).set_name("v3");
  const Var v4 = (x1 * x2).set_name("v4");
  const Var v5 = sin(x2).set_name("v5");
  const Var v6 = (v3 + v4).set_name("v6");
  return (v6 - v5).set_name("v7");
}

Var exp_example(const Var& v1) {
  Var v2 = exp(v1);
  v2.set_name("v2");
  Var v3 = v2 + 1.0;
  v3.set_name("v3");
  Var v4 = v2 * v3;
  return v4.set_name("v4");
}

Var logistic_regression_loss(const Var& x, const Var& y_onehot, const Var& w) {
  const Var y = softmax(matmul(x, w), 1).set_name("y");
  return mean(-sum(y_onehot * log(y), {1})).set_name("cross_entropy");
}

Var two_layer_mlp_loss(const Var& x, const Var& y, const Var& w1, const Var& w2) {
  const Var h = relu(matmul(x, w1)).set_name("h");
  return mse_loss(matmul(h, w2), y).set_name("L");
}

Model logistic_regression(const Tensor& w0) {
  MLS_CHECK(w0.ndim() == 2, "logistic_regression: W must be [features, classes], got ", shape_str(w0.shape()));
  Model m;
  Graph& g = *m.graph;
  const Var x = g.placeholder("x", {-1, w0.shape()[0]}, w0.dtype());
  const Var y_ = g.placeholder("y_", {-1, w0.shape()[1]}, w0.dtype());
  const Var w = g.variable("W", w0);
  m.inputs = {x, y_};
  m.params = {w};
  m.loss = logistic_regression_loss(x, y_, w);
  m.grads = gradients(m.loss, m.params);
  return m;
}

Model two_layer_mlp(const Tensor& w1, const Tensor& w2) {
  MLS_CHECK(w1.ndim() == 2 && w2.ndim() == 2 && w1.shape()[1] == w2.shape()[0], "two_layer_mlp: need W1 [in, hidden] and W2 [hidden, out], got ",
            shape_str(w1.shape()), " and ", shape_str(w2.shape()));
  Model m;
  Graph& g = *m.graph;
  const Var x = g.placeholder("x", {-1, w1.shape()[0]}, w1.dtype());
  const Var y = g.placeholder("y", {-1, w2.shape()[1]}, w2.dtype());
  const Var v1 = g.variable("W1", w1), v2 = g.variable("W2", w2);
  m.inputs = {x, y};
  m.params = {v1, v2};
  m.loss = two_layer_mlp_loss(x, y, v1, v2);
  m.grads = gradients(m.loss, m.params);
  return m;
}

}  // namespace mls::autodiff::examples
