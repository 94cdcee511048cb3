#pragma once
/// A small neural-network layer on the eager tape (lecture 000, "the master equation":
/// θ ← f(θ, ∇L(θ, D))): parameters, modules, seeded initialisation and optimizers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mls/autodiff/var.hpp"
#include "mls/autodiff/workload.hpp"

namespace mls::autodiff::nn {

/// A parameter is an eager leaf that requires grad.
using Parameter = Var;
/// Makes a Parameter holding `value`.
Parameter parameter(Tensor value);

// ---- initialisation (seeded) --------------------------------------------------------------------
/// Xavier/Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, double gain = 1.0,
                      DType dtype = DType::Float32);
/// Kaiming/He normal for ReLU: N(0, sqrt(2 / fan_in)).
Tensor kaiming_normal(const Shape& shape, std::int64_t fan_in, Rng& rng, DType dtype = DType::Float32);

// ---- modules ------------------------------------------------------------------------------------
/// A layer: forward() and the parameters it owns.
class Module {
 public:
  virtual ~Module() = default;
  virtual Var forward(const Var& x) = 0;
  Var operator()(const Var& x) { return forward(x); }
  /// Every parameter, in a fixed order.
  virtual std::vector<Parameter> parameters() { return {}; }
  /// Clears every parameter's gradient.
  void zero_grad();
  /// Training or inference behaviour (batch norm, dropout); default training.
  virtual void train(bool on = true) { training_ = on; }
  bool training() const { return training_; }
  /// A short description ("Linear(784, 256)").
  virtual std::string name() const = 0;

 protected:
  bool training_ = true;
};

enum class Init { Xavier, Kaiming };

/// y = x W + b with W [in, out], b [out].
class Linear : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, Rng& rng, Init init = Init::Kaiming, bool with_bias = true,
         DType dtype = DType::Float32);
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter weight, bias;

 private:
  std::int64_t in_, out_;
};

/// Elementwise activation: "relu", "tanh", "sigmoid" or "gelu".
class Activation : public Module {
 public:
  explicit Activation(std::string kind);
  Var forward(const Var& x) override;
  std::string name() const override { return kind_; }

 private:
  std::string kind_;
};

/// Modules applied in order.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers) : layers_(std::move(layers)) {}
  Sequential& add(std::shared_ptr<Module> layer);
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  void train(bool on = true) override;
  std::string name() const override;
  std::size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

/// Linear layers of `sizes` (e.g. {784, 256, 256, 10}) with `activation` between them (none
/// after the last), initialised from `rng`.
std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& sizes, Rng& rng, const std::string& activation = "relu",
                                DType dtype = DType::Float32);

// ---- the workload tour's layers (nn_layers.cpp; the ops are in workload.hpp) ---------------------
/// 2-D convolution, weight [out, in, k, k] (Kaiming), bias [out] (zeros) added per channel.
class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in, std::int64_t out, std::int64_t k, Rng& rng, std::int64_t stride = 1, std::int64_t pad = 0,
         bool with_bias = true, DType dtype = DType::Float32);
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter weight, bias;

 private:
  std::int64_t in_, out_, k_, stride_, pad_;
};

/// Transposed convolution ("up-conv"), weight [in, out, k, k] (PyTorch's layout), bias [out].
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(std::int64_t in, std::int64_t out, std::int64_t k, Rng& rng, std::int64_t stride = 1,
                  std::int64_t pad = 0, std::int64_t output_padding = 0, bool with_bias = true,
                  DType dtype = DType::Float32);
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter weight, bias;

 private:
  std::int64_t in_, out_, k_, stride_, pad_, output_padding_;
};

/// max_pool2d with a k x k window (stride 0: k).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::int64_t k, std::int64_t stride = 0, std::int64_t pad = 0);
  Var forward(const Var& x) override;
  std::string name() const override;

 private:
  std::int64_t k_, stride_, pad_;
};

/// avg_pool2d with a k x k window (stride 0: k).
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::int64_t k, std::int64_t stride = 0, std::int64_t pad = 0, bool count_include_pad = true);
  Var forward(const Var& x) override;
  std::string name() const override;

 private:
  std::int64_t k_, stride_, pad_;
  bool count_include_pad_;
};

/// Dropout in training mode, the identity in inference mode (train(false)). Each forward call
/// draws a fresh mask: the op's offset is the number of earlier calls, so the mask of one call is
/// a pure function of (seed, call, element) and its backward recomputes it.
class Dropout : public Module {
 public:
  explicit Dropout(double p, std::uint64_t seed = 0);
  Var forward(const Var& x) override;
  std::string name() const override;
  /// Forward calls so far (the next call's offset).
  std::uint64_t calls() const { return calls_; }

 private:
  double p_;
  std::uint64_t seed_, calls_ = 0;
};

/// An LSTM cell (lstm_cell) with PyTorch's parameters and initialisation U(-1/sqrt(H), 1/sqrt(H)):
/// w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H].
class LSTMCell : public Module {
 public:
  LSTMCell(std::int64_t input, std::int64_t hidden, Rng& rng, DType dtype = DType::Float32);
  /// One step from `state`.
  LstmState step(const Var& x, const LstmState& state);
  /// Zeros for a batch of `batch` (h and c [batch, H]).
  LstmState zero_state(std::int64_t batch) const;
  /// One step from the zero state; returns h.
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter w_ih, w_hh, b_ih, b_hh;

 private:
  std::int64_t input_, hidden_;
  DType dtype_;
};

/// A GRU cell (gru_cell): w_ih [3H, I], w_hh [3H, H], b_ih and b_hh [3H], U(-1/sqrt(H), 1/sqrt(H)).
class GRUCell : public Module {
 public:
  GRUCell(std::int64_t input, std::int64_t hidden, Rng& rng, DType dtype = DType::Float32);
  /// One step from hidden state h [B, H].
  Var step(const Var& x, const Var& h);
  /// One step from a zero state.
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter w_ih, w_hh, b_ih, b_hh;

 private:
  std::int64_t input_, hidden_;
  DType dtype_;
};

/// A graph convolution (Kipf and Welling): Â (x W) + b for node features x [nodes, in], with the
/// normalised adjacency Â fixed at construction (e.g. gcn_normalize(A)); W [in, out] (Xavier).
class GCNLayer : public Module {
 public:
  GCNLayer(CsrMatrix a_hat, std::int64_t in, std::int64_t out, Rng& rng, bool with_bias = true,
           DType dtype = DType::Float32);
  Var forward(const Var& x) override;
  std::vector<Parameter> parameters() override;
  std::string name() const override;
  Parameter weight, bias;

 private:
  CsrMatrix a_hat_;
  std::int64_t in_, out_;
};

// ---- optimizers -----------------------------------------------------------------------------------
class Optimizer {
 public:
  explicit Optimizer(std::vector<Parameter> params);
  virtual ~Optimizer() = default;
  /// Updates every parameter from its grad() (parameters without a gradient are skipped).
  virtual void step() = 0;
  void zero_grad();
  double lr = 0.0;

 protected:
  std::vector<Parameter> params_;
};

/// SGD with momentum and (coupled, L2) weight decay:
///   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter> params, double lr, double momentum = 0.0, double weight_decay = 0.0, bool nesterov = false);
  void step() override;

 private:
  double momentum_, weight_decay_;
  bool nesterov_;
  std::vector<Tensor> velocity_;
};

/// Adam (Kingma & Ba) with bias correction. weight_decay is L2 (added to the gradient) for
/// Adam and decoupled (p -= lr * wd * p) for AdamW.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0.0, bool decoupled = false);
  void step() override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  std::int64_t t_ = 0;
  std::vector<Tensor> m_, v_;
};
/// AdamW: Adam with decoupled weight decay (default 0.01).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Parameter> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0.01)
      : Adam(std::move(params), lr, beta1, beta2, eps, weight_decay, true) {}
};

// ---- training helpers ---------------------------------------------------------------------------------
/// Fraction of rows whose argmax of `logits` [N, C] equals `labels` [N].
double accuracy(const Tensor& logits, const Tensor& labels);

/// One pass over (x [N, ...], labels [N] int64) in shuffled minibatches of `batch`: forward,
/// softmax cross-entropy, backward, step. Returns the mean loss.
double train_epoch(Module& model, Optimizer& opt, const Tensor& x, const Tensor& labels, std::int64_t batch, Rng& rng);

}  // namespace mls::autodiff::nn
