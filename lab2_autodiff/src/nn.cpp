// nn: parameters, initialisation, modules and the training helpers.
#include "mls/autodiff/nn.hpp"

#include <cmath>
#include <numeric>
#include <sstream>

namespace mls::autodiff::nn {

Parameter parameter(Tensor value) { return Var(std::move(value), true); }

Tensor xavier_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out, Rng& rng, double gain, DType dtype) {
  MLS_CHECK(fan_in > 0 && fan_out > 0, "xavier_uniform: fans must be > 0, got ", fan_in, " and ", fan_out);
  const double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return Tensor::rand(shape, rng, -a, a, dtype);
}
Tensor kaiming_normal(const Shape& shape, std::int64_t fan_in, Rng& rng, DType dtype) {
  MLS_CHECK(fan_in > 0, "kaiming_normal: fan_in must be > 0, got ", fan_in);
  return Tensor::randn(shape, rng, 0.0, std::sqrt(2.0 / static_cast<double>(fan_in)), dtype);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.zero_grad();
}

Linear::Linear(std::int64_t in, std::int64_t out, Rng& rng, Init init, bool with_bias, DType dtype) : in_(in), out_(out) {
  MLS_CHECK(in > 0 && out > 0, "Linear: sizes must be > 0, got ", in, " -> ", out);
  weight = parameter(init == Init::Xavier ? xavier_uniform({in, out}, in, out, rng, 1.0, dtype)
                                          : kaiming_normal({in, out}, in, rng, dtype));
  weight.set_name("W");
  if (with_bias) {
    bias = parameter(Tensor::zeros({out}, dtype));
    bias.set_name("b");
  }
}
Var Linear::forward(const Var& x) {
  MLS_CHECK(x.ndim() >= 1 && x.shape().back() == in_, "Linear(", in_, ", ", out_, "): input has shape ",
            shape_str(x.shape()), ", expected [..., ", in_, "]");
  Var y = matmul(x, weight);
  return bias.defined() ? y + bias : y;
}
std::vector<Parameter> Linear::parameters() {
  if (bias.defined()) return {weight, bias};
  return {weight};
}
std::string Linear::name() const { return "Linear(" + std::to_string(in_) + ", " + std::to_string(out_) + ")"; }

Activation::Activation(std::string kind) : kind_(std::move(kind)) {
  MLS_CHECK(kind_ == "relu" || kind_ == "tanh" || kind_ == "sigmoid" || kind_ == "gelu",
            "Activation: unknown kind '", kind_, "' (expected relu, tanh, sigmoid or gelu)");
}
Var Activation::forward(const Var& x) {
  if (kind_ == "relu") return relu(x);
  if (kind_ == "tanh") return tanh(x);
  if (kind_ == "sigmoid") return sigmoid(x);
  return gelu(x);
}

Sequential& Sequential::add(std::shared_ptr<Module> layer) {
  MLS_CHECK(layer != nullptr, "Sequential::add: the layer is null");
  layers_.push_back(std::move(layer));
  return *this;
}
Var Sequential::forward(const Var& x) {
  Var h = x;
  for (auto& l : layers_) h = l->forward(h);
  return h;
}
std::vector<Parameter> Sequential::parameters() {
  std::vector<Parameter> ps;
  for (auto& l : layers_)
    for (auto& p : l->parameters()) ps.push_back(p);
  return ps;
}
void Sequential::train(bool on) {
  training_ = on;
  for (auto& l : layers_) l->train(on);
}
std::string Sequential::name() const {
  std::ostringstream os;
  os << "Sequential(";
  for (std::size_t i = 0; i < layers_.size(); ++i) os << (i ? ", " : "") << layers_[i]->name();
  os << ")";
  return os.str();
}

std::shared_ptr<Sequential> mlp(const std::vector<std::int64_t>& sizes, Rng& rng, const std::string& activation,
                                DType dtype) {
  MLS_CHECK(sizes.size() >= 2, "mlp: need at least an input and an output size, got ", sizes.size(), " sizes");
  auto seq = std::make_shared<Sequential>();
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    const Init init = activation == "relu" || activation == "gelu" ? Init::Kaiming : Init::Xavier;
    seq->add(std::make_shared<Linear>(sizes[i], sizes[i + 1], rng, init, true, dtype));
    if (i + 2 < sizes.size()) seq->add(std::make_shared<Activation>(activation));
  }
  return seq;
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  MLS_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.shape()[0] == logits.shape()[0],
            "accuracy: expected logits [N, C] and labels [N], got ", shape_str(logits.shape()), " and ",
            shape_str(labels.shape()));
  const auto pred = argmax(logits, 1).to_vector<std::int64_t>();
  const auto y = labels.to_vector<std::int64_t>();
  std::int64_t ok = 0;
  for (std::size_t i = 0; i < y.size(); ++i) ok += pred[i] == y[i];
  return y.empty() ? 0.0 : static_cast<double>(ok) / static_cast<double>(y.size());
}

/// Rows perm[s..e) of x, copied into a new tensor.
static Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& perm, std::int64_t s, std::int64_t e) {
  Shape sh = x.shape();
  sh[0] = e - s;
  Tensor out = Tensor::empty(sh, x.dtype());
  for (std::int64_t i = s; i < e; ++i) out.select(0, i - s).copy_(x.select(0, perm[static_cast<std::size_t>(i)]));
  return out;
}

double train_epoch(Module& model, Optimizer& opt, const Tensor& x, const Tensor& labels, std::int64_t batch, Rng& rng) {
  const std::int64_t n = x.shape()[0];
  MLS_CHECK(batch > 0 && labels.ndim() == 1 && labels.shape()[0] == n, "train_epoch: need batch > 0 and labels [", n,
            "], got batch ", batch, " and labels ", shape_str(labels.shape()));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(rng.randint(0, i + 1))]);
  double total = 0.0;
  std::int64_t steps = 0;
  for (std::int64_t s = 0; s < n; s += batch) {
    const std::int64_t e = std::min(n, s + batch);
    const Tensor xb = take_rows(x, perm, s, e), yb = take_rows(labels, perm, s, e);
    opt.zero_grad();
    const Var loss = softmax_cross_entropy(model(Var(xb)), Var(yb));
    loss.backward();
    opt.step();
    total += loss.value().item();
    ++steps;
  }
  return total / static_cast<double>(steps);
}

}  // namespace mls::autodiff::nn
