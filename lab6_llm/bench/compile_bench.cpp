// mls-compile-bench: lab 3's compile() on lab 6's autodiff GPT training step (path (a): the GPT
// written on lab 2's eager Vars, autodiff_model.hpp) against the same step in eager mode
// (issue 29).
//
//   mls-compile-bench                          (config nano, vocab 65, batch 8, T = block size, 1 thread)
//   mls-compile-bench --config small --batch 4 --threads 2
//   mls-compile-bench --check-only             (the equality check alone: what its CTest runs)
//
// A step: zero the gradients, the loss (gpt_loss on Vars: ids, targets, mask and the loss scale
// are inputs, the 16 parameters captured leaves), backward, an SGD update of the leaves. Eager
// runs it on lab 2's tape; compiled, the traced forward + backward graph after lab 3's passes and
// memory planning. First the check: on three batches (after the first step, the compiled version
// is a cache hit), the compiled loss and every parameter gradient equal eager's within
// float32 tolerance: |loss_c - loss_e| <= 1e-5 |loss_e|, and per tensor
// max|g_c - g_e| <= 1e-4 max|g_e| (the passes reorder and fuse float32 arithmetic, so the bits
// differ); it exits 1 otherwise. Then the two steps are timed in alternating batches
// (mls/common/interleaved_timing.hpp) and it prints
//   ratio compile_vs_eager_gpt_step_t<threads> <compiled time / eager time>   (goal <= 0.7 at 1 thread)
//   compile_ms gpt_step <ms>   eager_step_ms <ms>   amortised_ratio_100_steps <v>
// The figures are only meaningful on a quiet machine. MLS_BENCH_REPEAT sets the rounds.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mls/autodiff/nn.hpp"
#include "mls/common/error.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/timer.hpp"
#include "mls/graph_opt/compile.hpp"
#include "mls/llm/autodiff_model.hpp"
#include "mls/llm/config.hpp"
#include "mls/llm/model.hpp"

using namespace mls;
using mls::autodiff::Var;

namespace {

/// One batch as the Vars gpt_loss takes: ids, targets, mask, scale.
std::vector<Var> batch_vars(const llm::GPTConfig& cfg, std::int64_t B, std::int64_t T, Rng& rng) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T)), tg(ids.size());
  std::vector<float> mask(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = rng.randint(0, cfg.vocab_size);
    tg[i] = rng.randint(0, cfg.vocab_size);
    mask[i] = rng.uniform_double() < 0.9 ? 1.0f : 0.0f;  // a few positions masked out
  }
  const Tensor m = Tensor::from_vector(mask, {B, T});
  return {Var(Tensor::from_vector(ids, {B, T})), Var(Tensor::from_vector(tg, {B, T})), Var(m),
          Var(llm::tape::loss_scale(m, DType::Float32))};
}

/// max|a - b| / max|b| over one tensor (0 when b is all zero and a equals it).
double rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to(DType::Float64).compact().to_vector<double>(), y = b.to(DType::Float64).compact().to_vector<double>();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-compile-bench: compile() vs eager on lab 6's autodiff GPT training step"};
  std::string config = "nano";
  std::int64_t batch = 8, context = 0, vocab = 65;
  int threads = 1;
  bool check_only = false;
  app.add_option("--config", config, "model size: nano or small")->capture_default_str();
  app.add_option("--batch", batch, "sequences per step (>= 1)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--context", context, "tokens per sequence (0: the block size)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("--vocab", vocab, "vocabulary size (>= 2)")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--threads", threads, "threads (>= 1)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_flag("--check-only", check_only, "only check that compiled and eager give the same loss and gradients");
  CLI11_PARSE(app, argc, argv);
  try {
    llm::GPTConfig cfg = llm::config_by_name(config);
    cfg.vocab_size = vocab;
    if (context == 0) context = cfg.block_size;
    MLS_CHECK(context <= cfg.block_size, "mls-compile-bench: --context ", context, " exceeds the block size ",
              cfg.block_size, " of config ", config);
    ThreadCountGuard guard(threads);
    const llm::GPTParams params = llm::init_params(cfg, 1);
    std::vector<Var> leaves = llm::tape::to_leaves(params);
    autodiff::nn::SGD opt(leaves, 1e-3);
    auto loss_of = [&](const std::vector<Var>& in) { return std::vector<Var>{llm::tape::gpt_loss(cfg, leaves, in[0], in[1], in[2], in[3])}; };
    graph_opt::CompiledFunction compiled(loss_of, {.name = "gpt_step"});
    auto step = [&](bool use_compiled, const std::vector<Var>& in, bool update) {
      opt.zero_grad();
      const Var loss = (use_compiled ? compiled(in) : loss_of(in)).at(0);
      loss.backward();
      if (update) opt.step();
      return loss.value().item();
    };

    // The check: three batches, the compiled version compiled once and then reused.
    Rng rng(29, "compile-bench");
    bool ok = true;
    for (int b = 0; b < 3; ++b) {
      const std::vector<Var> in = batch_vars(cfg, batch, context, rng);
      const double le = step(false, in, false);
      std::vector<Tensor> ge;
      for (const Var& l : leaves) ge.push_back(l.grad().value().clone());
      const double lc = step(true, in, false);
      const double dl = std::abs(lc - le) / std::max(std::abs(le), 1e-30);
      double worst = 0;
      std::size_t worst_i = 0;
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        const double d = rel_diff(leaves[i].grad().value(), ge[i]);
        if (d > worst) worst = d, worst_i = i;
      }
      std::printf("check batch %d: loss eager %.7f compiled %.7f (rel diff %.2e, tolerance 1e-5); gradients: max rel diff %.2e "
                  "(tensor %s; tolerance 1e-4)\n", b, le, lc, dl, worst, llm::param_names()[worst_i]);
      ok = ok && dl <= 1e-5 && worst <= 1e-4;
    }
    std::printf("compiled versions %zu, cache hits %d, compile %.1f ms\n", compiled.num_versions(), compiled.stats().cache_hits,
                compiled.stats().compile_ms);
    if (!ok) {
      std::fprintf(stderr, "mls-compile-bench: the compiled step differs from eager beyond the tolerance\n");
      return 1;
    }
    std::printf("check: compiled loss and gradients equal eager's within tolerance\n");
    if (check_only) return 0;

    const std::vector<Var> in = batch_vars(cfg, batch, context, rng);
    const double r = bench::interleaved_ratio([&] { (void)step(false, in, true); }, [&] { (void)step(true, in, true); });
    double eager_ms = 1e30;
    for (int i = 0; i < 10; ++i) eager_ms = std::min(eager_ms, 1e3 * bench::seconds_of([&] { (void)step(false, in, true); }));
    const double compile_ms = compiled.stats().compile_ms;
    std::printf("ratio compile_vs_eager_gpt_step_t%d %.3f\n", threads, r);
    std::printf("compile_ms gpt_step %.3f   eager_step_ms %.3f   amortised_ratio_100_steps %.3f\n", compile_ms, eager_ms,
                (compile_ms + 100 * r * eager_ms) / (100 * eager_ms));
    std::printf("(config %s, vocab %lld, batch %lld, context %lld, %d thread%s)\n", config.c_str(), static_cast<long long>(vocab),
                static_cast<long long>(batch), static_cast<long long>(context), threads, threads == 1 ? "" : "s");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mls-compile-bench: %s\n", e.what());
    return 2;
  }
}
