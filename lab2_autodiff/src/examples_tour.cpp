// The workload tour's models that train on generated data: a CNN with pooling, a char-RNN (LSTM or
// GRU cell unrolled by a C++ loop), a GCN on a stochastic block model.
#include <cmath>

#include "mls/autodiff/examples.hpp"
#include "mls/autodiff/nn.hpp"

namespace mls::autodiff::examples {

void bar_images(std::int64_t n, double noise, Rng& rng, Tensor& x, Tensor& labels) {
  MLS_CHECK(n > 0 && noise >= 0, "bar_images: need n > 0 and noise >= 0, got ", n, " and ", noise);
  constexpr std::int64_t kS = 8;
  std::vector<float> px(static_cast<std::size_t>(n * kS * kS));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t cls = rng.randint(0, 3), pos = rng.randint(1, kS - 1);
    ys[static_cast<std::size_t>(i)] = cls;
    float* img = px.data() + i * kS * kS;
    for (std::int64_t k = 0; k < kS * kS; ++k) img[k] = static_cast<float>(rng.normal(0.0, noise));
    for (std::int64_t k = 0; k < kS; ++k) {
      // horizontal: row pos; vertical: column pos; diagonal: column (row + pos) mod 8
      const std::int64_t r = cls == 0 ? pos : k,
                         c = cls == 0 ? k : (cls == 1 ? pos : (k + pos) % kS);
      img[r * kS + c] += 1.0f;
    }
  }
  x = Tensor::from_vector(px, {n, 1, kS, kS});
  labels = Tensor::from_vector(ys);
}

TrainCurve train_cnn(int steps, std::uint64_t seed, std::int64_t batch) {
  Rng rng(seed, "tour-cnn");
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(1, 4, 3, rng, 1, 1))
      .add(std::make_shared<nn::Activation>("relu"));
  net.add(std::make_shared<nn::MaxPool2d>(2));  // [B, 4, 4, 4]
  net.add(std::make_shared<nn::Conv2d>(4, 8, 3, rng, 1, 1))
      .add(std::make_shared<nn::Activation>("relu"));
  net.add(std::make_shared<nn::AvgPool2d>(2));  // [B, 8, 2, 2]
  nn::Linear head(32, 3, rng, nn::Init::Xavier);
  std::vector<nn::Parameter> params = net.parameters();
  for (auto& p : head.parameters()) params.push_back(p);
  nn::Adam opt(params, 0.02);
  auto logits = [&](const Tensor& x) { return head(reshape(net(Var(x)), {-1, 32})); };
  TrainCurve curve;
  Tensor x, y;
  for (int s = 0; s < steps; ++s) {
    bar_images(batch, 0.3, rng, x, y);
    opt.zero_grad();
    const Var loss = softmax_cross_entropy(logits(x), Var(y));
    loss.backward();
    opt.step();
    curve.losses.push_back(loss.value().item());
  }
  bar_images(96, 0.3, rng, x, y);
  NoGradGuard ng;
  curve.accuracy = nn::accuracy(logits(x).value(), y);
  return curve;
}

Tensor fib_sequences(std::int64_t n, std::int64_t t, std::int64_t vocab, Rng& rng) {
  MLS_CHECK(n > 0 && t > 0 && vocab > 1, "fib_sequences: need n, t > 0 and vocab > 1, got ", n,
            ", ", t, ", ", vocab);
  std::vector<std::int64_t> s(static_cast<std::size_t>(n * (t + 1)));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t* row = s.data() + i * (t + 1);
    for (std::int64_t k = 0; k <= t; ++k)
      row[k] = k < 2 ? rng.randint(0, vocab) : (row[k - 1] + row[k - 2]) % vocab;
  }
  return Tensor::from_vector(s, {n, t + 1});
}

TrainCurve train_char_rnn(int steps, std::uint64_t seed, bool gru, std::int64_t t) {
  constexpr std::int64_t kVocab = 5, kEmbed = 8, kHidden = 24, kBatch = 32;
  Rng rng(seed, "tour-rnn");
  const nn::Parameter embed = nn::parameter(Tensor::randn({kVocab, kEmbed}, rng, 0.0, 1.0));
  nn::LSTMCell lstm(kEmbed, kHidden, rng);
  nn::GRUCell gcell(kEmbed, kHidden, rng);
  nn::Linear head(kHidden, kVocab, rng, nn::Init::Xavier);
  std::vector<nn::Parameter> params{embed};
  for (auto& p : gru ? gcell.parameters() : lstm.parameters()) params.push_back(p);
  for (auto& p : head.parameters()) params.push_back(p);
  nn::Adam opt(params, 0.02);
  // The mean next-symbol loss over steps 1..t-1 (step 0 has seen one symbol only), and how many
  // of those predictions are right.
  auto run = [&](const Tensor& seq, double* acc) {
    const std::int64_t b = seq.shape()[0];
    LstmState st = lstm.zero_state(b);
    Var h = st.h;
    Var total;
    std::int64_t right = 0, count = 0;
    for (std::int64_t k = 0; k < t; ++k) {  // the O(T) sequential chain of the slides
      const Var xk = embedding(embed, Var(seq.slice(1, k, k + 1).reshape({b}).compact()));
      if (gru) {
        h = gcell.step(xk, h);
      } else {
        st = lstm.step(xk, st);
        h = st.h;
      }
      if (k == 0) continue;
      const Tensor target = seq.slice(1, k + 1, k + 2).reshape({b}).compact();
      const Var logits = head(h);
      const Var l = softmax_cross_entropy(logits, Var(target));
      total = total.defined() ? total + l : l;
      if (acc) {
        const auto pred = argmax(logits.value(), 1).to_vector<std::int64_t>();
        const auto want = target.to_vector<std::int64_t>();
        for (std::size_t i = 0; i < want.size(); ++i) right += pred[i] == want[i];
        count += b;
      }
    }
    if (acc) *acc = static_cast<double>(right) / static_cast<double>(count);
    return total / static_cast<double>(t - 1);
  };
  MLS_CHECK(t >= 2, "train_char_rnn: need t >= 2 steps, got ", t);
  TrainCurve curve;
  for (int s = 0; s < steps; ++s) {
    const Tensor seq = fib_sequences(kBatch, t, kVocab, rng);
    opt.zero_grad();
    const Var loss = run(seq, nullptr);
    loss.backward();
    opt.step();
    curve.losses.push_back(loss.value().item());
  }
  NoGradGuard ng;
  (void)run(fib_sequences(128, t, kVocab, rng), &curve.accuracy);
  return curve;
}

Sbm stochastic_block_model(std::int64_t blocks, std::int64_t per_block, double p_in, double p_out,
                           std::int64_t dim, double signal, Rng& rng) {
  MLS_CHECK(blocks >= 1 && per_block >= 1 && dim >= blocks,
            "stochastic_block_model: need blocks, per_block >= 1 and ", "dim >= blocks, got ",
            blocks, ", ", per_block, ", ", dim);
  const std::int64_t n = blocks * per_block;
  std::vector<std::int64_t> r, c;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i + 1; j < n; ++j)
      if (rng.uniform_double() < (i / per_block == j / per_block ? p_in : p_out)) {
        r.insert(r.end(), {i, j});
        c.insert(c.end(), {j, i});
      }
  std::vector<float> f(static_cast<std::size_t>(n * dim));
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i / per_block;
    for (std::int64_t d = 0; d < dim; ++d)
      f[static_cast<std::size_t>(i * dim + d)] =
          static_cast<float>(rng.normal() + (d == i / per_block ? signal : 0.0));
  }
  return {CsrMatrix::from_coo(n, n, r, c, std::vector<double>(r.size(), 1.0)),
          Tensor::from_vector(f, {n, dim}), Tensor::from_vector(y)};
}

TrainCurve train_gcn(int steps, std::uint64_t seed) {
  Rng rng(seed, "tour-gcn");
  const Sbm g = stochastic_block_model(3, 20, 0.3, 0.02, 8, 0.8, rng);
  const CsrMatrix a_hat = gcn_normalize(g.adjacency);
  nn::Sequential net;
  net.add(std::make_shared<nn::GCNLayer>(a_hat, 8, 16, rng))
      .add(std::make_shared<nn::Activation>("relu"));
  net.add(std::make_shared<nn::Dropout>(0.2, seed))
      .add(std::make_shared<nn::GCNLayer>(a_hat, 16, 3, rng));
  nn::Adam opt(net.parameters(), 0.02);
  TrainCurve curve;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    const Var loss = softmax_cross_entropy(net(Var(g.features)), Var(g.labels));
    loss.backward();
    opt.step();
    curve.losses.push_back(loss.value().item());
  }
  net.train(false);
  NoGradGuard ng;
  curve.accuracy = nn::accuracy(net(Var(g.features)).value(), g.labels);
  return curve;
}

}  // namespace mls::autodiff::examples
