// Lab 4 part 2: the guided search strategy (Tuner::propose_guided, a student function) on a
// synthetic cost instead of compiled and timed kernels (TuneOptions::evaluate): no compiler, no
// clock, so every run is reproducible. Its proposals are valid and fresh, the default comes first,
// a small space is exhausted exactly once, refused candidates do not stop it, and on a smooth
// landscape over the full SGEMM space it gets near the optimum (found here by enumerating the
// space: the independent reference) in 48 trials, far nearer than random search.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <set>
#include <string>
#include <vector>

#include "mls/common/rng.hpp"
#include "mls/kernels/tune.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"

using namespace mls::kernels;
using tune::KnobSpace;
using tune::SgemmKnobs;
using tune::SgemmShape;
using tune::TrialStatus;

namespace {

constexpr int kLanes = 16;  // the space's lanes, fixed: the same space on every CPU
const SgemmShape kShape{1024, 1024, 1024};

/// A smooth made-up cost, log seconds: fewer loads per FMA with larger register tiles, a best KC
/// (256), MC (128) and NC (1024), Goto's loop order, packing, unroll 4. Its minimum is not at the
/// space's default.
double synthetic_log_seconds(const SgemmKnobs& k) {
  const double nv = static_cast<double>(k.nr) / kLanes;
  double c = 1.5 * (1.0 / k.mr + 1.0 / nv);
  c += 0.15 * std::pow(std::log2(k.kc) - 8, 2) + 0.1 * std::pow(std::log2(k.mc) - 7, 2) +
       0.05 * std::pow(std::log2(k.nc) - 10, 2);
  c += k.order == "nkm" ? 0.0 : k.order == "knm" ? 0.15 : 0.3;
  c += (k.pack_a ? 0.0 : 0.2) + (k.pack_b ? 0.0 : 0.4);
  c += 0.1 * std::fabs(std::log2(k.unroll) - 2);
  return c;
}

/// The trial of `k` under the synthetic cost; `refuse` (when set) marks candidates that "fail to
/// compile".
tune::Trial synthetic_trial(const SgemmKnobs& k, bool (*refuse)(const SgemmKnobs&) = nullptr) {
  tune::Trial t;
  if (refuse && refuse(k)) {
    t.status = TrialStatus::CompileError;
    t.message = "synthetic: refused";
    return t;
  }
  t.status = TrialStatus::Ok;
  t.seconds = std::exp(synthetic_log_seconds(k));
  t.gflops = tune::sgemm_flops(kShape) / t.seconds * 1e-9;
  return t;
}

tune::TuneResult run(tune::Strategy strategy, const KnobSpace& space, int trials, std::uint64_t seed,
                     bool (*refuse)(const SgemmKnobs&) = nullptr) {
  tune::TuneOptions o;
  o.strategy = strategy;
  o.trials = trials;
  o.seed = seed;
  o.space = space;
  o.evaluate = [refuse](const SgemmKnobs& k) { return synthetic_trial(k, refuse); };
  return tune::Tuner(kShape, o).run();
}

/// How many trials are valid points of `space` whose plans no earlier trial had.
std::int64_t valid_and_fresh(const tune::TuneResult& r, const KnobSpace& space) {
  std::set<std::string> keys;
  std::int64_t n = 0;
  for (const auto& t : r.trials) n += space.valid(t.knobs) && keys.insert(tune::plan_key(t.knobs, kShape, kLanes)).second;
  return n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("tune guided: valid, fresh proposals, the default first, reproducible from the seed", "[lab4][tune][guided]") {
  const KnobSpace space = KnobSpace::sgemm(1, kLanes);
  mls::Rng seeds(17, "guided_seeds");
  const std::uint64_t seed = static_cast<std::uint64_t>(seeds.randint(1, 1000000));
  const tune::TuneResult r = run(tune::Strategy::Guided, space, 40, seed);
  mls::testing::observe("guided, 40 trials: trials", static_cast<std::int64_t>(r.trials.size()));
  mls::testing::observe("guided, 40 trials: valid and fresh", valid_and_fresh(r, space));
  REQUIRE_FALSE(r.trials.empty());
  mls::testing::observe("guided: the first proposal", tune::to_string(r.trials.front().knobs));
  MLS_ORACLE_CHECK(CHECK(r.trials.size() == 40); CHECK(valid_and_fresh(r, space) == 40);
                   CHECK(r.trials.front().knobs == space.default_knobs()));
  // The same seed, the same proposals: every random choice comes from the tuner's Rng.
  const tune::TuneResult again = run(tune::Strategy::Guided, space, 40, seed);
  bool same = again.trials.size() == r.trials.size();
  for (std::size_t i = 0; same && i < r.trials.size(); ++i) same = again.trials[i].knobs == r.trials[i].knobs;
  CHECK(same);
  // The best so far never gets worse, and is the best trial's.
  double best = 0;
  for (std::size_t i = 0; i < r.trials.size(); ++i) {
    best = std::max(best, r.trials[i].gflops);
    REQUIRE((r.best_so_far[i] == best));  // a truth: the values are the search's own
  }
}

TEST_CASE("tune guided: lab4_packed's configuration is measured right after the default, unless told not to",
          "[lab4][tune][guided]") {
  const KnobSpace space = KnobSpace::sgemm(1, kLanes);
  const auto packed = space.packed_knobs(kShape);
  REQUIRE(packed.has_value());
  const tune::TuneResult r = run(tune::Strategy::Guided, space, 6, 3);
  REQUIRE(r.trials.size() == 6);
  mls::testing::observe("guided: the second proposal", tune::to_string(r.trials[1].knobs));
  CHECK(r.trials.front().knobs == space.default_knobs());
  CHECK(r.trials[1].knobs == *packed);
  int packed_trials = 0;  // measured once
  for (const auto& t : r.trials) packed_trials += t.knobs == *packed;
  CHECK(packed_trials == 1);
  // Then the same with the leanest micro-kernel the registers hold (lean_tile).
  SgemmKnobs lean = *packed;
  std::tie(lean.mr, lean.nr) = tune::lean_tile(space);
  mls::testing::observe("guided: the third proposal", tune::to_string(r.trials[2].knobs));
  CHECK(r.trials[2].knobs == lean);
  // Off, and for random search (a baseline), it is an ordinary point of the space.
  tune::TuneOptions o;
  o.strategy = tune::Strategy::Guided;
  o.trials = 6;
  o.seed = 3;
  o.space = space;
  o.seed_packed = false;
  o.evaluate = [](const SgemmKnobs& k) { return synthetic_trial(k); };
  const tune::TuneResult off = tune::Tuner(kShape, o).run();
  REQUIRE(off.trials.size() == 6);
  CHECK(off.trials.front().knobs == space.default_knobs());
  CHECK_FALSE(off.trials[1].knobs == *packed);
  o.strategy = tune::Strategy::Random;
  o.seed_packed = true;
  const tune::TuneResult random = tune::Tuner(kShape, o).run();
  REQUIRE(random.trials.size() == 6);
  CHECK_FALSE(random.trials[1].knobs == *packed);
}

TEST_CASE("tune guided: a small space is proposed whole, each plan once, refused candidates included",
          "[lab4][tune][guided]") {
  for (int threads : {1, 2}) {
    const KnobSpace space = KnobSpace::small(threads, kLanes);
    // The independent count: the distinct plans of the space on this shape.
    MLS_ORACLE(std::set<std::string> plans;
               for (const auto& k : space.enumerate()) plans.insert(tune::plan_key(k, kShape, kLanes));)
    auto refuse = [](const SgemmKnobs& k) { return k.unroll == 4 && !k.pack_a; };
    const tune::TuneResult r = run(tune::Strategy::Guided, space, 100000, 5, refuse);
    const std::string what = "small space at " + std::to_string(threads) + " threads: ";
    mls::testing::observe(what + "trials", static_cast<std::int64_t>(r.trials.size()));
    mls::testing::observe(what + "valid and fresh", valid_and_fresh(r, space));
    std::int64_t refused = 0;
    for (const auto& t : r.trials) refused += t.status == TrialStatus::CompileError;
    mls::testing::observe(what + "refused trials", refused);
    MLS_ORACLE_CHECK(CHECK(r.trials.size() == plans.size()); CHECK(valid_and_fresh(r, space) == static_cast<std::int64_t>(plans.size())));
    REQUIRE(r.found);
    CHECK(r.best.pack_a);  // every trial without pack_a and with unroll 4 was refused
  }
}

TEST_CASE("tune guided: near the optimum of a synthetic cost in 48 trials, nearer than random search",
          "[lab4][tune][guided]") {
  const KnobSpace space = KnobSpace::sgemm(1, kLanes);
  // The optimum, by enumeration (the reference the search is measured against).
  MLS_ORACLE(double optimum = 1e300; for (const auto& k : space.enumerate()) optimum = std::min(optimum, synthetic_log_seconds(k));)
  mls::Rng seeds(29, "guided_seeds");
  std::vector<double> guided, random;
  for (int i = 0; i < 5; ++i) {
    const auto seed = static_cast<std::uint64_t>(seeds.randint(1, 1000000));
    const tune::TuneResult g = run(tune::Strategy::Guided, space, 48, seed);
    const tune::TuneResult r = run(tune::Strategy::Random, space, 48, seed);
    mls::testing::observe("guided, 48 trials, seed " + std::to_string(i) + ": valid and fresh", valid_and_fresh(g, space));
    REQUIRE(g.found);
    REQUIRE(r.found);
    guided.push_back(std::log(g.best_seconds));
    random.push_back(std::log(r.best_seconds));
  }
  // Over 200 seeds the reference's median of 5 was at most 1.26 x the optimum's time (random
  // search's: at least 1.42): the bar is 1.30. What a search finds is its own, so the grader
  // compares whether it cleared the bar (1), not the times.
  const bool nearer = median(guided) < median(random);
  mls::testing::observe("guided's median best below random search's (1: yes)", static_cast<std::int64_t>(nearer));
  CHECK(nearer);
  MLS_ORACLE(const double over = std::exp(median(guided) - optimum);)
  MLS_ORACLE_CHECK(INFO("guided's median best is " << over << " x the optimum's time"); CHECK(over <= 1.30));
  // The bar, observed: the grading build has no enumeration, so it compares with the optimum's
  // value (checked against the enumeration above).
  const double known_optimum = 0.625;
  MLS_ORACLE_CHECK(CHECK(optimum == Approx(known_optimum)));
  mls::testing::observe("guided's median best within 30% of the optimum (1: yes)",
                        static_cast<std::int64_t>(std::exp(median(guided) - known_optimum) <= 1.30));
}
