// mls-compile-bench: lab 3's compile() on lab 6's autodiff GPT training step (path (a): the GPT
// written on lab 2's eager Vars, autodiff_model.hpp) against the same step in eager mode
// (issue 29).
//
//   mls-compile-bench                          (config nano, vocab 65, batch 8, T = block size, 1 thread)
//   mls-compile-bench --config small --batch 4 --threads 2
//   mls-compile-bench --check-only             (the equality check alone: what its CTest runs)
//   mls-compile-bench --profile 20             (after the check: where the time goes, see below)
//   mls-compile-bench --clock cpu              (the steps timed on the process's CPU clock: a busy
//                                              machine; 1 thread)
//   mls-compile-bench --pre-grad-passes "" --passes simplify,cse,dce   (compile with other passes:
//                                              what each rewrite is worth; an unknown name is an error)
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
// --profile N: N compiled steps with per-node timing (PlannedExecutor::set_profiling): the
// compiled forward's and backward's time per op (compute, copies into buffers) and their slowest
// nodes, the traced joint graph before the passes (eager's ops) likewise, a table of both by op
// (eager's time minus the compiled programs': what compile removed, fused or added), then the thread's CPU
// time of an eager step, a compiled step, the compiled forward alone, the traced graph in lab 2's
// executor and eager's forward alone (CPU time: less disturbed by a busy machine than wall time).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstdio>
#include <ctime>
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

/// Per op: nodes and ms per run (compute + copies).
using OpTimes = std::map<std::string, std::array<double, 2>>;

/// Per-op time of a profiled executor's steps, summed over the runs, largest first; adds each
/// op's nodes and ms per run to *acc (when given).
void print_ops(const char* title, const graph_opt::PlannedExecutor& ex, int runs, OpTimes* acc = nullptr) {
  std::map<std::string, std::array<double, 3>> by_op;  // eval s, copy s, count
  const auto& s = ex.plan().schedule;
  double total = 0, copies = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const autodiff::Node& n = *s[i];
    if (n.is_leaf()) continue;
    std::string key = autodiff::op_name(n.op);
    if (n.op == graph_opt::kGemm)
      key += " ta" + std::to_string(n.attrs.i("trans_a")) + " tb" + std::to_string(n.attrs.i("trans_b")) +
             (n.inputs.size() == 3 ? " bias" : "") + " act" + std::to_string(n.attrs.i("act"));
    auto& e = by_op[key];
    e[0] += ex.step_seconds()[i];
    e[1] += ex.copy_seconds()[i];
    e[2] += 1;
    total += ex.step_seconds()[i];
    copies += ex.copy_seconds()[i];
  }
  if (acc)
    for (const auto& [k, e] : by_op) {
      (*acc)[k][0] += e[2];
      (*acc)[k][1] += 1e3 * (e[0] + e[1]) / runs;
    }
  std::vector<std::pair<std::string, std::array<double, 3>>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second[0] + a.second[1] > b.second[0] + b.second[1]; });
  std::printf("%s: %zu steps, compute %.3f ms, copies into buffers %.3f ms per run\n", title, s.size(), 1e3 * total / runs,
              1e3 * copies / runs);
  std::printf("  %-28s %6s %10s %10s\n", "op", "nodes", "ms/run", "copy ms");
  for (const auto& [k, e] : rows)
    std::printf("  %-28s %6.0f %10.3f %10.3f\n", k.c_str(), e[2], 1e3 * e[0] / runs, 1e3 * e[1] / runs);
  std::vector<std::size_t> idx(s.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return ex.step_seconds()[a] > ex.step_seconds()[b]; });
  std::printf("  slowest nodes:\n");
  for (std::size_t j = 0; j < std::min<std::size_t>(8, idx.size()); ++j) {
    const autodiff::Node& n = *s[idx[j]];
    std::string what = n.op == graph_opt::kFusedElementwise ? graph_opt::fused_expression(n) : n.attrs.str();
    if (what.size() > 150) what = what.substr(0, 150) + "...";
    std::string ins;
    for (const auto& i : n.inputs) ins += shape_str(i->shape) + " ";
    std::printf("    %.3f ms %s %s <- %s %s\n", 1e3 * ex.step_seconds()[idx[j]] / runs, autodiff::op_name(n.op),
                shape_str(n.shape).c_str(), ins.c_str(), what.c_str());
  }
}

/// --profile: the compiled version's forward and backward executors timed per node over `runs`
/// steps, and the traced joint graph (before the passes: the ops eager runs) in a planned executor.
template <class Step, class Fwd>
void print_profile(graph_opt::CompiledFunction& compiled, const std::vector<Var>& in, int runs, Step step,
                   Fwd compiled_fn_eager_forward) {
  const graph_opt::CompiledVersion& v = compiled.version(0);
  v.forward_exec->set_profiling(true);
  v.backward_exec->set_profiling(true);
  Timer t;
  for (int r = 0; r < runs; ++r) step(in, true);
  const double step_ms = t.millis() / runs;
  std::printf("profile over %d compiled steps: %.3f ms per step\n", runs, step_ms);
  OpTimes compiled_ops, eager_ops;
  print_ops("compiled forward", *v.forward_exec, runs, &compiled_ops);
  print_ops("compiled backward", *v.backward_exec, runs, &compiled_ops);
  v.forward_exec->set_profiling(false);
  v.backward_exec->set_profiling(false);
  // The traced graph: feeds are the call's inputs, the parameters, then the loss's adjoint (1).
  std::vector<Tensor> feeds;
  for (const Var& x : in) feeds.push_back(x.value());
  for (const graph_opt::Capture& c : v.captures)
    if (c.as_input) feeds.push_back(c.node->value);
  feeds.push_back(Tensor::ones(v.traced.inputs.back().shape(), v.traced.inputs.back().dtype()));
  graph_opt::PlannedExecutor traced(v.traced, graph_opt::plan_memory(v.traced));
  traced.set_profiling(true);
  for (int r = 0; r < runs; ++r) (void)traced.run(feeds);
  print_ops("traced joint graph before the passes (eager's ops)", traced, runs, &eager_ops);
  // What compile removed or added, op by op: eager's (the traced graph's) time minus the compiled
  // programs', largest saving first (negative: ops compile made, e.g. gemm, fused loops).
  std::vector<std::pair<std::string, std::array<double, 4>>> diff;
  for (const auto& [k, e] : eager_ops) diff.push_back({k, {e[0], e[1], 0, 0}});
  for (const auto& [k, c] : compiled_ops) {
    auto it = std::find_if(diff.begin(), diff.end(), [&](const auto& d) { return d.first == k; });
    if (it == diff.end()) diff.push_back({k, {0, 0, c[0], c[1]}});
    else it->second[2] = c[0], it->second[3] = c[1];
  }
  std::sort(diff.begin(), diff.end(), [](const auto& a, const auto& b) { return a.second[1] - a.second[3] > b.second[1] - b.second[3]; });
  std::printf("by op, eager's graph vs the compiled programs (ms per run; saved = eager - compiled):\n  %-28s %6s %9s %6s %9s %9s\n",
              "op", "eager", "ms", "comp.", "ms", "saved");
  for (const auto& [k, e] : diff)
    std::printf("  %-28s %6.0f %9.3f %6.0f %9.3f %9.3f\n", k.c_str(), e[0], e[1], e[2], e[3], e[1] - e[3]);
  // Where the time goes, in this thread's CPU time (less noisy than wall time on a shared
  // machine; 1 thread): the best of 5 rounds of 10 runs each.
  auto cpu_ms = [](auto&& f) {
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      for (int i = 0; i < 10; ++i) f();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      best = std::min(best, ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6) / 10);
    }
    return best;
  };
  std::vector<Tensor> ffeeds;
  for (const Var& x : in) ffeeds.push_back(x.value());
  for (const graph_opt::Capture& c : v.captures)
    if (c.as_input) ffeeds.push_back(c.node->value);
  std::printf("CPU ms: eager step %.3f, compiled step %.3f, compiled forward program alone %.3f, traced graph in lab 2's "
              "executor %.3f, eager forward alone %.3f\n",
              cpu_ms([&] { step(in, false); }), cpu_ms([&] { step(in, true); }),
              cpu_ms([&] { (void)v.forward_exec->run(ffeeds); }), cpu_ms([&] { (void)graph_opt::run(v.traced, feeds); }),
              cpu_ms([&] { (void)compiled_fn_eager_forward(in); }));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-compile-bench: compile() vs eager on lab 6's autodiff GPT training step"};
  std::string config = "nano";
  std::int64_t batch = 8, context = 0, vocab = 65;
  int threads = 1;
  bool check_only = false;
  int profile = 0;
  std::string clock_name = "wall";
  std::string pre_grad = graph_opt::compile_pre_grad_pipeline(), passes = graph_opt::compile_pipeline();
  app.add_option("--config", config, "model size: nano or small")->capture_default_str();
  app.add_option("--batch", batch, "sequences per step (>= 1)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--context", context, "tokens per sequence (0: the block size)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app.add_option("--vocab", vocab, "vocabulary size (>= 2)")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--threads", threads, "threads (>= 1)")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_flag("--check-only", check_only, "only check that compiled and eager give the same loss and gradients");
  app.add_option("--profile", profile, "after the check, run this many compiled steps with per-node timing and print "
                 "the time per op (forward, backward, and the traced graph before the passes as eager's proxy)")
      ->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--clock", clock_name, "wall, or cpu: the process's CPU time (a busy machine; needs --threads 1)")
      ->capture_default_str()->check(CLI::IsMember({"wall", "cpu"}));
  app.add_option("--pre-grad-passes", pre_grad, "compile's passes on the traced forward before the backward is built "
                 "(\"\" for none: lab 2's gradient rules)")->capture_default_str();
  app.add_option("--passes", passes, "compile's pass pipeline on the joint forward + backward graph")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    llm::GPTConfig cfg = llm::config_by_name(config);
    cfg.vocab_size = vocab;
    if (context == 0) context = cfg.block_size;
    MLS_CHECK(context <= cfg.block_size, "mls-compile-bench: --context ", context, " exceeds the block size ",
              cfg.block_size, " of config ", config);
    ThreadCountGuard guard(threads);
    MLS_CHECK(clock_name == "wall" || threads == 1, "mls-compile-bench: --clock cpu with ", threads,
              " threads: the process's CPU time adds up the threads' times; use --threads 1");
    if (clock_name == "cpu") bench::timing_clock() = bench::TimingClock::ProcessCpu;
    const llm::GPTParams params = llm::init_params(cfg, 1);
    std::vector<Var> leaves = llm::tape::to_leaves(params);
    autodiff::nn::SGD opt(leaves, 1e-3);
    auto loss_of = [&](const std::vector<Var>& in) { return std::vector<Var>{llm::tape::gpt_loss(cfg, leaves, in[0], in[1], in[2], in[3])}; };
    graph_opt::CompiledFunction compiled(loss_of, {.name = "gpt_step", .pre_grad_passes = pre_grad, .passes = passes});
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
    if (profile > 0) {
      print_profile(compiled, batch_vars(cfg, batch, context, rng), profile,
                    [&](const std::vector<Var>& in, bool c) { (void)step(c, in, false); }, loss_of);
      return 0;
    }

    const std::vector<Var> in = batch_vars(cfg, batch, context, rng);
    const double r = bench::interleaved_ratio([&] { (void)step(false, in, true); }, [&] { (void)step(true, in, true); });
    double eager_ms = 1e30;
    for (int i = 0; i < 10; ++i) eager_ms = std::min(eager_ms, 1e3 * bench::seconds_of([&] { (void)step(false, in, true); }));
    const double compile_ms = compiled.stats().compile_ms;
    std::printf("ratio compile_vs_eager_gpt_step_t%d %.3f\n", threads, r);
    std::printf("compile_ms gpt_step %.3f   eager_step_ms %.3f   amortised_ratio_100_steps %.3f\n", compile_ms, eager_ms,
                (compile_ms + 100 * r * eager_ms) / (100 * eager_ms));
    std::printf("(config %s, vocab %lld, batch %lld, context %lld, %d thread%s, %s clock)\n", config.c_str(),
                static_cast<long long>(vocab), static_cast<long long>(batch), static_cast<long long>(context), threads,
                threads == 1 ? "" : "s", clock_name == "cpu" ? "process CPU" : "wall");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mls-compile-bench: %s\n", e.what());
    return 2;
  }
}
