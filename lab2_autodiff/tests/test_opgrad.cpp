// Every op's gradient against central differences (gradcheck, float64), eager and graph mode,
// with broadcasting shapes.
#include "helpers.hpp"
#include "mls/common/parallel.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::check_grad;
using autodiff_test::randn;
using autodiff_test::randu;
using autodiff_test::require_error;
using V = std::vector<Var>;

TEST_CASE("gradcheck: unary elementwise ops", "[lab2][opgrad]") {
  const Tensor x = randn({3, 4}, 1), pos = randu({3, 4}, 2, 0.3, 2.0);
  check_grad([](const V& v) { return -v[0]; }, {x});
  check_grad([](const V& v) { return abs(v[0]); }, {x});
  check_grad([](const V& v) { return exp(v[0]); }, {x});
  check_grad([](const V& v) { return log(v[0]); }, {pos});
  check_grad([](const V& v) { return sqrt(v[0]); }, {pos});
  check_grad([](const V& v) { return rsqrt(v[0]); }, {pos});
  check_grad([](const V& v) { return sin(v[0]); }, {x});
  check_grad([](const V& v) { return cos(v[0]); }, {x});
  check_grad([](const V& v) { return tanh(v[0]); }, {x});
  check_grad([](const V& v) { return sigmoid(v[0]); }, {x});
  check_grad([](const V& v) { return relu(v[0]); }, {x});
  check_grad([](const V& v) { return gelu(v[0]); }, {x});
}

TEST_CASE("gradcheck: binary ops with broadcasting", "[lab2][opgrad]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}}, {{}, {2, 3}}};
  std::uint64_t seed = 10;
  for (const auto& [sa, sb] : shapes) {
    INFO(shape_str(sa) << " with " << shape_str(sb));
    const Tensor a = randn(sa, seed++), b = randn(sb, seed++);
    const Tensor pa = randu(sa, seed++, 0.5, 2.0), bb = randu(sb, seed++, 0.5, 2.0);
    check_grad([](const V& v) { return v[0] + v[1]; }, {a, b});
    check_grad([](const V& v) { return v[0] - v[1]; }, {a, b});
    check_grad([](const V& v) { return v[0] * v[1]; }, {a, b});
    check_grad([](const V& v) { return v[0] / v[1]; }, {a, bb});
    check_grad([](const V& v) { return pow(v[0], v[1]); }, {pa, b});
    check_grad([](const V& v) { return maximum(v[0], v[1]); }, {a, b});
    check_grad([](const V& v) { return minimum(v[0], v[1]); }, {a, b});
  }
  check_grad([](const V& v) { return pow(v[0], 3.0) + v[0] * 2.0 - 1.0 / v[0]; }, {randu({5}, 3, 0.5, 2.0)});
}

TEST_CASE("gradcheck: where, cast and comparisons (no gradient through the condition)", "[lab2][opgrad]") {
  const Tensor a = randn({3, 4}, 21), b = randn({4}, 22);
  check_grad([](const V& v) { return where(gt(v[0], v[1]), v[0] * v[0], v[1]); }, {a, b});
  check_grad([](const V& v) { return cast(v[0], DType::Float64) * cast(gt(v[0], v[1]), DType::Float64); }, {a, b});
}

TEST_CASE("gradcheck: reductions with axes and keepdim", "[lab2][opgrad]") {
  const Tensor x = randn({2, 3, 4}, 31);
  for (bool keep : {false, true}) {
    for (const std::vector<std::int64_t>& axes : std::vector<std::vector<std::int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {-1}}) {
      INFO("axes " << shape_str(axes) << " keepdim " << keep);
      check_grad([&](const V& v) { return sum(v[0], axes, keep); }, {x});
      check_grad([&](const V& v) { return mean(v[0], axes, keep); }, {x});
      check_grad([&](const V& v) { return max(v[0], axes, keep); }, {x});
      check_grad([&](const V& v) { return min(v[0], axes, keep); }, {x});
    }
  }
}

TEST_CASE("max/min ties split the gradient equally", "[lab2][opgrad]") {
  Var x(Tensor::from({1.0, 3.0, 3.0, 2.0}), true);
  max(x).backward();
  autodiff_test::observe_var("x.grad", x.grad(), {});
  MLS_ORACLE_CHECK(CHECK(x.grad().value().to_vector<double>() == std::vector<double>{0.0, 0.5, 0.5, 0.0}));
  Var a(Tensor::from({1.0, 2.0}), true), b(Tensor::from({1.0, 5.0}), true);
  sum(maximum(a, b)).backward();
  autodiff_test::observe_var("a.grad", a.grad(), {});
  autodiff_test::observe_var("b.grad", b.grad(), {});
  MLS_ORACLE_CHECK(CHECK(a.grad().value().to_vector<double>() == std::vector<double>{0.5, 0.0});
                   CHECK(b.grad().value().to_vector<double>() == std::vector<double>{0.5, 1.0}));
}

TEST_CASE("gradcheck: shape ops", "[lab2][opgrad]") {
  const Tensor x = randn({2, 3, 4}, 41), y = randn({2, 2, 4}, 42), r = randn({3, 1}, 43);
  check_grad([](const V& v) { return reshape(v[0], {6, -1}); }, {x});
  check_grad([](const V& v) { return permute(v[0], {2, 0, 1}) * 1.5; }, {x});
  check_grad([](const V& v) { return transpose(v[0], 0, 2); }, {x});
  check_grad([](const V& v) { return slice(v[0], 2, 1, 4, 2); }, {x});
  check_grad([](const V& v) { return slice(v[0], 1, -2, 3); }, {x});
  check_grad([](const V& v) { return expand(v[0], {2, 3, 5}); }, {r});
  check_grad([](const V& v) { return unsqueeze(v[0], {0, 3}); }, {x});
  check_grad([](const V& v) { return squeeze(v[0], {1}); }, {r});
  check_grad([](const V& v) { return concat({v[0], v[1], v[0]}, 1); }, {x, y});
  check_grad([](const V& v) { return stack({v[0], v[0] * v[0]}, 1); }, {x});
  check_grad([](const V& v) { return sum_like(v[0], v[1]); }, {x, r.reshape({3, 1})});
  check_grad([](const V& v) { return broadcast_like(v[1], v[0]) * v[0]; }, {x, r});
}

TEST_CASE("gradcheck: matmul, 2-D, batched with broadcast batch dims, and vectors", "[lab2][opgrad]") {
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, 51), randn({4, 5}, 52)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({2, 3, 4}, 53), randn({2, 4, 5}, 54)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({2, 3, 4}, 55), randn({4, 2}, 56)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, 57), randn({2, 1, 4, 2}, 58)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({4}, 59), randn({4, 3}, 60)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, 61), randn({4}, 62)});
  check_grad([](const V& v) { return matmul(v[0], v[1]); }, {randn({4}, 63), randn({4}, 64)});
}

TEST_CASE("gradcheck: softmax, log_softmax, logsumexp on every axis", "[lab2][opgrad]") {
  const Tensor x = mls::mul(randn({2, 3, 4}, 71), 3.0);
  for (std::int64_t axis : {0, 1, 2, -1}) {
    INFO("axis " << axis);
    check_grad([&](const V& v) { return softmax(v[0], axis); }, {x});
    check_grad([&](const V& v) { return log_softmax(v[0], axis); }, {x});
    check_grad([&](const V& v) { return logsumexp(v[0], axis, false); }, {x});
    check_grad([&](const V& v) { return logsumexp(v[0], axis, true); }, {x});
  }
}

TEST_CASE("gradcheck: fused softmax cross-entropy (class and probability targets) and MSE", "[lab2][opgrad]") {
  const Tensor logits = mls::mul(randn({5, 4}, 81), 2.0);
  const Tensor cls = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 1, 1, 2});
  const Tensor probs = mls::softmax(randn({5, 4}, 82), 1);
  check_grad([](const V& v) { return softmax_cross_entropy(v[0], v[1]); }, {logits, cls});
  check_grad([](const V& v) { return softmax_cross_entropy(v[0], v[1]); }, {logits, probs});
  check_grad([](const V& v) { return mse_loss(v[0], v[1]); }, {randn({3, 4}, 83), randn({3, 4}, 84)});
  // Stable: huge logits give a finite loss and gradient.
  Var big(Tensor::from({1000.0, -1000.0, 0.0}, {1, 3}), true);
  const Var l = softmax_cross_entropy(big, Var(Tensor::from_vector(std::vector<std::int64_t>{1})));
  l.backward();
  autodiff_test::observe_var("loss", l);
  autodiff_test::observe_var("big.grad", big.grad(), autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(l.value().item() == Approx(2000.0));
                   CHECK(allclose(big.grad().value(), Tensor::from({1.0, -1.0, 0.0}, {1, 3}))));
}

TEST_CASE("gradcheck: layer_norm", "[lab2][opgrad]") {
  check_grad([](const V& v) { return layer_norm(v[0], v[1], v[2]); },
             {randn({3, 5}, 91), randu({5}, 92, 0.5, 1.5), randn({5}, 93)});
  check_grad([](const V& v) { return layer_norm(v[0], v[1], v[2], 1e-3); },
             {randn({2, 3, 4}, 94), randn({4}, 95), randn({4}, 96)});
}

TEST_CASE("gradcheck: batch_norm in training and inference", "[lab2][opgrad]") {
  const Tensor x2 = randn({6, 3}, 101), x4 = randn({2, 3, 2, 2}, 102);
  const Tensor gamma = randu({3}, 103, 0.5, 1.5), beta = randn({3}, 104);
  const Tensor rm = randn({3}, 105), rv = randu({3}, 106, 0.5, 2.0);
  for (bool training : {true, false}) {
    INFO("training " << training);
    check_grad([&](const V& v) { return batch_norm(v[0], v[1], v[2], constant_like(v[0], rm.clone()), constant_like(v[0], rv.clone()), training); },
               {x2, gamma, beta});
    check_grad([&](const V& v) { return batch_norm(v[0], v[1], v[2], constant_like(v[0], rm.clone()), constant_like(v[0], rv.clone()), training); },
               {x4, gamma, beta});
  }
  // The running statistics move towards the batch statistics.
  Var m(Tensor::zeros({3}, DType::Float64)), v(Tensor::ones({3}, DType::Float64));
  Var xv(x2, true);
  sum(batch_norm(xv, Var(gamma), Var(beta), m, v, true, 0.5) * Var(randn({6, 3}, 107))).backward();
  autodiff_test::observe_var("running mean", m, autodiff_test::kAllclose);
  autodiff_test::observe_var("running var", v, autodiff_test::kAllclose);
  MLS_ORACLE_CHECK(CHECK(allclose(m.value(), mls::mul(mls::mean(x2, {0}), 0.5)));
                   CHECK(allclose(v.value(), mls::add(mls::mul(mls::var(x2, {0}, false, 1), 0.5), 0.5))));
}

TEST_CASE("gradcheck: embedding (repeated indices accumulate)", "[lab2][opgrad]") {
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{1, 4, 1, 0, 4, 4}, {2, 3});
  check_grad([](const V& v) { return embedding(v[0], v[1]); }, {randn({5, 3}, 111), idx});
  Var w(Tensor::zeros({5, 2}, DType::Float64), true);
  sum(embedding(w, Var(idx))).backward();
  autodiff_test::observe_var("w.grad", w.grad(), {});
  MLS_ORACLE_CHECK(CHECK(w.grad().value().to_vector<double>() == std::vector<double>{1, 1, 2, 2, 0, 0, 0, 0, 3, 3}));
}

TEST_CASE("gradcheck: conv2d via im2col, stride and padding", "[lab2][opgrad]") {
  const Tensor x = randn({2, 2, 5, 5}, 121), w = randn({3, 2, 3, 3}, 122);
  check_grad([](const V& v) { return conv2d(v[0], v[1], 1, 0); }, {x, w});
  check_grad([](const V& v) { return conv2d(v[0], v[1], 2, 1); }, {x, w});
  check_grad([](const V& v) { return im2col(v[0], 2, 3, 1, 1); }, {x});
  // conv2d equals a direct loop on one output element.
  Var out = conv2d(Var(x), Var(w), 1, 1);
  const double got = out.value().at({1, 2, 1, 2});
  mls::testing::observe("conv2d(x, w, stride 1, padding 1) at [1, 2, 1, 2]", got, autodiff_test::kApprox);
  MLS_ORACLE(double ref = 0; for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const int y = 1 - 1 + i, xx = 2 - 1 + j;
        ref += x.at({1, c, y, xx}) * w.at({2, c, i, j});
      }
  })
  MLS_ORACLE_CHECK(CHECK(got == Approx(ref)));
}

TEST_CASE("im2col and its gradient (col2im) match naive loops: strides, padding wider than the kernel, 1 and 2 threads",
          "[lab2][opgrad]") {
  struct Geo { std::int64_t n, c, h, w, kh, kw, stride, pad; };
  for (const Geo& g : {Geo{2, 3, 7, 6, 3, 3, 1, 1}, Geo{1, 2, 5, 9, 2, 3, 2, 0}, Geo{2, 1, 2, 3, 3, 3, 3, 2},
                       Geo{3, 4, 16, 16, 5, 5, 2, 3}}) {
    const Tensor x = randn({g.n, g.c, g.h, g.w}, 141);
    const std::int64_t oh = (g.h + 2 * g.pad - g.kh) / g.stride + 1, ow = (g.w + 2 * g.pad - g.kw) / g.stride + 1;
    const std::int64_t ckk = g.c * g.kh * g.kw;
    const Tensor gcols = randn({g.n, ckk, oh * ow}, 142);  // a random G of the columns' shape
    for (int threads : {1, 2}) {
      INFO("geometry n" << g.n << " c" << g.c << " " << g.h << "x" << g.w << " k" << g.kh << "x" << g.kw << " s"
                        << g.stride << " p" << g.pad << ", threads " << threads);
      ThreadCountGuard guard(threads);
      // col2im through im2col's gradient rule: d/dx sum(im2col(x) * G) = col2im(G).
      Var xv(x, true);
      const Var cv = im2col(xv, g.kh, g.kw, g.stride, g.pad);
      sum(cv * Var(gcols)).backward();
      const Tensor img = xv.grad().value();
      MLS_OBSERVE(img, {1e-12, 1e-12});
      const Tensor cols = cv.value();
      MLS_OBSERVE(cols);
      // The oracle (after the code under test ran): the naive columns and the naive col2im
      // (adjoint) of G.
      MLS_ORACLE(std::vector<double> want(static_cast<std::size_t>(g.n * ckk * oh * ow), 0.0);
                 std::vector<double> want_img(static_cast<std::size_t>(x.numel()), 0.0);
                 for (std::int64_t n = 0; n < g.n; ++n) {
                   for (std::int64_t c = 0; c < g.c; ++c)
                     for (std::int64_t i = 0; i < g.kh; ++i)
                       for (std::int64_t j = 0; j < g.kw; ++j)
                         for (std::int64_t oy = 0; oy < oh; ++oy)
                           for (std::int64_t ox = 0; ox < ow; ++ox) {
                             const std::int64_t y = oy * g.stride - g.pad + i, xx = ox * g.stride - g.pad + j;
                             const std::int64_t r = (c * g.kh + i) * g.kw + j;
                             if (y < 0 || y >= g.h || xx < 0 || xx >= g.w) continue;
                             want[static_cast<std::size_t>((n * ckk + r) * oh * ow + oy * ow + ox)] = x.at({n, c, y, xx});
                             want_img[static_cast<std::size_t>(((n * g.c + c) * g.h + y) * g.w + xx)] +=
                                 gcols.at({n, r, oy * ow + ox});
                           }
                 })
      MLS_ORACLE_CHECK(const std::vector<double> got = img.to_vector<double>(); REQUIRE(got.size() == want_img.size());
                       double worst = 0.0;
                       for (std::size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::fabs(got[k] - want_img[k]));
                       CHECK(worst <= 1e-12); CHECK(cols.shape() == Shape{g.n, ckk, oh * ow});
                       CHECK(cols.to_vector<double>() == want));
    }
  }
}

TEST_CASE("gradcheck: a composite (two-layer network with every kind of op)", "[lab2][opgrad]") {
  check_grad(
      [](const V& v) {
        const Var h = gelu(layer_norm(matmul(v[0], v[1]), v[2], v[3]));
        return softmax_cross_entropy(matmul(h, transpose(v[1])), v[4]) + mse_loss(h, tanh(h)) * 0.1;
      },
      {randn({4, 3}, 131), randn({3, 3}, 132), randu({3}, 133, 0.5, 1.5), randn({3}, 134),
       Tensor::from_vector(std::vector<std::int64_t>{0, 2, 1, 2})});
}

TEST_CASE("op errors: bad shapes, indices and gradcheck inputs", "[lab2][errors]") {
  check_grad([](const V& v) { return exp(v[0]); }, {randn({2}, 1)});
  require_error([] { (void)gradcheck([](const V& v) { return v[0]; }, {Tensor::ones({2})}); }, "use float64");
  require_error([] { (void)softmax_cross_entropy(Var(Tensor::zeros({2, 3})), Var(Tensor::from_vector(std::vector<std::int64_t>{0, 3}))); },
                "target 3 at row 1 is out of range for 3 classes");
  require_error([] { (void)embedding(Var(Tensor::zeros({4, 2})), Var(Tensor::from_vector(std::vector<std::int64_t>{5}))); },
                "index 5 is out of range for 4 rows");
  require_error([] { (void)conv2d(Var(Tensor::zeros({1, 2, 4, 4})), Var(Tensor::zeros({3, 1, 3, 3}))); },
                "x has 2 channels, w expects 1");
  require_error([] { (void)layer_norm(Var(Tensor::zeros({2, 4})), Var(Tensor::ones({3})), Var(Tensor::zeros({3}))); },
                "gamma and beta must be [4]");
  require_error([] { (void)mse_loss(Var(Tensor::zeros({2, 4})), Var(Tensor::zeros({2, 3}))); }, "mse_loss: shapes differ");
}
