// mls-tune: searches the SGEMM schedule template's knobs for one shape and thread count (lab 4
// part 2, issue 28), records every measured schedule in the tuning database (the `tuned` kernel,
// MLS_MATMUL=tuned, reads it), and reports the best against the hand-written and OpenBLAS kernels;
// the same for the memory-bound operators' templates and a direct convolution (tune_ops.hpp).
//
//   build/release/bin/mls-tune sgemm --m 1024 --n 1024 --k 1024 --threads 2 --trials 200
//       --strategy guided [--seed S] [--budget-s T] [--svg curve.svg] [--db PATH]    (one line)
//       [--trans-a] [--trans-b] [--beta 0|1]      the problem's flags (C = op(A)·op(B), or += with beta 1)
//       [--no-seeds]     guided: do not measure lab4_packed's configuration and the database's best
//                        record of the shape right after the default (KnobSpace::packed_knobs)
//   build/release/bin/mls-tune sgemm --m 768 --n 128 --k 512 --trans-b --beta 1 --knobs packed
//       one schedule timed, no search: "packed" (lab4_packed's own configuration) or knobs as printed,
//       "mr=12 kc=384 ...", fields left out from the default; its loop nest and the two ratio lines
//   build/release/bin/mls-tune sgemm --transformer [--threads T] [--trials N]
//       the 12 GEMMs of lab 4's bench (sgemm_tf: a transformer layer's forward, dx and dW, beta 1), each
//       tuned with its flags and recorded, then one table (tuned, lab4_packed(_mt), OpenBLAS GFLOP/s and
//       the interleaved ratios) and the lines ratio tuned_vs_openblas_<op>_<m>x<n>x<k>_t<T> <x>,
//       ratio tuned_vs_packed_<op>_<m>x<n>x<k>_t<T> <x> (op: fwd, dx, dW)
//   build/release/bin/mls-tune sgemm --m 256 --n 256 --k 256 --trials 30 --strategy all --svg c.svg
//   build/release/bin/mls-tune nests [--n 1024]          the slide's three loop nests (slides 001)
//   build/release/bin/mls-tune steps --m 256 --n 256 --k 256 [--run] [--cpp S]
//       the SGEMM template built up one idea at a time (the handout's worked schedule): each step's
//       primitives and loop nest; --run compiles them (one unit), checks each against the first and
//       times the best of 3 runs of each against lab4_packed on the same (padded) problem; --cpp S
//       prints step S's generated C++
//
// Prints the best knobs, the lowered loop nest of the best (te::to_string), its GFLOP/s, and at the
// end, measured interleaved (mls/common/interleaved_timing.hpp), one line each:
//   ratio tuned_vs_packed_<m>x<n>x<k>_t<threads> <x>     (tuned / lab4_packed GFLOP/s: > 1 wins)
//   ratio tuned_vs_openblas_<m>x<n>x<k>_t<threads> <x>   (where OpenBLAS is found)
// (with "<op>_" before the shape where the problem has flags: nt_b1_768x384x128, ...).
// --strategy all runs grid, random and guided with the same budget; --svg draws best-so-far
// GFLOP/s against trial for each strategy run. --strategy compare runs random and guided with
// --seeds seeds each (seed, seed+1, ...) and prints, per strategy, the trials each run needed to
// reach 95% of the best GFLOP/s any run confirmed (timed again, TuneOptions::confirm) and their
// median (a run that never reached it counts as trials + 1), then
//   ratio guided_vs_random_trials_to_95pct_<m>x<n>x<k>_t<threads> <x>  (random's median / guided's:
//                                                                      the goal is >= 4)
// --svg then draws each strategy's pointwise median curve. Every candidate's first run is in a forked child
// (a crash or a hang is recorded and skipped) and its result is checked against lab4_packed.
//
//   build/release/bin/mls-tune softmax --rows 4096 --cols 1024 [same options as sgemm]
//   build/release/bin/mls-tune layernorm --rows 4096 --cols 1024 [--backward] [...]
//   build/release/bin/mls-tune fused --n 4194304 [...]                 E = D + (A + B) * C
//   build/release/bin/mls-tune conv2d --n 1 --c 64 --h 56 --w 56 --k 64 --kh 3 --stride 1 --pad 1 [...]
//   build/release/bin/mls-tune layernorm --backward --knobs "onepass=0 colfuse=0" --cpp
// (--knobs: measure those knobs, the others the default, instead of searching; --cpp: print the
// generated C++ of the kernel measured, to count its passes over memory and its exp evaluations)
// tune an operator template (the same search; candidates checked against the hand-written kernel
// of fused.hpp, conv2d against a direct loop) and print the best knobs, its loop nest, its GB/s and
//   ratio tuned_<op>_vs_copy_<shape>_t<threads> <x>    (tuned / a streamed copy of the same bytes)
//   ratio tuned_<op>_vs_fused_<shape>_t<threads> <x>   (tuned / the hand-written kernel; conv2d:
//                                                        tuned_conv2d_vs_direct_...)
// where <shape> is ROWSxCOLS, N, or n<N>_c<C>_h<H>_w<W>_k<K>_kh<KH>_s<S>_p<P>; --svg draws
// best-so-far GB/s against trial with the hand-written kernel's GB/s dashed.
#include <CLI/CLI.hpp>
#ifdef MLS_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/progress.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/kernels/transformer_gemms.hpp"
#include "mls/kernels/tune.hpp"
#include "mls/kernels/tune_ops.hpp"

namespace {

namespace tune = mls::kernels::tune;
namespace te = mls::kernels::te;

struct Args {
  long m = 1024, n = 1024, k = 1024;
  bool trans_a = false, trans_b = false;
  int beta = 0;
  tune::OpProblem op;  // the operator subcommands' problem
  int threads = 1, trials = 64;
  std::string strategy = "guided";
  std::uint64_t seed = 1;
  double budget_s = 0;
  int seeds = 5;
  std::string svg, db;
  std::string knobs;  // --knobs: measure these (or "packed": lab4_packed's own) instead of searching
  bool no_seeds = false;
  bool transformer = false;
  bool cpp = false;   // the operator subcommands' --cpp: print the generated C++ of the kernel measured
  tune::SgemmShape shape() const { return {m, n, k, trans_a, trans_b, beta}; }
};

/// The search's strategies of --strategy.
std::vector<tune::Strategy> strategies_of(const std::string& s) {
  if (s == "all") return {tune::Strategy::Grid, tune::Strategy::Random, tune::Strategy::Guided};
  return {tune::strategy_from_string(s)};
}

/// One strategy's run on `shape` with `seed`, with a progress bar.
tune::TuneResult run_strategy(const Args& a, const tune::SgemmShape& shape, tune::Strategy strategy,
                              std::uint64_t seed) {
  tune::TuneOptions o;
  o.strategy = strategy;
  o.trials = a.trials;
  o.budget_s = a.budget_s;
  o.seed = seed;
  o.threads = a.threads;
  o.db_path = a.db;
  o.seed_packed = !a.no_seeds;
  o.seed_db = !a.no_seeds && a.strategy != "compare";  // compared runs must not inherit each other's records
  mls::ProgressBar bar(a.trials, "tune " + tune::to_string(strategy) + (a.strategy == "compare" ? " seed " + std::to_string(seed) : ""));
  int refused = 0;
  o.on_trial = [&](const tune::Trial& t, const std::vector<double>& best) {
    if (t.status != tune::TrialStatus::Ok) ++refused;
    char status[96];
    std::snprintf(status, sizeof status, "best %.1f GFLOP/s, %d refused", best.back(), refused);
    bar.update(t.index + 1, status);
  };
  tune::TuneResult r = tune::Tuner(shape, o).run();
  char done[128];
  std::snprintf(done, sizeof done, "%zu trials in %.1f s, best %.1f GFLOP/s (lab4_packed %.1f)", r.trials.size(),
                r.wall_seconds, r.best_gflops, tune::sgemm_flops(shape) / r.anchor_seconds * 1e-9);
  bar.finish(done);
  for (const auto& t : r.trials)
    if (t.status != tune::TrialStatus::Ok)
      std::printf("  refused: %s: %s: %s\n", tune::to_string(t.knobs).c_str(), tune::to_string(t.status).c_str(),
                  t.message.c_str());
  for (const auto& t : r.confirmed)
    std::printf("  timed again: %s: %.1f GFLOP/s (%.1f in the search)\n", tune::to_string(t.knobs).c_str(), t.gflops,
                r.trials[static_cast<std::size_t>(t.index)].gflops);
  return r;
}

/// Compact operands of a problem in its layout (A K x M with trans_a, B N x K with trans_b), seeded,
/// and C (random: a beta-1 problem adds to it).
struct Problem {
  tune::SgemmShape s;
  std::vector<float> A, B, C;
  Problem(const tune::SgemmShape& shape, std::uint64_t seed)
      : s(shape), A(static_cast<std::size_t>(shape.m * shape.k)), B(static_cast<std::size_t>(shape.k * shape.n)),
        C(static_cast<std::size_t>(shape.m * shape.n)) {
    mls::Rng rng(seed, "mls_tune_ratio");
    for (auto* v : {&A, &B, &C})
      for (auto& x : *v) x = static_cast<float>(rng.uniform(-1, 1));
  }
  /// Runs lab4_packed (lab4_packed_mt at more than one thread) on it.
  void packed(int threads) {
    mls::kernels::sgemm(threads > 1 ? "lab4_packed_mt" : "lab4_packed", s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f,
                        A.data(), s.a_ld(), B.data(), s.b_ld(), static_cast<float>(s.beta), C.data(), s.n);
  }
#ifdef MLS_HAVE_OPENBLAS
  void openblas() {
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, A.data(),
                static_cast<int>(s.a_ld()), B.data(), static_cast<int>(s.b_ld()), static_cast<float>(s.beta), C.data(),
                static_cast<int>(s.n));
  }
#endif
};

/// Seconds per call of fn: the median of 5 batches of about 20 ms (after one warm-up call).
template <class F>
double seconds_per_call(F&& fn) {
  fn();
  const double once = mls::bench::seconds_of(fn);
  const int calls = static_cast<int>(std::clamp(20e-3 / std::max(once, 1e-9), 1.0, 100000.0));
  std::vector<double> t;
  for (int i = 0; i < 5; ++i)
    t.push_back(mls::bench::seconds_of([&] {
                  for (int c = 0; c < calls; ++c) fn();
                }) /
                calls);
  std::sort(t.begin(), t.end());
  return t[2];
}

/// What report() measured for one problem: GFLOP/s of each side, and the interleaved ratios
/// (the peer's time over the tuned kernel's: > 1, tuned is faster).
struct Measured {
  double tuned_gflops = 0, packed_gflops = 0, openblas_gflops = 0;
  double vs_packed = 0, vs_openblas = 0;  // 0: not measured
};

/// The compiled best schedule of a problem against lab4_packed(_mt) and OpenBLAS, each on the same
/// operands at `threads` threads.
Measured measure(const tune::SgemmShape& shape, const tune::SgemmKnobs& best, int threads, std::uint64_t seed) {
  const tune::CompiledSgemm g = tune::compile_sgemm(best, shape);
  Problem p(shape, seed);
  mls::ThreadCountGuard guard(threads);
  const double flops = tune::sgemm_flops(shape) * 1e-9;
  auto tuned = [&] { g.run(p.A.data(), p.B.data(), p.C.data(), 0); };
  auto packed = [&] { p.packed(threads); };
  Measured m;
  m.tuned_gflops = flops / seconds_per_call(tuned);
  m.packed_gflops = flops / seconds_per_call(packed);
  // time(peer) / time(tuned): the tuned kernel's speed relative to the peer's.
  m.vs_packed = mls::bench::interleaved_ratio(tuned, packed, 5, 20e-3);
#ifdef MLS_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  auto openblas = [&] { p.openblas(); };
  m.openblas_gflops = flops / seconds_per_call(openblas);
  m.vs_openblas = mls::bench::interleaved_ratio(tuned, openblas, 5, 20e-3, 30e-3);
#endif
  return m;
}

/// The ratio lines' name of a problem: "<m>x<n>x<k>_t<threads>", after "<op>_" where the problem has
/// transposes or beta 1 (op: "nt_b1", ...; `op` given: that name, e.g. "fwd").
std::string ratio_tag(const tune::SgemmShape& s, int threads, std::string op = "") {
  if (op.empty() && (s.trans_a || s.trans_b || s.beta))
    op = std::string(s.trans_a ? "t" : "n") + (s.trans_b ? "t" : "n") + (s.beta ? "_b1" : "");
  return (op.empty() ? "" : op + "_") + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
         "_t" + std::to_string(threads);
}

void print_ratios(const Measured& m, const std::string& tag) {
  std::printf("ratio tuned_vs_packed_%s %.4f\n", tag.c_str(), m.vs_packed);
#ifdef MLS_HAVE_OPENBLAS
  std::printf("ratio tuned_vs_openblas_%s %.4f\n", tag.c_str(), m.vs_openblas);
#else
  std::printf("(no OpenBLAS in this build: ratio tuned_vs_openblas_%s not measured)\n", tag.c_str());
#endif
}

/// `--strategy compare`: random and guided over `seeds` seeds each; trials to 95% of the best found.
int compare(const Args& a) {
  const tune::SgemmShape shape = a.shape();
  std::printf("mls-tune sgemm %s, %d thread%s: random and guided, %d trials each, seeds %llu..%llu\n",
              tune::to_string(shape).c_str(), a.threads, a.threads == 1 ? "" : "s", a.trials,
              static_cast<unsigned long long>(a.seed), static_cast<unsigned long long>(a.seed + a.seeds - 1));
  std::vector<std::pair<std::string, std::vector<std::vector<double>>>> runs;
  double anchor_gflops = 0, confirmed_best = 0;
  for (auto s : {tune::Strategy::Random, tune::Strategy::Guided}) {
    runs.push_back({tune::to_string(s), {}});
    for (int i = 0; i < a.seeds; ++i) {
      const tune::TuneResult r = run_strategy(a, shape, s, a.seed + static_cast<std::uint64_t>(i));
      anchor_gflops = tune::sgemm_flops(shape) / r.anchor_seconds * 1e-9;
      runs.back().second.push_back(r.best_so_far);
      confirmed_best = std::max(confirmed_best, r.best_gflops);
    }
  }
  const tune::StrategyComparison c = tune::compare_strategies(runs, 0.95, confirmed_best);
  std::printf("best found %.1f GFLOP/s (the best confirmed time of the %d runs); target (95%%) %.1f GFLOP/s;\n"
              "trials to reach it per seed (-: never):\n",
              c.best_gflops, 2 * a.seeds, c.target);
  for (const auto& row : c.rows) {
    std::printf("  %-7s", row.strategy.c_str());
    for (int t : row.trials_to_target) t > 0 ? std::printf(" %4d", t) : std::printf("    -");
    std::printf("   median %.1f%s\n", row.median, row.median > row.trials ? " (not within the budget)" : "");
  }
  std::printf("ratio guided_vs_random_trials_to_95pct_%s %.4f\n", ratio_tag(shape, a.threads).c_str(),
              c.rows[0].median / c.rows[1].median);
  if (!a.svg.empty()) {
    std::vector<tune::TuningCurve> curves;
    for (const auto& row : c.rows) curves.push_back({row.strategy + " (median of " + std::to_string(a.seeds) + ")", row.median_curve});
    const std::string title = "SGEMM " + tune::to_string(shape) + ", " + std::to_string(a.threads) + " thread" +
                              (a.threads == 1 ? "" : "s") + ": median best GFLOP/s so far over " +
                              std::to_string(a.seeds) + " seeds";
    mls::write_file_atomic(a.svg, tune::tuning_curve_svg(curves, anchor_gflops, "lab4_packed", title), "mls-tune");
    std::printf("wrote %s\n", a.svg.c_str());
  }
  return 0;
}

/// `--knobs`: one schedule measured, no search (nothing recorded).
int run_knobs(const Args& a) {
  const tune::SgemmShape shape = a.shape();
  const tune::KnobSpace space = tune::KnobSpace::sgemm(a.threads);
  tune::SgemmKnobs k;
  if (a.knobs == "packed") {
    const auto packed = space.packed_knobs(shape);
    MLS_CHECK(packed.has_value(), "mls-tune sgemm: --knobs packed: lab4_packed's configuration is not in the space");
    k = *packed;
  } else {
    k = tune::knobs_from_string(a.knobs, space.default_knobs());
  }
  std::printf("mls-tune sgemm %s, %d thread%s: %s\n", tune::to_string(shape).c_str(), a.threads,
              a.threads == 1 ? "" : "s", tune::to_string(k).c_str());
  const std::vector<tune::SgemmInstance> pieces = tune::instantiate_all(k, shape);
  std::printf("loop nest%s:\n%s\n",
              pieces.size() > 1 ? (" (its first piece of " + std::to_string(pieces.size()) + ")").c_str() : "",
              te::to_string(pieces.front().func).c_str());
  const Measured m = measure(shape, k, a.threads, a.seed);
  std::printf("%.1f GFLOP/s, lab4_packed%s %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s\n", m.tuned_gflops,
              a.threads > 1 ? "_mt" : "", m.packed_gflops, m.openblas_gflops);
  print_ratios(m, ratio_tag(shape, a.threads));
  return 0;
}

int run(const Args& a) {
  if (!a.knobs.empty()) return run_knobs(a);
  if (a.strategy == "compare") return compare(a);
  const std::vector<tune::Strategy> strategies = strategies_of(a.strategy);
  const tune::SgemmShape shape = a.shape();
  std::printf("mls-tune sgemm %s, %d thread%s, %d trials per strategy%s; database %s\n", tune::to_string(shape).c_str(),
              a.threads, a.threads == 1 ? "" : "s", a.trials,
              a.budget_s > 0 ? (", budget " + std::to_string(a.budget_s) + " s").c_str() : "",
              (a.db.empty() ? mls::kernels::default_tuning_db_path().string() : a.db).c_str());
  std::vector<tune::TuningCurve> curves;
  tune::TuneResult best;
  double anchor_gflops = 0;
  for (auto s : strategies) {
    tune::TuneResult r = run_strategy(a, shape, s, a.seed);
    anchor_gflops = tune::sgemm_flops(shape) / r.anchor_seconds * 1e-9;
    curves.push_back({tune::to_string(s), r.best_so_far});
    if (r.found && (!best.found || r.best_seconds < best.best_seconds)) best = r;
  }
  if (!a.svg.empty()) {
    const std::string title = "SGEMM " + tune::to_string(shape) + ", " + std::to_string(a.threads) + " thread" +
                              (a.threads == 1 ? "" : "s") + ": best GFLOP/s so far per trial";
    mls::write_file_atomic(a.svg, tune::tuning_curve_svg(curves, anchor_gflops, "lab4_packed", title), "mls-tune");
    std::printf("wrote %s\n", a.svg.c_str());
  }
  if (!best.found) {
    std::fprintf(stderr, "mls-tune: no candidate passed (every one was refused; see above)\n");
    return 1;
  }
  std::printf("best: %s\n%.1f GFLOP/s (%.3f ms)\n", tune::to_string(best.best).c_str(), best.best_gflops,
              best.best_seconds * 1e3);
  const std::vector<tune::SgemmInstance> pieces = tune::instantiate_all(best.best, shape);
  std::printf("loop nest of the best%s:\n%s\n",
              pieces.size() > 1 ? (" (its first piece of " + std::to_string(pieces.size()) + ": the edges are pieces of their own)").c_str() : "",
              te::to_string(pieces.front().func).c_str());
  print_ratios(measure(shape, best.best, a.threads, a.seed), ratio_tag(shape, a.threads));
  return 0;
}

/// `mls-tune sgemm --transformer`: the 12 GEMMs of lab 4's bench (mls/kernels/transformer_gemms.hpp)
/// tuned one after the other (guided, `trials` each, recorded), then one table and the ratio lines.
int run_transformer(const Args& a) {
  const auto gemms = mls::kernels::transformer_gemms();
  std::printf("mls-tune sgemm --transformer: the %zu GEMMs of a transformer layer (lab 6's small GPT), %d thread%s, "
              "%d trials each; database %s\n",
              gemms.size(), a.threads, a.threads == 1 ? "" : "s", a.trials,
              (a.db.empty() ? mls::kernels::default_tuning_db_path().string() : a.db).c_str());
  std::vector<Measured> rows;
  std::vector<tune::SgemmKnobs> bests;
  for (const auto& g : gemms) {
    const tune::SgemmShape shape{g.m, g.n, g.k, g.trans_a, g.trans_b, 1};
    std::printf("== %s (%s, %s)\n", g.key().c_str(), g.layer.c_str(), tune::to_string(shape).c_str());
    const tune::TuneResult r =
        run_strategy(a, shape, tune::strategy_from_string(a.strategy == "all" ? "guided" : a.strategy), a.seed);
    bests.push_back(r.found ? r.best : tune::KnobSpace::sgemm(a.threads).default_knobs());
    if (!r.found) std::printf("  no candidate passed: the default knobs are measured\n");
    rows.push_back(measure(shape, bests.back(), a.threads, a.seed));
  }
  const char* packed = a.threads > 1 ? "lab4_packed_mt" : "lab4_packed";
  std::printf("\n%-18s %-8s %10s %15s %10s %12s %14s  %s\n", "gemm", "layer", "tuned", packed, "OpenBLAS",
              "tuned/packed", "tuned/OpenBLAS", "best knobs");
  std::printf("%-18s %-8s %10s %15s %10s %12s %14s\n", "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "(interleaved)",
              "(interleaved)");
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    const Measured& m = rows[i];
    std::printf("%-18s %-8s %10.1f %15.1f %10.1f %12.3f %14.3f  %s\n", gemms[i].key().c_str(), gemms[i].layer.c_str(),
                m.tuned_gflops, m.packed_gflops, m.openblas_gflops, m.vs_packed, m.vs_openblas,
                tune::to_string(bests[i]).c_str());
  }
  for (std::size_t i = 0; i < gemms.size(); ++i) {
    const tune::SgemmShape s{gemms[i].m, gemms[i].n, gemms[i].k};
    print_ratios(rows[i], ratio_tag(s, a.threads, gemms[i].op));
  }
  return 0;
}

// ---- the operator templates ------------------------------------------------------------------

/// One strategy's run on an operator, with a progress bar.
tune::OpTuneResult run_op_strategy(const Args& a, tune::Strategy strategy) {
  tune::OpTuneOptions o;
  o.strategy = strategy;
  o.trials = a.trials;
  o.budget_s = a.budget_s;
  o.seed = a.seed;
  o.threads = a.threads;
  o.db_path = a.db;
  mls::ProgressBar bar(a.trials, "tune " + tune::op_name(a.op.kind) + " " + tune::to_string(strategy));
  int refused = 0;
  o.on_trial = [&](const tune::OpTrial& t, const std::vector<double>& best) {
    if (t.status != tune::TrialStatus::Ok) ++refused;
    char status[96];
    std::snprintf(status, sizeof status, "best %.1f GB/s, %d refused", best.back(), refused);
    bar.update(t.index + 1, status);
  };
  tune::OpTuneResult r = tune::OpTuner(a.op, o).run();
  char done[160];
  std::snprintf(done, sizeof done, "%zu trials in %.1f s, best %.1f GB/s (hand-written %.1f)", r.trials.size(),
                r.wall_seconds, r.best_gbs, tune::op_bytes(a.op) / r.anchor_seconds * 1e-9);
  bar.finish(done);
  for (const auto& t : r.trials)
    if (t.status != tune::TrialStatus::Ok)
      std::printf("  refused: %s: %s: %s\n", tune::to_string(t.knobs).c_str(), tune::to_string(t.status).c_str(),
                  t.message.c_str());
  for (const auto& t : r.confirmed)
    std::printf("  timed again: %s: %.1f GB/s (%.1f in the search)\n", tune::to_string(t.knobs).c_str(), t.gbs,
                r.trials[static_cast<std::size_t>(t.index)].gbs);
  return r;
}

/// The knobs of `--knobs "acc=2 fuse=1 ..."`: the full space's default with the fields given
/// replaced; mls::Error naming the field for one that is not name=value or not a knob of the template.
tune::OpKnobs parse_op_knobs(const tune::OpProblem& p, int threads, const std::string& text) {
  const std::string op = tune::op_name(p.kind);
  tune::OpKnobs k = tune::OpSpace::full(p, threads).default_knobs();
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != ',') ++j;
    if (j == i) break;
    const std::string field = text.substr(i, j - i), name = field.substr(0, field.find('='));
    const std::size_t eq = field.find('=');
    MLS_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < field.size(), "mls-tune ", op, ": --knobs field '", field,
              "' is not name=value (e.g. \"", tune::to_string(k), "\")");
    MLS_CHECK(k.count(name), "mls-tune ", op, ": --knobs: '", name, "' is not a knob of ", tune::op_template_id(p.kind),
              " (its knobs: ", tune::to_string(k), ")");
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(field.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MLS_CHECK(used == field.size() - eq - 1, "mls-tune ", op, ": --knobs: the value of '", name, "' must be an integer, got '",
              field.substr(eq + 1), "'");
    k[name] = v;
    i = j;
  }
  tune::check_op_knobs(p, k);
  return k;
}

/// `mls-tune softmax|layernorm|fused|conv2d`: the search (or --knobs), the best, its loop nest (and
/// with --cpp its C++), the ratio lines.
int run_op(const Args& a) {
  const tune::OpProblem& p = a.op;
  tune::check_problem(p);
  const std::string op = tune::op_name(p.kind);
  if (!a.knobs.empty()) {
    MLS_CHECK(a.svg.empty() && a.strategy != "all", "mls-tune ", op, ": --knobs measures one schedule; it takes no --svg "
              "or --strategy all");
    const tune::OpKnobs k = parse_op_knobs(p, a.threads, a.knobs);
    const tune::CompiledOp compiled = tune::compile_op(p, k);
    tune::OpArrays got = tune::make_op_arrays(p, a.seed), want = got;
    compiled.run(got, a.threads);
    tune::run_hand_written(p, want);
    const double err = tune::op_error(p, got, want);
    std::printf("mls-tune %s %s, %d thread%s: %s\nerror vs the hand-written kernel %.3g of the tolerance (<= 1: right)\n",
                op.c_str(), tune::to_string(p).c_str(), a.threads, a.threads == 1 ? "" : "s", tune::to_string(k).c_str(),
                err);
    MLS_CHECK(err <= 1, "mls-tune ", op, ": the kernel of ", tune::to_string(k), " differs from the hand-written one (",
              err, " of the tolerance)");
    std::printf("loop nest:\n%s\n", te::to_string(compiled.kernel().func()).c_str());
    if (a.cpp) std::printf("==== the C++ (te::generate_cpp)\n%s\n", compiled.kernel().source().c_str());
    const char* peer = p.kind == tune::OpKind::Conv2d ? "direct loop" : "hand-written";
    const tune::OpComparison c = tune::compare_op(compiled, a.threads, a.seed);
    std::printf("tuned %.2f GB/s, streamed copy of the same bytes %.2f GB/s, %s %.2f GB/s (interleaved)\n", c.gbs,
                c.copy_gbs, peer, c.hand_gbs);
    std::fputs(tune::op_ratio_lines(p, a.threads, c).c_str(), stdout);
    return 0;
  }
  std::printf("mls-tune %s %s, %d thread%s, %d trials per strategy%s; %.1f MB moved per run; database %s\n", op.c_str(),
              tune::to_string(p).c_str(), a.threads, a.threads == 1 ? "" : "s", a.trials,
              a.budget_s > 0 ? (", budget " + std::to_string(a.budget_s) + " s").c_str() : "", tune::op_bytes(p) * 1e-6,
              (a.db.empty() ? mls::kernels::default_tuning_db_path().string() : a.db).c_str());
  std::vector<tune::TuningCurve> curves;
  tune::OpTuneResult best;
  double hand_gbs = 0;
  for (auto s : strategies_of(a.strategy)) {
    tune::OpTuneResult r = run_op_strategy(a, s);
    hand_gbs = tune::op_bytes(p) / r.anchor_seconds * 1e-9;
    curves.push_back({tune::to_string(s), r.best_so_far});
    if (r.found && (!best.found || r.best_seconds < best.best_seconds)) best = r;
  }
  const char* peer = p.kind == tune::OpKind::Conv2d ? "direct loop" : "hand-written";
  if (!a.svg.empty()) {
    const std::string title = op + " " + tune::to_string(p) + ", " + std::to_string(a.threads) + " thread" +
                              (a.threads == 1 ? "" : "s") + ": best GB/s so far per trial";
    mls::write_file_atomic(a.svg, tune::tuning_curve_svg(curves, hand_gbs, peer, title, "GB/s"), "mls-tune");
    std::printf("wrote %s\n", a.svg.c_str());
  }
  if (!best.found) {
    std::fprintf(stderr, "mls-tune: no candidate passed (every one was refused; see above)\n");
    return 1;
  }
  const tune::CompiledOp compiled = tune::compile_op(p, best.best);
  std::printf("best: %s\n%.2f GB/s, %.2f GFLOP/s (%.4f ms)\n", tune::to_string(best.best).c_str(), best.best_gbs,
              tune::op_flops(p) / best.best_seconds * 1e-9, best.best_seconds * 1e3);
  std::printf("loop nest of the best:\n%s\n", te::to_string(compiled.kernel().func()).c_str());
  if (a.cpp) std::printf("==== the C++ of the best (te::generate_cpp)\n%s\n", compiled.kernel().source().c_str());
  const tune::OpComparison c = tune::compare_op(compiled, a.threads, a.seed);
  std::printf("tuned %.2f GB/s, streamed copy of the same bytes %.2f GB/s, %s %.2f GB/s (interleaved)\n", c.gbs,
              c.copy_gbs, peer, c.hand_gbs);
  std::fputs(tune::op_ratio_lines(p, a.threads, c).c_str(), stdout);
  return 0;
}

/// `mls-tune nests`: the slide's three loop nests.
int print_nests(long n) {
  for (const auto& st : tune::slide_steps(n)) {
    std::printf("==== %s\n%s\n\n", st.title.c_str(), st.code.c_str());
    std::printf("%s\n", te::to_string(te::lower(st.schedule, "matmul")).c_str());
  }
  return 0;
}

/// Seconds of the fastest of `runs` calls of fn.
template <class F>
double best_seconds(F&& fn, int runs) {
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

/// `mls-tune steps`: the worked schedule, printed; with `run`, compiled, checked and timed once.
int print_steps(long m, long n, long k, bool run, int cpp) {
  const std::vector<tune::ScheduleStep> steps = tune::sgemm_steps(m, n, k);
  const tune::SgemmKnobs kn = tune::KnobSpace::sgemm(1).default_knobs();
  const tune::SgemmShape padded = tune::padded_to_tiles(kn, {m, n, k});
  const tune::SgemmPlan p = tune::plan_sgemm(kn, padded);
  std::printf("SGEMM %s (padded to %s): MR %d, NR %d, MC %ld, KC %ld, NC %ld\n\n", tune::to_string(tune::SgemmShape{m, n, k}).c_str(),
              tune::to_string(padded).c_str(), kn.mr, kn.nr, p.mc, p.kc, p.nc);
  std::vector<te::LoweredFunc> fs;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    fs.push_back(te::lower(steps[i].schedule, "step" + std::to_string(i + 1)));
    std::printf("==== %s\n%s\n\n%s\n", steps[i].title.c_str(), steps[i].code.c_str(), te::to_string(fs.back()).c_str());
  }
  if (cpp > 0) {
    MLS_CHECK(cpp <= static_cast<int>(fs.size()), "mls-tune steps: --cpp ", cpp, " is not a step (1..", fs.size(), ")");
    std::printf("==== the C++ of step %d (te::generate_cpp)\n%s\n", cpp,
                te::generate_cpp(fs[static_cast<std::size_t>(cpp - 1)]).c_str());
  }
  if (!run) return 0;
  const tune::SgemmShape& s = padded;
  mls::Rng rng(1, "mls_tune_steps");
  std::vector<float> A(static_cast<std::size_t>(s.m * s.k)), B(static_cast<std::size_t>(s.k * s.n)),
      C(static_cast<std::size_t>(s.m * s.n)), first;
  for (auto& x : A) x = static_cast<float>(rng.uniform(-1, 1));
  for (auto& x : B) x = static_cast<float>(rng.uniform(-1, 1));
  const std::vector<te::JitKernel> kernels = te::compile_all(fs);
  mls::ThreadCountGuard one(1);
  const double flops = tune::sgemm_flops(s);
  const double packed = best_seconds(
      [&] {
        mls::kernels::sgemm("lab4_packed", false, false, s.m, s.n, s.k, 1.0f, A.data(), s.k, B.data(), s.n, 0.0f,
                            C.data(), s.n);
      },
      3);
  std::printf("lab4_packed: %.2f GFLOP/s (1 thread, the best of 3 runs)\n", flops / packed * 1e-9);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::vector<std::span<float>> args = {A, B, C};
    const double t = best_seconds([&] { kernels[i].run(args, 1); }, i == 0 ? 1 : 3);
    double err = 0;
    if (i == 0) first = C;
    for (std::size_t j = 0; j < C.size(); ++j) err = std::max(err, static_cast<double>(std::fabs(C[j] - first[j])));
    std::printf("step %zu: %8.2f GFLOP/s (%.2f x lab4_packed), max |C - step 1's| %.2g\n", i + 1, flops / t * 1e-9,
                packed / t, err);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-tune: autotune lab 4's SGEMM schedule template for one shape (the tuning database feeds MLS_MATMUL=tuned) or an operator's template (softmax, layernorm, fused, conv2d); print the slide's loop nests and the worked schedule"};
  app.require_subcommand(1);
  Args a;
  CLI::App* sgemm = app.add_subcommand("sgemm", "tune C = A·B (row-major, M x K times K x N)");
  sgemm->add_option("--m", a.m, "rows of C")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  sgemm->add_option("--n", a.n, "columns of C")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  sgemm->add_option("--k", a.k, "the reduction")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  sgemm->add_option("--threads", a.threads, "threads to tune for")->capture_default_str()->check(CLI::Range(1, 4096));
  sgemm->add_option("--trials", a.trials, "candidates per strategy")->capture_default_str()->check(CLI::Range(1, 1000000));
  sgemm->add_option("--strategy", a.strategy,
                    "grid, random, guided, all (the three with the same budget) or compare (random and guided "
                    "over --seeds seeds: trials to 95% of the best found)")
      ->capture_default_str()
      ->check(CLI::IsMember({"grid", "random", "guided", "all", "compare"}));
  sgemm->add_option("--seeds", a.seeds, "--strategy compare: runs per strategy (seeds --seed, --seed + 1, ...)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sgemm->add_option("--seed", a.seed, "operands, sampling and the model's exploration")->capture_default_str();
  sgemm->add_option("--budget-s", a.budget_s, "wall-clock budget per strategy in seconds (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  sgemm->add_option("--svg", a.svg, "write best-so-far GFLOP/s against trial to this SVG file");
  sgemm->add_option("--db", a.db, "tuning database (default: $MLS_TUNING_DB, else the user's cache folder)");
  sgemm->add_option("--knobs", a.knobs,
                    "measure these knobs instead of searching (\"mc=144 kc=512 ...\" as printed, fields left out "
                    "from the default; or \"packed\": lab4_packed's own configuration) against lab4_packed and OpenBLAS");
  sgemm->add_flag("--no-seeds", a.no_seeds,
                  "guided: do not measure lab4_packed's configuration and the database's best record of the shape "
                  "right after the default");
  sgemm->add_flag("--trans-a", a.trans_a, "A is stored K x M (C = A^T·B)");
  sgemm->add_flag("--trans-b", a.trans_b, "B is stored N x K (C = A·B^T)");
  sgemm->add_option("--beta", a.beta, "0: C = op(A)·op(B); 1: C += op(A)·op(B)")->capture_default_str()->check(CLI::IsMember({0, 1}));
  sgemm->add_flag("--transformer", a.transformer,
                  "tune the 12 GEMMs of a transformer layer (lab 4's bench sgemm_tf: fwd, dx, dW of qkv, proj, fc, "
                  "fcproj; beta 1) at --threads with --trials each, then print one table and the ratio lines");
  // The operator subcommands: their shape options, then the search's (as sgemm's).
  auto search_options = [&](CLI::App* c) {
    c->add_option("--threads", a.threads, "threads to tune for")->capture_default_str()->check(CLI::Range(1, 4096));
    c->add_option("--trials", a.trials, "candidates per strategy")->capture_default_str()->check(CLI::Range(1, 1000000));
    c->add_option("--strategy", a.strategy, "grid, random, guided, or all (the three with the same budget)")
        ->capture_default_str()
        ->check(CLI::IsMember({"grid", "random", "guided", "all"}));
    c->add_option("--seed", a.seed, "arrays, sampling and the model's exploration")->capture_default_str();
    c->add_option("--budget-s", a.budget_s, "wall-clock budget per strategy in seconds (0: none)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1e9));
    c->add_option("--svg", a.svg, "write best-so-far GB/s against trial to this SVG file");
    c->add_option("--db", a.db, "tuning database (default: $MLS_TUNING_DB, else the user's cache folder)");
    c->add_option("--knobs", a.knobs,
                  "measure these knobs instead of searching (\"acc=2 fuse=1 ...\" as printed, knobs left out from the "
                  "default), checked against the hand-written kernel");
    c->add_flag("--cpp", a.cpp, "also print the generated C++ of the kernel (the best, or --knobs)");
  };
  long rows = 4096, cols = 1024;
  bool backward = false;
  CLI::App* softmax = app.add_subcommand("softmax", "tune row softmax of a rows x cols matrix (vs fused.hpp's softmax_forward)");
  CLI::App* layernorm = app.add_subcommand("layernorm", "tune layernorm forward (or --backward) over rows x cols (vs fused.hpp's)");
  for (CLI::App* c : {softmax, layernorm}) {
    c->add_option("--rows", rows, "rows")->capture_default_str()->check(CLI::Range(1L, 1L << 30));
    c->add_option("--cols", cols, "columns (the reduction)")->capture_default_str()->check(CLI::Range(1L, 1L << 30));
    search_options(c);
  }
  layernorm->add_flag("--backward", backward, "the backward kernel (dinp, dweight, dbias accumulated)");
  long fused_n = 1L << 22;
  CLI::App* fused = app.add_subcommand("fused", "tune E = D + (A + B) * C on n floats (vs fused.hpp's fused_add_mul_add)");
  fused->add_option("--n", fused_n, "elements")->capture_default_str()->check(CLI::Range(1L, 1L << 30));
  search_options(fused);
  tune::OpProblem conv = tune::conv2d_problem(1, 64, 56, 56, 64, 3, 1, 1);
  CLI::App* conv2d = app.add_subcommand("conv2d", "tune a direct 2-D convolution, NCHW (vs a direct loop)");
  conv2d->add_option("--n", conv.n, "batch")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  conv2d->add_option("--c", conv.c, "input channels")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  conv2d->add_option("--h", conv.h, "input height")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  conv2d->add_option("--w", conv.w, "input width")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  conv2d->add_option("--k", conv.k, "output channels")->capture_default_str()->check(CLI::Range(1L, 1L << 20));
  conv2d->add_option("--kh", conv.kh, "kernel height and width")->capture_default_str()->check(CLI::Range(1L, 1L << 10));
  conv2d->add_option("--stride", conv.stride, "stride")->capture_default_str()->check(CLI::Range(1L, 1L << 10));
  conv2d->add_option("--pad", conv.pad, "zero padding")->capture_default_str()->check(CLI::Range(0L, 1L << 10));
  search_options(conv2d);
  long nests_n = 1024;
  CLI::App* nests = app.add_subcommand("nests", "print the slide's three loop nests of one matmul (slides 001)");
  nests->add_option("--n", nests_n, "matrix size (a multiple of 8)")->capture_default_str()->check(CLI::Range(8L, 1L << 20));
  long sm = 256, sn = 256, sk = 256;
  bool steps_run = false;
  CLI::App* steps = app.add_subcommand("steps", "print the SGEMM template built up one idea at a time (--run: compile and time each)");
  steps->add_option("--m", sm, "rows of C")->capture_default_str()->check(CLI::Range(1L, 1L << 14));
  steps->add_option("--n", sn, "columns of C")->capture_default_str()->check(CLI::Range(1L, 1L << 14));
  steps->add_option("--k", sk, "the reduction")->capture_default_str()->check(CLI::Range(1L, 1L << 14));
  steps->add_flag("--run", steps_run, "compile every step (one unit), check it against step 1, time one thread");
  int steps_cpp = 0;
  steps->add_option("--cpp", steps_cpp, "also print the generated C++ of this step (1..6)")->check(CLI::Range(1, 6));
  CLI11_PARSE(app, argc, argv);
  try {
    if (nests->parsed()) return print_nests(nests_n);
    if (steps->parsed()) return print_steps(sm, sn, sk, steps_run, steps_cpp);
    MLS_CHECK(!sgemm->parsed() || a.knobs.empty() || (!a.transformer && a.strategy != "compare" && a.strategy != "all" && a.svg.empty()),
              "mls-tune sgemm: --knobs measures one schedule of one shape; it takes no --transformer, --strategy ",
              "all|compare or --svg");
    if (a.transformer) {
      MLS_CHECK(a.strategy != "all" && a.strategy != "compare", "mls-tune sgemm --transformer: --strategy ", a.strategy,
                " is for one shape; give one strategy");
      MLS_CHECK(!a.trans_a && !a.trans_b && a.beta == 0 && a.svg.empty(),
                "mls-tune sgemm --transformer: the GEMMs bring their own flags; --trans-a, --trans-b, --beta and --svg are for one shape");
      return run_transformer(a);
    }
    if (softmax->parsed() || layernorm->parsed()) {
      const tune::OpKind kind = softmax->parsed() ? tune::OpKind::Softmax
                                : backward        ? tune::OpKind::LayerNormBwd
                                                  : tune::OpKind::LayerNormFwd;
      a.op = tune::row_problem(kind, rows, cols);
      return run_op(a);
    }
    if (fused->parsed()) {
      a.op = tune::elementwise_problem(fused_n);
      return run_op(a);
    }
    if (conv2d->parsed()) {
      a.op = conv;
      return run_op(a);
    }
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-tune: %s\n", e.what());
    return 2;
  }
}
