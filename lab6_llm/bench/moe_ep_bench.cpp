// mls-moe-ep-bench: one MoE MLP's forward + backward under expert parallelism (EpMoe, lab 6)
// against the single-rank fused MoE on the same tokens, and the share of the EP step spent in the
// dispatch / combine exchanges (lab 5's all_to_allv).
//
//   mls-moe-ep-bench --ranks 2                                   (simulated ranks: threads)
//   lab5_parallel/tests/run_mpi.sh 2 build/release/bin/mls-moe-ep-bench --backend mpi
//
// Prints lines "ratio <name> <value>" (<backend> sim or mpi, <P> the ranks):
//   moe_ep_step_vs_single_<backend>_<P>      one MoE MLP: seconds per EP forward + backward (slowest
//                                            rank) / the single rank's
//   moe_ep_exchange_share_<backend>_<P>      ... seconds in the exchanges / seconds per EP step
//   gpt_ep_step_vs_single_<backend>_<P>      the whole GPT training step of `mls-gpt train --ep`
//                                            (run_ep: --layers MoE blocks, attention, the dense
//                                            allreduce, AdamW; the slowest rank's mean step) / one
//                                            rank's step over the union batch
//   gpt_ep_exchange_share_<backend>_<P>      ... seconds in the all_to_allv exchanges / seconds per step
// (--part mlp or gpt: one pair only). Each EP rank holds its own experts only (sharded()). The
// single rank runs every token (P × --tokens) with the whole thread pool; each EP rank runs its
// --tokens. The figures are only meaningful on a quiet machine.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/timer.hpp"
#include "mls/llm/moe_ep.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::llm;
using mls::parallel::Communicator;

namespace {

struct Opts {
  std::string backend = "sim";
  int ranks = 2;
  std::int64_t tokens = 512, experts = 8, top_k = 2, embd = 128;
  double capacity_factor = 1.25;
  int reps = 5;
  std::int64_t layers = 2;     // --part gpt: transformer blocks (every one MoE)
  std::string part = "both";  // mlp | gpt | both
};

GPTConfig bench_config(const Opts& o) {
  GPTConfig c;
  c.n_layer = 1, c.n_head = 4, c.n_embd = o.embd, c.block_size = 64, c.vocab_size = 64;
  c.moe_experts = o.experts, c.moe_top_k = o.top_k, c.moe_every = 1, c.capacity_factor = o.capacity_factor;
  c.validate();
  return c;
}

/// Seconds per forward + backward of the single-rank MoE MLP on `Ntot` tokens (best of reps).
double single_seconds(const GPTConfig& cfg, std::int64_t Ntot, int reps) {
  const std::int64_t T = 64, B = Ntot / T, C = cfg.n_embd;
  GPTParams params = init_params(cfg, 1);
  GPTGrads grads(cfg);
  GPTActivations a(cfg, B, T), da(cfg, B, T);
  Rng rng(2, "moe-ep-bench");
  for (std::int64_t i = 0; i < Ntot * C; ++i) a.residual2[i] = static_cast<float>(rng.normal(0.0, 1.0));
  std::vector<float> dres(static_cast<std::size_t>(Ntot * C), 0.01f);
  const ParamPtrs p = shift_layers(param_views(params.data(), cfg), cfg, 0);
  ParamPtrs g = shift_layers(grads.views(), cfg, 0);
  double best = 1e300;
  for (int r = 0; r <= reps; ++r) {
    Timer t;
    moe_mlp_forward(cfg, p, a, 0);
    moe_mlp_backward(cfg, p, g, a, da, 0, dres.data());
    if (r > 0) best = std::min(best, t.seconds());  // the first is a warm-up
  }
  return best;
}

/// (seconds per EP step, seconds in exchanges) on this rank's `tokens`, the slowest rank's. This
/// rank allocates its own experts only (the sharded config's layout).
std::pair<double, double> ep_seconds(const GPTConfig& whole, Communicator& comm, std::int64_t tokens, int reps) {
  const std::int64_t C = whole.n_embd;
  const GPTConfig cfg = comm.size() > 1 ? sharded(whole, comm.size(), comm.rank()) : whole;
  GPTParams params = init_params(cfg, 1);
  GPTGrads grads(cfg);
  EpMoe ep(cfg, comm, tokens);
  const ParamPtrs p = shift_layers(param_views(params.data(), cfg), cfg, 0);
  ParamPtrs g = shift_layers(grads.views(), cfg, 0);
  Rng rng(3 + static_cast<std::uint64_t>(comm.rank()), "moe-ep-bench");
  std::vector<float> x(static_cast<std::size_t>(tokens * C)), out(x.size()), dx(x.size()), dout(x.size(), 0.01f);
  for (auto& v : x) v = static_cast<float>(rng.normal(0.0, 1.0));
  double best = 1e300, best_ex = 0;
  for (int r = 0; r <= reps; ++r) {
    comm.barrier();
    Timer t;
    ep.forward(p, x.data(), out.data());
    const double ex_fwd = ep.exchange_seconds;
    ep.backward(p, g, dout.data(), dx.data());
    Tensor s = Tensor::from_vector(std::vector<double>{t.seconds(), ex_fwd + ep.exchange_seconds});
    comm.allreduce(s, parallel::ReduceOp::Max);
    if (r > 0 && s.data<double>()[0] < best) best = s.data<double>()[0], best_ex = s.data<double>()[1];
  }
  return {best, best_ex};
}

/// The GPT training run of `mls-gpt train --ep` on this rank's tokens (rows of 64).
EpRunOptions gpt_options(const Opts& o) {
  EpRunOptions r;
  r.cfg = bench_config(o);
  r.cfg.n_layer = o.layers;
  r.cfg.validate();
  r.context = 64;
  r.batch = o.tokens / 64;
  r.steps = o.reps + 1;
  return r;
}

/// Mean seconds per step after the first, and in the exchanges, the slowest rank's.
std::pair<double, double> gpt_seconds(Communicator& comm, const EpRunOptions& opts) {
  const EpRunReport r = run_ep(comm, opts);
  double step = 0, ex = 0;
  for (std::size_t i = 1; i < r.step_s.size(); ++i) step += r.step_s[i], ex += r.exchange_s[i];
  const double n = static_cast<double>(r.step_s.size() - 1);
  Tensor s = Tensor::from_vector(std::vector<double>{step / n, ex / n});
  comm.allreduce(s, parallel::ReduceOp::Max);
  return {s.data<double>()[0], s.data<double>()[1]};
}

void report_gpt(const Opts& o, int P, double single, double ep, double ex) {
  std::printf("GPT training step (%lld MoE blocks, %lld experts top-%lld, C %lld): one rank %lld tokens %.3f ms; "
              "EP on %d %s ranks x %lld tokens %.3f ms (all_to_allv exchanges %.3f ms, %.1f%%)\n",
              (long long)o.layers, (long long)o.experts, (long long)o.top_k, (long long)o.embd,
              (long long)(o.tokens * P), single * 1e3, P, o.backend.c_str(), (long long)o.tokens, ep * 1e3, ex * 1e3,
              100.0 * ex / ep);
  std::printf("ratio gpt_ep_step_vs_single_%s_%d %.4f\n", o.backend.c_str(), P, ep / single);
  std::printf("ratio gpt_ep_exchange_share_%s_%d %.4f\n", o.backend.c_str(), P, ex / ep);
  std::fflush(stdout);
}

void report(const Opts& o, int P, double single, double ep, double ex) {
  std::printf("MoE MLP forward + backward, %lld experts top-%lld, C %lld, capacity factor %g: single rank %lld tokens "
              "%.3f ms; EP on %d %s ranks x %lld tokens %.3f ms (exchanges %.3f ms, %.1f%%)\n",
              (long long)o.experts, (long long)o.top_k, (long long)o.embd, o.capacity_factor,
              (long long)(o.tokens * P), single * 1e3, P, o.backend.c_str(), (long long)o.tokens, ep * 1e3, ex * 1e3,
              100.0 * ex / ep);
  std::printf("ratio moe_ep_step_vs_single_%s_%d %.4f\n", o.backend.c_str(), P, ep / single);
  std::printf("ratio moe_ep_exchange_share_%s_%d %.4f\n", o.backend.c_str(), P, ex / ep);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-moe-ep-bench: expert parallelism of one MoE MLP vs the single-rank MoE"};
  Opts o;
  app.add_option("--backend", o.backend, "sim | mpi (under mpirun)")->capture_default_str()->check(CLI::IsMember({"sim", "mpi"}));
  app.add_option("--ranks", o.ranks, "simulated ranks (sim)")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--tokens", o.tokens, "tokens per rank (a multiple of 64)")->capture_default_str()->check(CLI::Range(64, 1 << 20));
  app.add_option("--experts", o.experts, "experts E (divisible by the ranks)")->capture_default_str();
  app.add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  app.add_option("--embd", o.embd, "width C")->capture_default_str()->check(CLI::Range(4, 4096));
  app.add_option("--capacity-factor", o.capacity_factor, "capacity factor F")->capture_default_str();
  app.add_option("--reps", o.reps, "timed repetitions (mlp: best of; gpt: steps after a warm-up, mean)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--part", o.part, "mlp (one MoE MLP) | gpt (the whole training step) | both")
      ->capture_default_str()->check(CLI::IsMember({"mlp", "gpt", "both"}));
  app.add_option("--layers", o.layers, "--part gpt: transformer blocks, every one MoE")
      ->capture_default_str()->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  try {
    MLS_CHECK(o.tokens % 64 == 0, "mls-moe-ep-bench: --tokens ", o.tokens, " is not a multiple of 64");
    const GPTConfig cfg = bench_config(o);
    const bool mlp = o.part != "gpt", gpt = o.part != "mlp";
    const EpRunOptions go = gpt_options(o);
    EpRunOptions gone = go;  // one rank over the union batch
    if (o.backend == "sim") {
      MLS_CHECK(o.experts % o.ranks == 0, "--experts ", o.experts, " is not divisible by --ranks ",
                o.ranks);
      gone.batch = go.batch * o.ranks;
      if (mlp) {
        const double single = single_seconds(cfg, o.tokens * o.ranks, o.reps);
        std::pair<double, double> ep{};
        parallel::run_simulated(o.ranks, [&](Communicator& c) {
          const auto r = ep_seconds(cfg, c, o.tokens, o.reps);
          if (c.rank() == 0) ep = r;
        });
        report(o, o.ranks, single, ep.first, ep.second);
      }
      if (gpt) {
        std::pair<double, double> one{}, ep{};
        parallel::run_simulated(1, [&](Communicator& c) { one = gpt_seconds(c, gone); });
        parallel::run_simulated(o.ranks, [&](Communicator& c) {
          const auto r = gpt_seconds(c, go);
          if (c.rank() == 0) ep = r;
        });
        report_gpt(o, o.ranks, one.first, ep.first, ep.second);
      }
      return 0;
    }
#ifdef MLS_HAVE_MPI
    return parallel::mpi_run([&](Communicator& c) {
      MLS_CHECK(o.experts % c.size() == 0, "--experts ", o.experts, " is not divisible by the ",
                c.size(), " MPI processes");
      if (mlp) {
        const double single = c.rank() == 0 ? single_seconds(cfg, o.tokens * c.size(), o.reps) : 0.0;
        const auto ep = ep_seconds(cfg, c, o.tokens, o.reps);
        if (c.rank() == 0) report(o, c.size(), single, ep.first, ep.second);
      }
      if (gpt) {
        gone.batch = go.batch * c.size();
        std::pair<double, double> one{};
        if (c.rank() == 0) {
          Communicator self = c.split(0, 0);
          one = gpt_seconds(self, gone);
        } else {
          (void)c.split(1, 0);
        }
        const auto ep = gpt_seconds(c, go);
        if (c.rank() == 0) report_gpt(o, c.size(), one.first, ep.first, ep.second);
      }
    });
#else
    fail("mls-moe-ep-bench: --backend mpi, but this build has no MPI (libopenmpi-dev)");
#endif
  } catch (const Error& e) {
    std::fprintf(stderr, "mls-moe-ep-bench: %s\n", e.what());
    return 1;
  }
}
