#pragma once
/// A small neural-network layer on the eager tape (lecture 000, "the master equation":
/// θ ← f(θ, ∇L(θ, D))): parameters, modules, seeded initialisation and optimizers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mls/autodiff/var.hpp"

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
