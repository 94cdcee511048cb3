// The registry's `tuned` SGEMM kernel: the tuning database's best schedule for the shape (or the
// nearest tuned shape's, or the template's default; tuned on first use with MLS_TUNE=1), compiled
// once per (knobs, shape), with the hand-written packed kernel where the template does not pay or
// cannot run (tiny problems, K = 0, no compiler).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "mls/common/error.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/kernels/tune.hpp"

namespace mls::kernels::tune {

std::optional<KnobChoice> choose_knobs(const std::vector<TuningRecord>& records, const SgemmShape& shape, int threads,
                                       std::string_view cpu_key) {
  struct Candidate {
    SgemmShape shape;
    SgemmKnobs knobs;
    double seconds;
    bool confirmed;
  };
  const SgemmShape want = shape.key();
  std::vector<Candidate> usable;
  for (const auto& r : records) {
    if (r.op != "sgemm" || r.cpu_key != cpu_key || r.threads != threads) continue;
    try {
      const SgemmShape rs = shape_from_json(r.shape);  // no flags: an old record, no transposes, beta 0
      if (rs.trans_a != want.trans_a || rs.trans_b != want.trans_b || rs.beta != want.beta) continue;
      const bool confirmed = r.schedule.is_object() && r.schedule.value("measure", std::string()) == "confirmed";
      usable.push_back({rs, knobs_from_json(r.schedule), r.seconds, confirmed});
    } catch (const std::exception&) {
      continue;  // a malformed shape, another template's schedule, or knobs this CPU cannot take
    }
  }
  if (usable.empty()) return std::nullopt;
  auto distance = [&](const SgemmShape& s) {
    return std::fabs(std::log(static_cast<double>(s.m) / want.m)) + std::fabs(std::log(static_cast<double>(s.n) / want.n)) +
           std::fabs(std::log(static_cast<double>(s.k) / want.k));
  };
  // The nearest shape (the shape itself at distance 0), then its confirmed records, then the fastest.
  const Candidate* best = nullptr;
  for (const auto& c : usable) {
    if (!best) {
      best = &c;
      continue;
    }
    const double dc = distance(c.shape), db = distance(best->shape);
    if (dc < db - 1e-12) {
      best = &c;
    } else if (std::fabs(dc - db) <= 1e-12 && c.shape == best->shape) {
      if ((c.confirmed && !best->confirmed) || (c.confirmed == best->confirmed && c.seconds < best->seconds)) best = &c;
    }
  }
  return KnobChoice{best->knobs, best->shape == want ? "db" : "nearest " + to_string(best->shape)};
}

namespace {

/// A call's problem at a thread count: the fast lookup of its kernel.
struct CallKey {
  long m, n, k;
  bool trans_a, trans_b;
  int beta;
  long lda, ldb, ldc;
  int threads;
  friend auto operator<=>(const CallKey&, const CallKey&) = default;
};

struct State {
  std::mutex mu;
  std::map<std::string, KnobChoice> choices;      // "<shape> t<threads>"
  std::map<std::string, std::shared_ptr<const CompiledSgemm>> kernels;  // problem + plan_key
  std::set<std::string> failed;                   // kernels that did not compile
  /// The kernel of each problem seen at each thread count (null: it did not compile), so a call
  /// finds it without making keys of strings.
  std::map<CallKey, std::shared_ptr<const CompiledSgemm>> by_call;
  std::string last_warning;
  bool warned = false;
  std::int64_t fallbacks = 0;
  double min_flops = static_cast<double>(1 << 21);
  jit::CompileOptions compile{};
};

State& state() {
  static State s;
  return s;
}

void fallback(bool ta, bool tb, long M, long N, long K, float alpha, const float* A, long lda, const float* B, long ldb,
              float beta, float* C, long ldc) {
  (num_threads() > 1 ? sgemm_packed_mt : sgemm_packed)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/// Records and prints (the first time) a warning; the caller holds the lock.
void warn(State& s, const std::string& text) {
  s.last_warning = text;
  if (!s.warned) std::fprintf(stderr, "%s\n", text.c_str());
  s.warned = true;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// The knobs for a shape at a thread count (the caller holds the lock).
KnobChoice knobs_for(State& s, const SgemmShape& shape, int threads) {
  const KnobSpace space = KnobSpace::sgemm(threads);
  std::optional<KnobChoice> choice;
  try {
    choice = choose_knobs(TuningDb().scan().records, shape, threads, jit::cpu_key());
  } catch (const std::exception& e) {
    warn(s, "tuned: warning: cannot read the tuning database (" + first_line(e.what()) + "); default knobs");
  }
  const char* tune_env = std::getenv("MLS_TUNE");
  if ((!choice || choice->source != "db") && tune_env && std::string(tune_env) == "1") {
    int trials = 24;
    if (const char* t = std::getenv("MLS_TUNE_TRIALS"); t && *t) trials = std::max(1, std::atoi(t));
    std::fprintf(stderr, "tuned: tuning sgemm %s at %d threads (MLS_TUNE=1, %d candidates)...\n", to_string(shape).c_str(),
                 threads, trials);
    try {
      TuneOptions o;
      o.jit = s.compile;
      o.trials = trials;
      o.threads = threads;
      const TuneResult r = Tuner(shape, o).run();
      if (r.found) {
        std::fprintf(stderr, "tuned: %s: %.1f GFLOP/s with %s\n", to_string(shape).c_str(), r.best_gflops,
                     to_string(r.best).c_str());
        return {r.best, "tuned"};
      }
      warn(s, "tuned: warning: no candidate for " + to_string(shape) + " passed (" +
                  (r.trials.empty() ? std::string("none measured") : r.trials.back().message) + ")");
    } catch (const std::exception& e) {
      warn(s, "tuned: warning: tuning " + to_string(shape) + " failed (" + first_line(e.what()) + ")");
    }
  }
  if (choice) return *choice;
  if (const auto packed = space.packed_knobs(shape)) return {*packed, "packed"};  // the hand-written kernel's blocking
  return {space.default_knobs(), "default"};
}

}  // namespace

void sgemm_tuned(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float* A, long lda,
                 const float* B, long ldb, float beta, float* C, long ldc) {
  if (M == 0 || N == 0) return;
  State& s = state();
  const int threads = num_threads();
  // The problem compiled: the call's transposes and leading dimensions; beta 1 for any beta but 0
  // (C scaled in place first). alpha != 1 is staged: C compact, beta 0.
  const bool plain = alpha == 1.0f;
  const SgemmShape problem = SgemmShape{M,
                                        N,
                                        K,
                                        trans_a,
                                        trans_b,
                                        plain && beta != 0.0f ? 1 : 0,
                                        lda,
                                        ldb,
                                        plain ? ldc : 0}
                                 .canonical();
  std::shared_ptr<const CompiledSgemm> kernel;
  bool small = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    small = K == 0 || sgemm_flops(problem) < s.min_flops;
  }
  if (small) return fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const CallKey call{M, N, K, problem.trans_a, problem.trans_b, problem.beta, problem.lda, problem.ldb, problem.ldc, threads};
    if (auto hit = s.by_call.find(call); hit != s.by_call.end()) {
      kernel = hit->second;
    } else {
      const std::string choice_key = to_string(problem.key()) + " t" + std::to_string(threads);
      auto c = s.choices.find(choice_key);
      if (c == s.choices.end()) c = s.choices.emplace(choice_key, knobs_for(s, problem.key(), threads)).first;
      const std::string key = to_string(problem) + " " + plan_key(c->second.knobs, problem);
      if (auto k = s.kernels.find(key); k != s.kernels.end()) {
        kernel = k->second;
      } else if (!s.failed.count(key)) {
        try {
          kernel = std::make_shared<const CompiledSgemm>(compile_sgemm(c->second.knobs, problem, s.compile));
          s.kernels.emplace(key, kernel);
        } catch (const std::exception& e) {
          s.failed.insert(key);
          warn(s, "tuned: warning: cannot compile the SGEMM kernel for " + to_string(problem) + " (" +
                      first_line(e.what()) + "); using lab4_packed");
        }
      }
      s.by_call.emplace(call, kernel);
    }
    if (!kernel) ++s.fallbacks;
  }
  if (!kernel) return fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  kernel->run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads == 1 ? 1 : 0);
}

void register_tuned_kernel() {
  register_sgemm({"tuned", &sgemm_tuned, -100,
                  "lab 4 part 2: the autotuner's best schedule for the shape (tuning database; MLS_TUNE=1 tunes first), "
                  "compiled at run time; lab4_packed where it cannot run"});
}

double tuned_min_flops() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().min_flops;
}

void set_tuned_min_flops(double flops) {
  MLS_CHECK(flops >= 0 && std::isfinite(flops), "set_tuned_min_flops: ", flops, " must be finite and >= 0");
  std::lock_guard<std::mutex> lock(state().mu);
  state().min_flops = flops;
}

std::string tuned_last_warning() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_warning;
}

std::int64_t tuned_fallbacks() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().fallbacks;
}

std::optional<KnobChoice> tuned_choice(const SgemmShape& shape, int threads) {
  std::lock_guard<std::mutex> lock(state().mu);
  const auto it = state().choices.find(to_string(shape.key()) + " t" + std::to_string(threads));
  if (it == state().choices.end()) return std::nullopt;
  return it->second;
}

jit::CompileOptions tuned_compile_options() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().compile;
}

void set_tuned_compile_options(const jit::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().compile = options;
}

void reset_tuned_state() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.compile = {};
  s.choices.clear();
  s.kernels.clear();
  s.failed.clear();
  s.by_call.clear();
  s.last_warning.clear();
  s.warned = false;
  s.fallbacks = 0;
  detail::reset_staged_calls();
}

}  // namespace mls::kernels::tune
