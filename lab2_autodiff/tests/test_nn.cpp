// nn: modules, initialisation, optimizers, a training run, and the IDX loader.
#include "helpers.hpp"

#include <cstdio>
#include <filesystem>

#include "mls/autodiff/data.hpp"

using namespace mls;
using namespace mls::autodiff;
using autodiff_test::require_error;

TEST_CASE("nn: Linear and mlp shapes, parameters, seeded init statistics", "[lab2][nn]") {
  Rng rng(1, "init");
  auto net = nn::mlp({20, 64, 64, 3}, rng);
  MLS_OBSERVE(net->size());
  MLS_OBSERVE(net->parameters().size());
  MLS_ORACLE_CHECK(CHECK(net->size() == 5); CHECK(net->parameters().size() == 6));
  const Var y = (*net)(Var(Tensor::ones({7, 20})));
  MLS_OBSERVE(y.shape());
  MLS_ORACLE_CHECK(CHECK(y.shape() == Shape{7, 3}));
  sum(y).backward();
  for (auto& p : net->parameters()) CHECK(p.grad().defined());
  net->zero_grad();
  for (auto& p : net->parameters()) CHECK_FALSE(p.grad().defined());
  Rng r1(5, "k"), r2(5, "k");
  const Tensor k = nn::kaiming_normal({400, 100}, 400, r1);
  CHECK(equal(k, nn::kaiming_normal({400, 100}, 400, r2)));  // seeded
  MLS_OBSERVE(mls::var(k).item(), {0.1, 0.0});  // each build within 5% of 2 / 400
  MLS_ORACLE_CHECK(CHECK(mls::var(k).item() == Approx(2.0 / 400).epsilon(0.05)));
  const Tensor xu = nn::xavier_uniform({300, 200}, 300, 200, r1);
  MLS_OBSERVE(mls::max(mls::abs(xu)).item(), {0.01, 0.0});  // within 1% of the bound sqrt(6 / 500)
  MLS_ORACLE(const double a = std::sqrt(6.0 / 500);)
  MLS_ORACLE_CHECK(CHECK(mls::max(mls::abs(xu)).item() <= a));
  MLS_OBSERVE(mls::var(xu).item(), {0.1, 0.0});
  MLS_ORACLE_CHECK(CHECK(mls::var(xu).item() == Approx(a * a / 3).epsilon(0.05)));
}

TEST_CASE("nn: SGD with momentum and weight decay matches the update rule", "[lab2][nn]") {
  nn::Parameter p = nn::parameter(Tensor::scalar(1.0, DType::Float64));
  nn::SGD opt({p}, 0.1, 0.9, 0.01);
  MLS_ORACLE(double pv = 1.0, v = 0.0;)  // the update rule by hand: the oracle
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    (p * p).backward();  // grad 2p
    opt.step();
    autodiff_test::observe_var("p", p);
    MLS_ORACLE(const double g = 2 * pv + 0.01 * pv; v = i == 0 ? g : 0.9 * v + g; pv -= 0.1 * v;)
    MLS_ORACLE_CHECK(CHECK(p.value().item() == Approx(pv)));
  }
}

TEST_CASE("nn: Adam and AdamW match the update rule", "[lab2][nn]") {
  for (bool decoupled : {false, true}) {
    nn::Parameter p = nn::parameter(Tensor::scalar(2.0, DType::Float64));
    std::unique_ptr<nn::Optimizer> opt;
    if (decoupled) opt = std::make_unique<nn::AdamW>(std::vector<Var>{p}, 0.1, 0.9, 0.999, 1e-8, 0.1);
    else opt = std::make_unique<nn::Adam>(std::vector<Var>{p}, 0.1, 0.9, 0.999, 1e-8, 0.1);
    MLS_ORACLE(double pv = 2.0, m = 0, v = 0;)  // the update rule by hand: the oracle
    for (int t = 1; t <= 3; ++t) {
      opt->zero_grad();
      (p * p * p).backward();  // grad 3p^2
      opt->step();
      INFO("decoupled " << decoupled << " t " << t);
      autodiff_test::observe_var("p", p);
      MLS_ORACLE(double g = 3 * pv * pv; if (!decoupled) g += 0.1 * pv; m = 0.9 * m + 0.1 * g;
                 v = 0.999 * v + 0.001 * g * g; if (decoupled) pv *= 1 - 0.1 * 0.1;
                 pv -= 0.1 * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);)
      MLS_ORACLE_CHECK(CHECK(p.value().item() == Approx(pv)));
    }
  }
}

TEST_CASE("nn: an MLP learns Gaussian blobs", "[lab2][nn]") {
  Rng rng(3, "blobs");
  const data::Dataset d = data::blobs(60, 3, 2, 0.8, rng);
  auto net = nn::mlp({2, 16, 3}, rng);
  nn::Adam opt(net->parameters(), 0.05);
  double first = 0, last = 0;
  for (int e = 0; e < 30; ++e) {
    last = nn::train_epoch(*net, opt, d.x, d.labels, 32, rng);
    if (e == 0) first = last;
  }
  CHECK(last < first);
  NoGradGuard ng;
  const double accuracy = nn::accuracy((*net)(Var(d.x)).value(), d.labels);
  MLS_OBSERVE(accuracy, {0.0, 0.05});  // each build in [0.95, 1]
  MLS_ORACLE_CHECK(CHECK(accuracy >= 0.95));
}

TEST_CASE("data: IDX files round-trip and load as MNIST, then feed a training step", "[lab2][nn]") {
  const mls::testing::TempDir tmp("idx");
  const auto& dir = tmp.path;
  // 3 images of 2x2 and their labels, as the MNIST files name them.
  const Tensor images = Tensor::from({0, 255, 128, 1, 2, 3, 4, 5, 250, 251, 252, 253}, {3, 2, 2});
  const Tensor labels = Tensor::from({7, 0, 9}, {3});
  data::write_idx((dir / "train-images-idx3-ubyte").string(), images);
  data::write_idx((dir / "train-labels-idx1-ubyte").string(), labels);
  const Tensor read = data::read_idx((dir / "train-images-idx3-ubyte").string());
  mls::testing::observe_values("read_idx", read);
  MLS_ORACLE_CHECK(CHECK(equal(read, images)));  // the images written: the oracle
  const data::Dataset d = data::load_mnist(dir.string());
  mls::testing::observe_values("x", d.x, autodiff_test::kApprox);
  mls::testing::observe_values("labels", d.labels);
  MLS_ORACLE_CHECK(CHECK(d.x.shape() == Shape{3, 4}); CHECK(d.x.at({0, 1}) == Approx(1.0));
                   CHECK(d.x.at({0, 2}) == Approx(128.0 / 255));
                   CHECK(d.labels.to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 0, 9}));
  Rng rng(1, "idx");
  nn::Linear lin(4, 10, rng);
  const Var loss = softmax_cross_entropy(lin(Var(d.x)), Var(d.labels));
  loss.backward();
  autodiff_test::observe_var("loss", loss);
  MLS_CHECK_EQ(lin.weight.grad().value().shape(), (Shape{4, 10}));
  CHECK(std::isfinite(loss.value().item()));
}

TEST_CASE("nn errors: bad layer input, bad optimizer settings, bad IDX files", "[lab2][errors]") {
  Rng rng(1, "e");
  nn::Linear lin(4, 2, rng);
  sum(lin(Var(Tensor::ones({1, 4})))).backward();
  REQUIRE(lin.weight.grad().defined());
  autodiff_test::observe_var("weight.grad", lin.weight.grad());  // ones: independent of the init
  require_error([&] { (void)lin(Var(Tensor::ones({3, 5}))); }, "Linear(4, 2): input has shape [3, 5], expected [..., 4]");
  require_error([&] { nn::SGD({lin.weight}, -1.0); }, "SGD: need lr > 0");
  require_error([&] { nn::Adam({lin.weight}, 0.1, 1.0); }, "Adam: need");
  require_error([&] { nn::Activation("swish"); }, "unknown kind 'swish'");
  const std::string path = mls::testing::temp_path("bad.idx");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const unsigned char bad[] = {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 9, 1, 2};
    std::fwrite(bad, 1, sizeof bad, f);
    std::fclose(f);
  }
  require_error([&] { (void)data::read_idx(path); }, "bad magic number");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const unsigned char shortfile[] = {0, 0, 0x08, 0x01, 0, 0, 0, 9, 1, 2};
    std::fwrite(shortfile, 1, sizeof shortfile, f);
    std::fclose(f);
  }
  require_error([&] { (void)data::read_idx(path); }, "truncated");
  require_error([&] { (void)data::read_idx("/nonexistent/mnist"); }, "cannot open /nonexistent/mnist");
  std::remove(path.c_str());
}
