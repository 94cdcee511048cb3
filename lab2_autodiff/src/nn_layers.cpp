// The workload tour's layers (nn.hpp): convolution, transposed convolution, pooling, dropout,
// LSTM and GRU cells and a GCN layer, each a thin module over the ops of workload.hpp.
#include <cmath>
#include <sstream>

#include "mls/autodiff/nn.hpp"

namespace mls::autodiff::nn {

namespace {
std::string str(std::initializer_list<std::int64_t> v) {
  std::ostringstream os;
  bool first = true;
  for (std::int64_t x : v) {
    os << (first ? "" : ", ") << x;
    first = false;
  }
  return os.str();
}
/// A 4-D image input of `c` channels, else an mls::Error naming the layer.
void check_image(const Var& x, std::int64_t c, const std::string& layer) {
  MLS_CHECK(x.ndim() == 4 && (x.shape()[1] == c || x.shape()[1] < 0), layer, ": input has shape ",
            shape_str(x.shape()), ", expected [N, ", c, ", H, W]");
}
/// PyTorch's RNN initialisation: U(-1/sqrt(H), 1/sqrt(H)).
Parameter rnn_param(const Shape& s, std::int64_t hidden, Rng& rng, DType dtype) {
  const double a = 1.0 / std::sqrt(static_cast<double>(hidden));
  return parameter(Tensor::rand(s, rng, -a, a, dtype));
}
}  // namespace

// ---- convolutions
// ---------------------------------------------------------------------------------
Conv2d::Conv2d(std::int64_t in, std::int64_t out, std::int64_t k, Rng& rng, std::int64_t stride,
               std::int64_t pad, bool with_bias, DType dtype)
    : in_(in), out_(out), k_(k), stride_(stride), pad_(pad) {
  MLS_CHECK(in > 0 && out > 0 && k > 0, "Conv2d: channels and kernel must be > 0, got ", in, " -> ",
            out, ", kernel ", k);
  weight = parameter(kaiming_normal({out, in, k, k}, in * k * k, rng, dtype));
  weight.set_name("W");
  if (with_bias) bias = parameter(Tensor::zeros({out}, dtype)).set_name("b");
}
Var Conv2d::forward(const Var& x) {
  check_image(x, in_, name());
  const Var y = conv2d(x, weight, stride_, pad_);
  return bias.defined() ? y + reshape(bias, {1, out_, 1, 1}) : y;
}
std::vector<Parameter> Conv2d::parameters() {
  if (bias.defined()) return {weight, bias};
  return {weight};
}
std::string Conv2d::name() const { return "Conv2d(" + str({in_, out_, k_, stride_, pad_}) + ")"; }

ConvTranspose2d::ConvTranspose2d(std::int64_t in, std::int64_t out, std::int64_t k, Rng& rng,
                                 std::int64_t stride, std::int64_t pad, std::int64_t output_padding,
                                 bool with_bias, DType dtype)
    : in_(in), out_(out), k_(k), stride_(stride), pad_(pad), output_padding_(output_padding) {
  MLS_CHECK(in > 0 && out > 0 && k > 0, "ConvTranspose2d: channels and kernel must be > 0, got ",
            in, " -> ", out, ", kernel ", k);
  weight = parameter(kaiming_normal({in, out, k, k}, in * k * k, rng, dtype));
  weight.set_name("W");
  if (with_bias) bias = parameter(Tensor::zeros({out}, dtype)).set_name("b");
}
Var ConvTranspose2d::forward(const Var& x) {
  check_image(x, in_, name());
  const Var y = conv_transpose2d(x, weight, stride_, pad_, output_padding_);
  return bias.defined() ? y + reshape(bias, {1, out_, 1, 1}) : y;
}
std::vector<Parameter> ConvTranspose2d::parameters() {
  if (bias.defined()) return {weight, bias};
  return {weight};
}
std::string ConvTranspose2d::name() const {
  return "ConvTranspose2d(" + str({in_, out_, k_, stride_, pad_, output_padding_}) + ")";
}

// ---- pooling, dropout
// -----------------------------------------------------------------------------
MaxPool2d::MaxPool2d(std::int64_t k, std::int64_t stride, std::int64_t pad)
    : k_(k), stride_(stride), pad_(pad) {}
Var MaxPool2d::forward(const Var& x) { return max_pool2d(x, k_, k_, stride_, pad_); }
std::string MaxPool2d::name() const {
  return "MaxPool2d(" + str({k_, stride_ ? stride_ : k_, pad_}) + ")";
}

AvgPool2d::AvgPool2d(std::int64_t k, std::int64_t stride, std::int64_t pad, bool count_include_pad)
    : k_(k), stride_(stride), pad_(pad), count_include_pad_(count_include_pad) {}
Var AvgPool2d::forward(const Var& x) {
  return avg_pool2d(x, k_, k_, stride_, pad_, count_include_pad_);
}
std::string AvgPool2d::name() const {
  return "AvgPool2d(" + str({k_, stride_ ? stride_ : k_, pad_}) + ")";
}

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
  MLS_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}
Var Dropout::forward(const Var& x) {
  if (!training()) return x;
  return dropout(x, p_, seed_, calls_++);
}
std::string Dropout::name() const {
  std::ostringstream os;
  os << "Dropout(" << p_ << ")";
  return os.str();
}

// ---- recurrent cells
// ------------------------------------------------------------------------------
LSTMCell::LSTMCell(std::int64_t input, std::int64_t hidden, Rng& rng, DType dtype)
    : input_(input), hidden_(hidden), dtype_(dtype) {
  MLS_CHECK(input > 0 && hidden > 0, "LSTMCell: sizes must be > 0, got input ", input, ", hidden ",
            hidden);
  w_ih = rnn_param({4 * hidden, input}, hidden, rng, dtype).set_name("w_ih");
  w_hh = rnn_param({4 * hidden, hidden}, hidden, rng, dtype).set_name("w_hh");
  b_ih = rnn_param({4 * hidden}, hidden, rng, dtype).set_name("b_ih");
  b_hh = rnn_param({4 * hidden}, hidden, rng, dtype).set_name("b_hh");
}
LstmState LSTMCell::step(const Var& x, const LstmState& state) {
  return lstm_cell(x, state, w_ih, w_hh, b_ih, b_hh);
}
LstmState LSTMCell::zero_state(std::int64_t batch) const {
  return {Var(Tensor::zeros({batch, hidden_}, dtype_)),
          Var(Tensor::zeros({batch, hidden_}, dtype_))};
}
Var LSTMCell::forward(const Var& x) {
  MLS_CHECK(x.ndim() == 2, name(), ": input has shape ", shape_str(x.shape()), ", expected [B, ",
            input_, "]");
  LstmState s = zero_state(x.shape()[0]);
  if (x.get()->graph) s = {constant_like(x, s.h.value()), constant_like(x, s.c.value())};
  return step(x, s).h;
}
std::vector<Parameter> LSTMCell::parameters() { return {w_ih, w_hh, b_ih, b_hh}; }
std::string LSTMCell::name() const { return "LSTMCell(" + str({input_, hidden_}) + ")"; }

GRUCell::GRUCell(std::int64_t input, std::int64_t hidden, Rng& rng, DType dtype)
    : input_(input), hidden_(hidden), dtype_(dtype) {
  MLS_CHECK(input > 0 && hidden > 0, "GRUCell: sizes must be > 0, got input ", input, ", hidden ",
            hidden);
  w_ih = rnn_param({3 * hidden, input}, hidden, rng, dtype).set_name("w_ih");
  w_hh = rnn_param({3 * hidden, hidden}, hidden, rng, dtype).set_name("w_hh");
  b_ih = rnn_param({3 * hidden}, hidden, rng, dtype).set_name("b_ih");
  b_hh = rnn_param({3 * hidden}, hidden, rng, dtype).set_name("b_hh");
}
Var GRUCell::step(const Var& x, const Var& h) { return gru_cell(x, h, w_ih, w_hh, b_ih, b_hh); }
Var GRUCell::forward(const Var& x) {
  MLS_CHECK(x.ndim() == 2, name(), ": input has shape ", shape_str(x.shape()), ", expected [B, ",
            input_, "]");
  return step(x, constant_like(x, Tensor::zeros({x.shape()[0], hidden_}, dtype_)));
}
std::vector<Parameter> GRUCell::parameters() { return {w_ih, w_hh, b_ih, b_hh}; }
std::string GRUCell::name() const { return "GRUCell(" + str({input_, hidden_}) + ")"; }

// ---- graph convolution
// ----------------------------------------------------------------------------
GCNLayer::GCNLayer(CsrMatrix a_hat, std::int64_t in, std::int64_t out, Rng& rng, bool with_bias,
                   DType dtype)
    : a_hat_(std::move(a_hat)), in_(in), out_(out) {
  MLS_CHECK(in > 0 && out > 0, "GCNLayer: sizes must be > 0, got ", in, " -> ", out);
  MLS_CHECK(a_hat_.rows() == a_hat_.cols(), "GCNLayer: the adjacency must be square, got ",
            a_hat_.rows(), "x", a_hat_.cols());
  weight = parameter(xavier_uniform({in, out}, in, out, rng, 1.0, dtype)).set_name("W");
  if (with_bias) bias = parameter(Tensor::zeros({out}, dtype)).set_name("b");
}
Var GCNLayer::forward(const Var& x) {
  MLS_CHECK(x.ndim() == 2 && x.shape()[0] == a_hat_.cols() && x.shape()[1] == in_, name(),
            ": input has shape ", shape_str(x.shape()), ", expected [", a_hat_.cols(), ", ", in_,
            "] (one row per node)");
  const Var y =
      spmm(a_hat_, constant_like(x, a_hat_.values().to(weight.dtype())), matmul(x, weight));
  return bias.defined() ? y + bias : y;
}
std::vector<Parameter> GCNLayer::parameters() {
  if (bias.defined()) return {weight, bias};
  return {weight};
}
std::string GCNLayer::name() const { return "GCNLayer(" + str({a_hat_.rows(), in_, out_}) + ")"; }

}  // namespace mls::autodiff::nn
