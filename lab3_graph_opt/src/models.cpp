// The example models of lab 3 (inference programs with constant weights).
#include "mls/graph_opt/models.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"

namespace mls::graph_opt {

namespace {
Tensor randn(Rng& rng, const Shape& s, double stddev) { return Tensor::randn(s, rng, 0.0, stddev); }
Tensor randu(Rng& rng, const Shape& s, double lo, double hi) { return Tensor::rand(s, rng, lo, hi); }
/// Inference batch norm over channels c with random (constant) statistics.
Var bn(Program& p, Rng& rng, const Var& x, std::int64_t c) {
  return autodiff::batch_norm(x, p.constant(randu(rng, {c}, 0.5, 1.5), "gamma"), p.constant(randn(rng, {c}, 0.1), "beta"),
                        p.constant(randn(rng, {c}, 0.1), "mean"), p.constant(randu(rng, {c}, 0.5, 1.5), "var"),
                        /*training=*/false);
}
}  // namespace

Program resnet_block(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::uint64_t seed) {
  Rng rng(seed, "lab3-resnet");
  Program p;
  const double s = 1.0 / std::sqrt(static_cast<double>(c * 9));
  const Var x = p.input("x", {n, c, h, w});
  // conv1 has a bias (the slides' B), conv2 has none.
  Var y = autodiff::conv2d(x, p.constant(randn(rng, {c, c, 3, 3}, s), "W1"), 1, 1) + p.constant(randn(rng, {1, c, 1, 1}, 0.1), "B1");
  y = autodiff::relu(bn(p, rng, y, c));
  y = bn(p, rng, autodiff::conv2d(y, p.constant(randn(rng, {c, c, 3, 3}, s), "W2"), 1, 1), c);
  // A parallel pair of convs over the same input, summed (slides 001, "fusing two convs").
  const Var side = autodiff::conv2d(x, p.constant(randn(rng, {c, c, 3, 3}, s), "Wa"), 1, 1) +
                   autodiff::conv2d(x, p.constant(randn(rng, {c, c, 3, 3}, s), "Wb"), 1, 1);
  p.output(autodiff::relu(y + x + side).set_name("out"));
  return p;
}

Program attention_block(std::int64_t t, std::int64_t d, std::uint64_t seed) {
  Rng rng(seed, "lab3-attention");
  Program p;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  const Var x = p.input("x", {t, d});
  auto W = [&](const char* name, std::int64_t r, std::int64_t c) { return p.constant(randn(rng, {r, c}, s), name); };
  auto b = [&](const char* name, std::int64_t c) { return p.constant(randn(rng, {c}, 0.1), name); };
  const Var q = autodiff::matmul(x, W("Wq", d, d));
  const Var k = autodiff::matmul(x, W("Wk", d, d));
  const Var v = autodiff::matmul(x, W("Wv", d, d));
  const Var att = autodiff::softmax(autodiff::matmul(q, autodiff::transpose(k)) * s, -1);
  const Var h = x + (autodiff::matmul(autodiff::matmul(att, v), W("Wo", d, d)) + b("bo", d));
  const Var f = autodiff::matmul(autodiff::gelu(autodiff::matmul(h, W("W1", d, 4 * d)) + b("b1", 4 * d)), W("W2", 4 * d, d)) + b("b2", d);
  p.output((h + f).set_name("out"));
  return p;
}

Program mlp(std::int64_t n, std::int64_t d, std::uint64_t seed) {
  Rng rng(seed, "lab3-mlp");
  Program p;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  const Var x = p.input("x", {n, d});
  auto W = [&](const char* name) { return p.constant(randn(rng, {d, d}, s), name); };
  auto b = [&](const char* name) { return p.constant(randn(rng, {d}, 0.1), name); };
  const Var h1 = autodiff::relu(autodiff::matmul(x, W("W1")) + b("b1"));
  const Var W2 = W("W2"), b2 = b("b2");
  const Var h1s = h1 * 1.0;                             // x*1: simplify
  const Var h2 = autodiff::relu(autodiff::matmul(h1s, W2) + b2);
  const Var h2b = autodiff::relu(autodiff::matmul(h1, W2) + b2);    // the same value again: CSE
  const Var y = autodiff::matmul(h2 + h2b, W("W3")) + b("b3");
  p.output((autodiff::tanh(y) * 0.5 + 0.5).set_name("out"));  // an elementwise tail: fusion
  return p;
}

Program elementwise_chain(std::int64_t n, int ops) {
  MLS_CHECK(n >= 1 && ops >= 1, "elementwise_chain: need n >= 1 and ops >= 1, got ", n, ", ", ops);
  Program p;
  Var y = p.input("x", {n});
  for (int i = 0; i < ops; ++i) {
    switch (i % 4) {
      case 0: y = y * 1.5; break;
      case 1: y = y + 0.25; break;
      case 2: y = autodiff::relu(y); break;
      default: y = y - 0.125; break;
    }
  }
  p.output(y);
  return p;
}

Program slides_expression(std::int64_t n) {
  Program p;
  const Var a = p.input("A", {n}), b = p.input("B", {n}), c = p.input("C", {n}), d = p.input("D", {n});
  p.output((d + (a + b) * c).set_name("E"));
  return p;
}

Program inception_block(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::uint64_t seed) {
  MLS_CHECK(n >= 1 && c >= 4 && c % 4 == 0 && h >= 1 && w >= 1, "inception_block: need n, h, w >= 1 and c a multiple of 4, got n ",
            n, ", c ", c, ", h ", h, ", w ", w);
  Rng rng(seed, "lab3-inception");
  Program p;
  const Var x = p.input("x", {n, c, h, w});
  // relu(conv_k(in) + bias): a k x k conv from cin to cout channels, padded to keep h, w.
  auto conv = [&](const Var& in, std::int64_t cin, std::int64_t cout, std::int64_t k, const std::string& name) {
    const double s = 1.0 / std::sqrt(static_cast<double>(cin * k * k));
    const Var y = autodiff::conv2d(in, p.constant(randn(rng, {cout, cin, k, k}, s), "W" + name), 1, k / 2);
    return autodiff::relu(y + p.constant(randn(rng, {1, cout, 1, 1}, 0.1), "B" + name)).set_name(name);
  };
  const Var b1 = conv(x, c, c, 1, "b1_1x1");
  const Var b2 = conv(conv(x, c, c / 2, 1, "b2_1x1"), c / 2, c, 3, "b2_3x3");
  const Var b3 = conv(conv(x, c, c / 4, 1, "b3_1x1"), c / 4, c / 2, 5, "b3_5x5");
  const Var b4 = conv(x, c, c / 2, 3, "b4_3x3");
  p.output(autodiff::concat({b1, b2, b3, b4}, 1).set_name("out"));
  return p;
}

Program multihead_attention(std::int64_t t, std::int64_t d, std::int64_t heads, std::uint64_t seed) {
  MLS_CHECK(t >= 1 && heads >= 1 && d >= heads && d % heads == 0, "multihead_attention: need t >= 1 and d a multiple of heads, got t ", t,
            ", d ", d, ", heads ", heads);
  Rng rng(seed, "lab3-heads");
  Program p;
  const std::int64_t dh = d / heads;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  const Var x = p.input("x", {t, d});
  auto W = [&](const std::string& name, std::int64_t r, std::int64_t c) { return p.constant(randn(rng, {r, c}, s), name); };
  std::vector<Var> outs;
  for (std::int64_t i = 0; i < heads; ++i) {
    const std::string h = std::to_string(i);
    const Var q = autodiff::matmul(x, W("Wq" + h, d, dh)).set_name("q" + h);
    const Var k = autodiff::matmul(x, W("Wk" + h, d, dh)).set_name("k" + h);
    const Var v = autodiff::matmul(x, W("Wv" + h, d, dh)).set_name("v" + h);
    const Var att = autodiff::softmax(autodiff::matmul(q, autodiff::transpose(k)) * (1.0 / std::sqrt(static_cast<double>(dh))), -1);
    outs.push_back(autodiff::matmul(att, v).set_name("head" + h));
  }
  p.output((x + autodiff::matmul(autodiff::concat(outs, 1), W("Wo", d, d))).set_name("out"));
  return p;
}

Program build_model(const std::string& name) {
  if (name == "resnet") return resnet_block();
  if (name == "attention") return attention_block();
  if (name == "mlp") return mlp();
  if (name == "inception") return inception_block();
  if (name == "heads") return multihead_attention();
  fail("build_model: unknown model '", name, "' (known: resnet, attention, mlp, inception, heads)");
}

Program parallel_bench_model(const std::string& name) {
  if (name == "inception") return inception_block(4, 32, 16, 16);
  if (name == "heads") return multihead_attention(128, 256, 8);
  fail("parallel_bench_model: unknown model '", name, "' (the benchmark's models: inception, heads)");
}

}  // namespace mls::graph_opt
