// mls-mlp-step: times one eager training step of a 784-256-256-10 MLP (batch 128, float32,
// SGD): forward, softmax cross-entropy, backward, update. bench/compare_torch.py runs it.
//   mls-mlp-step [--threads N] [--steps S]   prints "mlp_step ... best_ms <ms>"
//   mls-mlp-step --serve                     reads "step <k>" lines, answers with the k step
//                                            times in seconds on one line (the script
//                                            interleaves them with PyTorch's steps)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "mls/autodiff/nn.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"

using namespace mls;
using namespace mls::autodiff;

int main(int argc, char** argv) {
  CLI::App app{"Time an eager MLP training step (784-256-256-10, batch 128, SGD)."};
  int threads = 1, steps = 50, warmup = 5;
  std::int64_t batch = 128;
  bool serve = false;
  app.add_option("--threads", threads, "threads")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--batch", batch, "batch size")->capture_default_str();
  app.add_flag("--serve", serve, "answer 'step <k>' lines on stdin with k step times (seconds)");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  Rng rng(0, "mlp-step");
  auto net = nn::mlp({784, 256, 256, 10}, rng);
  nn::SGD opt(net->parameters(), 0.01);
  const Tensor x = Tensor::randn({batch, 784}, rng);
  Tensor y = Tensor::empty({batch}, DType::Int64);
  for (std::int64_t i = 0; i < batch; ++i) y.set({i}, static_cast<double>(rng.randint(0, 10)));
  auto step = [&] {
    opt.zero_grad();
    const Var loss = softmax_cross_entropy((*net)(Var(x)), Var(y));
    loss.backward();
    opt.step();
    return loss.value().item();
  };
  for (int i = 0; i < warmup; ++i) step();
  if (serve) {
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string cmd;
      int k = 1;
      in >> cmd >> k;
      if (cmd != "step") {
        std::cerr << "mls-mlp-step: unknown command '" << cmd << "' (step <k>)\n";
        return 2;
      }
      std::ostringstream times;
      for (int r = 0; r < k; ++r) {
        Timer t;
        step();
        times << (r ? " " : "") << t.seconds();
      }
      std::cout << times.str() << std::endl;
    }
    return 0;
  }
  double best = 1e300;
  for (int i = 0; i < steps; ++i) {
    Timer t;
    step();
    best = std::min(best, t.seconds());
  }
  std::printf("mlp_step threads=%d batch=%ld best_ms %.4f\n", threads, static_cast<long>(batch), best * 1e3);
  return 0;
}
