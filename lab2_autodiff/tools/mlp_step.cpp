// mls-mlp-step: times one eager training step of a 784-256-256-10 MLP (batch 128, float32,
// SGD): forward, softmax cross-entropy, backward, update. bench/compare_torch.py runs it.
//   mls-mlp-step [--threads N] [--steps S]   prints "mlp_step ... best_ms <ms>"
//   mls-mlp-step --serve                     reads "step <k>" lines, answers with the k step
//                                            times in seconds on one line (the script
//                                            interleaves them with PyTorch's steps)
//   --matmul NAME                            the SGEMM of every matmul: a registered kernel
//                                            (openblas, lab4_packed, ...), or auto (default)
//
// auto: where lab 4 is built, every tool has its kernels registered by name (common's kernel
// registry; this program does not depend on lab 4's code). On 1 thread lab 4's packed kernel
// beats OpenBLAS 0.3.21 by 4-7% on this step's large GEMMs (N = 256; measured GEMM by GEMM on a
// shared machine, 2026-11-24) and loses 2-3x where N = 10
// (its 32-wide micro-tile is mostly padding), so auto sends each GEMM to the faster one. On more
// threads the large GEMMs go to lab4_packed_mt, on common's pool: OpenBLAS's threads, once idle,
// may be woken onto their caller's vCPU by a VM kernel that packs threads (this machine's), and
// then its 2-thread step takes its 1-thread time in about one run of three (1.87 ms or 1.00 ms;
// lab4_packed_mt 0.94-0.95 ms, 2026-11-24). Without lab 4, or with MLS_MATMUL set, auto is the
// registry's default (OpenBLAS).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "mls/autodiff/nn.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/timer.hpp"

using namespace mls;
using namespace mls::autodiff;

namespace {

SgemmFn g_small = nullptr;  // OpenBLAS: outputs with fewer than kWideN rows or columns
SgemmFn g_wide = nullptr;   // lab 4's packed kernel: the rest
/// Smaller outputs go to OpenBLAS (lab 4's AVX-512 micro-tile is 12 x 32: mostly padding there).
constexpr long kWideN = 32;

void sgemm_auto(bool ta, bool tb, long M, long N, long K, float alpha, const float* A, long lda, const float* B,
                long ldb, float beta, float* C, long ldc) {
  (N >= kWideN && M >= kWideN ? g_wide : g_small)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/// Sets up the SGEMM `name` asks for; returns the name of the kernel in use.
std::string choose_matmul(const std::string& name, int threads) {
  register_matmul_kernels();
  if (name != "auto") {
    set_sgemm_kernel(name);
    return sgemm_kernel().name;  // throws, listing the registered names, for an unknown one
  }
  const char* env = std::getenv("MLS_MATMUL");
  if (!(env && *env)) {
    const std::string wide = threads == 1 ? "lab4_packed" : "lab4_packed_mt";
    for (const SgemmKernel& k : sgemm_kernels()) {
      if (k.name == "openblas") g_small = k.fn;
      if (k.name == wide) g_wide = k.fn;
    }
    if (g_small && g_wide) {
      register_sgemm({"mlp_auto", &sgemm_auto, -1000, wide + " where N, M >= 32, openblas otherwise"});
      set_sgemm_kernel("mlp_auto");
      return "auto(" + wide + ",openblas)";
    }
  }
  return sgemm_kernel().name;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time an eager MLP training step (784-256-256-10, batch 128, SGD)."};
  int threads = 1, steps = 50, warmup = 5;
  std::int64_t batch = 128;
  bool serve = false;
  std::string matmul = "auto";
  app.add_option("--threads", threads, "threads (>= 1)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--batch", batch, "batch size")->capture_default_str();
  app.add_option("--matmul", matmul, "SGEMM kernel: a registered name, or auto (see the source)")->capture_default_str();
  app.add_flag("--serve", serve, "answer 'step <k>' lines on stdin with k step times (seconds)");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  std::string kernel;
  try {
    kernel = choose_matmul(matmul, threads);
  } catch (const Error& e) {
    std::cerr << "mls-mlp-step: " << e.what() << "\n";
    return 2;
  }
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
    std::cerr << "# mls-mlp-step: " << threads << " thread(s), sgemm " << kernel << "\n";
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
  std::printf("mlp_step threads=%d batch=%ld sgemm=%s best_ms %.4f\n", threads, static_cast<long>(batch), kernel.c_str(),
              best * 1e3);
  return 0;
}
