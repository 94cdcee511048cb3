// mls-train-mlp: trains an MLP on a seeded two-spirals or blobs dataset (or MNIST with --data)
// with the eager tape, a progress bar and a final loss/accuracy line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "mls/autodiff/data.hpp"
#include "mls/autodiff/nn.hpp"
#include "mls/common/progress.hpp"
#include "mls/common/timer.hpp"

using namespace mls;
using namespace mls::autodiff;

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP with lab 2's eager autodiff."};
  std::string dataset = "spirals", data_dir;
  int epochs = 0, hidden = 64, seed = 0;
  double lr = 0.01;
  std::int64_t batch = 64;
  app.add_option("--dataset", dataset, "spirals | blobs (ignored with --data)")->capture_default_str();
  app.add_option("--data", data_dir, "folder with MNIST IDX files (train-images-idx3-ubyte, ...)");
  app.add_option("--epochs", epochs, "epochs (default: 300 spirals, 20 blobs, 3 MNIST)");
  app.add_option("--hidden", hidden, "hidden width")->capture_default_str();
  app.add_option("--lr", lr, "Adam learning rate")->capture_default_str();
  app.add_option("--batch", batch, "minibatch size")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    Rng rng(static_cast<std::uint64_t>(seed), "train-mlp");
    data::Dataset train, test;
    if (!data_dir.empty()) {
      train = data::load_mnist(data_dir, true);
      test = data::load_mnist(data_dir, false);
      if (!epochs) epochs = 3;
    } else if (dataset == "spirals") {
      train = data::two_spirals(500, 0.05, rng);
      Rng held_out(static_cast<std::uint64_t>(seed), "train-mlp-test");
      test = data::two_spirals(500, 0.05, held_out);
      if (!epochs) epochs = 300;
    } else if (dataset == "blobs") {
      train = data::blobs(300, 4, 2, 0.7, rng);
      Rng held_out(static_cast<std::uint64_t>(seed), "train-mlp-test");
      test = data::blobs(300, 4, 2, 0.7, held_out);
      if (!epochs) epochs = 20;
    } else {
      std::cerr << "mls-train-mlp: unknown dataset '" << dataset << "' (spirals or blobs)\n";
      return 2;
    }
    const std::int64_t in = train.x.shape()[1];
    auto net = nn::mlp({in, hidden, hidden, train.classes}, rng);
    nn::Adam opt(net->parameters(), lr);
    std::cout << net->name() << " on " << train.x.shape()[0] << " examples, " << epochs << " epochs\n";
    ProgressBar bar(epochs, "train");
    Timer timer;
    double loss = 0;
    for (int e = 0; e < epochs; ++e) {
      loss = nn::train_epoch(*net, opt, train.x, train.labels, batch, rng);
      char status[64];
      std::snprintf(status, sizeof status, "loss %.4f", loss);
      bar.update(e + 1, status);
    }
    bar.finish();
    NoGradGuard ng;
    const double acc = nn::accuracy((*net)(Var(test.x)).value(), test.labels);
    std::printf("final loss %.4f accuracy %.2f%% (%s, %.2f s)\n", loss, 100 * acc,
                "held-out test set", timer.seconds());
  } catch (const mls::Error& e) {
    std::cerr << "mls-train-mlp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
