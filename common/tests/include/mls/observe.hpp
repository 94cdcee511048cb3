#pragma once
/// Observations: what a test saw the code under test produce, for the grader's differential
/// verdict (handouts/README.md, "How a verdict is reached").
///
/// A test keeps its Catch2 checks (they give the student the messages they read with `ctest`),
/// and, next to a check whose verdict the test computes itself (`CHECK(allclose(got, want))`,
/// `CHECK(err < tol)`), it records the value the student's code produced:
///
///     const Tensor got = mls::softmax(x, -1);
///     mls::testing::observe("softmax(x, -1), x " + shape_str(x.shape()), got, {1e-6, 1e-7});
///     MLS_OBSERVE(mls::softmax(x, -1));              // label: the expression, exact unless a tolerance
///     CHECK(mls::allclose(got, want));
///
/// The label is what the grader's feedback names when a value differs ("differs from the
/// reference build: observation 2 of 5, '<label>' ..."): name the function and the case, e.g.
/// "gelu(x = -4, float32)" or "broadcast_shapes([3, 1], [7, 1])", not a bare "got".
///
/// Outside `mls-grader` an observation costs nothing and checks nothing. Under `mls-grader`
/// (graded mode) it is written to the result channel; the grader runs the same test in the
/// reference build with the same secret seed and compares the two streams in its own process:
/// same labels in the same order, values equal within the tolerance the *reference* build
/// recorded. The student side's tolerance, verdicts and printed output are never trusted.
///
/// Record the produced value, never the test's expected value: `want` computed by the test's
/// own oracle is the same in both builds and proves nothing.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mls/common/parallel.hpp"  // this_thread_rank

namespace mls::testing {

/// How close a student's value must be to the reference build's: |s - r| <= atol + rtol * |r|.
/// {0, 0} means exact (bit-equal for floats, NaN equal to NaN).
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

/// One observation. `kind` is "f64" (values), "i64" (values, exact), "bool" (values, exact),
/// "text" (text, exact) or "tensor" (dtype in `text`, shape, strides, offset, values).
struct Observation {
  std::string label;
  std::string kind;
  std::string text;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::int64_t offset = 0;
  std::vector<double> values;
  Tolerance tol;
};

/// Where observations go. Null unless mls-grader runs the program in graded mode (the harness
/// listener installs the sink before the first test case starts).
using ObservationSink = void (*)(const Observation&);
inline ObservationSink& observation_sink() {
  static ObservationSink sink = nullptr;
  return sink;
}

/// How many oracle scopes (`OracleScope`, the MLS_ORACLE_CHECK macro of mls/testing.hpp) the
/// calling thread is in. A check against a test's own oracle is compiled out of the grading
/// build of the tests (MLS_GRADED_BUILD), so its assertions cannot be observations in any build:
/// the reference's stream and the submission's must hold the same observations.
inline int& oracle_depth() {
  thread_local int depth = 0;
  return depth;
}

/// Marks the code of a check against an oracle while it runs (see oracle_depth).
struct OracleScope {
  OracleScope() { ++oracle_depth(); }
  ~OracleScope() { --oracle_depth(); }
  OracleScope(const OracleScope&) = delete;
  OracleScope& operator=(const OracleScope&) = delete;
};

/// True while observations are being recorded (graded mode), outside oracle scopes.
inline bool observing() { return observation_sink() != nullptr && oracle_depth() == 0; }

/// Observations made on simulated ranks' threads (lab 5's `run_simulated`), kept per rank until
/// the test's own thread observes again or the test case ends: the threads run in any order, the
/// stream must not.
struct RankObservations {
  std::mutex mutex;
  std::map<int, std::vector<Observation>> by_rank;
};
inline RankObservations& rank_observations() {
  static RankObservations r;
  return r;
}

/// Records the ranks' kept observations, rank by rank, each rank's in its own order.
inline void flush_rank_observations() {
  std::map<int, std::vector<Observation>> kept;
  {
    std::lock_guard<std::mutex> lock(rank_observations().mutex);
    kept.swap(rank_observations().by_rank);
  }
  if (ObservationSink s = observation_sink())
    for (const auto& [rank, list] : kept)
      for (const Observation& o : list) s(o);
}

/// Records a finished observation.
inline void observe(Observation o) {
  ObservationSink s = observation_sink();
  if (s == nullptr || oracle_depth() != 0) return;
  if (const int rank = mls::this_thread_rank(); rank >= 0) {
    std::lock_guard<std::mutex> lock(rank_observations().mutex);
    rank_observations().by_rank[rank].push_back(std::move(o));
    return;
  }
  flush_rank_observations();
  s(o);
}

/// Records a floating-point value (exact unless `tol` says otherwise).
inline void observe(std::string_view label, double v, Tolerance tol = {}) {
  if (!observing()) return;
  observe(Observation{std::string(label), "f64", "", {}, {}, 0, {v}, tol});
}

/// Records an integer (exact).
template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
inline void observe(std::string_view label, I v) {
  if (!observing()) return;
  observe(Observation{std::string(label), "i64", "", {}, {}, 0, {static_cast<double>(v)}, {}});
}

/// Records a truth value (exact). Weak on its own: a test whose observations are all truth values
/// can be forged by writing "true"; record the value behind the truth where there is one.
inline void observe(std::string_view label, bool v) {
  if (!observing()) return;
  observe(Observation{std::string(label), "bool", "", {}, {}, 0, {v ? 1.0 : 0.0}, {}});
}

/// Records a string (exact).
inline void observe(std::string_view label, std::string_view text) {
  if (!observing()) return;
  observe(Observation{std::string(label), "text", std::string(text), {}, {}, 0, {}, {}});
}
inline void observe(std::string_view label, const char* text) { observe(label, std::string_view(text)); }
inline void observe(std::string_view label, const std::string& text) { observe(label, std::string_view(text)); }

/// Records a sequence of numbers (floating: within `tol`; integral: exact).
template <class T>
  requires std::is_arithmetic_v<T>
inline void observe(std::string_view label, std::span<const T> v, Tolerance tol = {}) {
  if (!observing()) return;
  Observation o{std::string(label), std::is_floating_point_v<T> ? "f64" : "i64", "", {static_cast<std::int64_t>(v.size())},
                {}, 0, {}, std::is_floating_point_v<T> ? tol : Tolerance{}};
  o.values.reserve(v.size());
  for (const T& x : v) o.values.push_back(static_cast<double>(x));
  observe(std::move(o));
}
template <class T>
  requires std::is_arithmetic_v<T>
inline void observe(std::string_view label, const std::vector<T>& v, Tolerance tol = {}) {
  observe(label, std::span<const T>(v.data(), v.size()), tol);
}

/// Records a long sequence by a deterministic sample: all of it when it has at most `max_values`
/// elements, else `max_values - tail` elements spread evenly over it (index ⌊j·n/k⌋, so every
/// phase of a vector or cache-line loop is hit) and its last `tail` elements (the ragged end). For
/// kernels tested at streamed sizes (millions of elements): every value would be tens of MB of
/// text per observation for the grader to send, parse and compare, seconds per test; the
/// test's own oracle still checks every element in a local run.
template <class T>
  requires std::is_floating_point_v<T>
inline void observe_sampled(std::string_view label, std::span<const T> v, Tolerance tol = {},
                            std::size_t max_values = std::size_t{1} << 17, std::size_t tail = 4096) {
  if (!observing()) return;
  if (v.size() <= max_values) return observe(label, v, tol);
  tail = std::min(tail, max_values / 2);
  const std::size_t k = max_values - tail, body = v.size() - tail;
  Observation o{std::string(label) + " (sampled: " + std::to_string(k) + " spread + the last " + std::to_string(tail) +
                    " of " + std::to_string(v.size()) + ")",
                "f64", "", {static_cast<std::int64_t>(max_values)}, {}, 0, {}, tol};
  o.values.reserve(max_values);
  for (std::size_t j = 0; j < k; ++j) o.values.push_back(static_cast<double>(v[j * body / k]));
  for (std::size_t i = body; i < v.size(); ++i) o.values.push_back(static_cast<double>(v[i]));
  observe(std::move(o));
}
template <class T>
  requires std::is_floating_point_v<T>
inline void observe_sampled(std::string_view label, const std::vector<T>& v, Tolerance tol = {}) {
  observe_sampled(label, std::span<const T>(v.data(), v.size()), tol);
}

}  // namespace mls::testing

/// Records `expr` under its own spelling as the label, e.g. MLS_OBSERVE(mls::sum(x, {0})) or
/// MLS_OBSERVE(loss, {1e-5, 1e-6}); where the spelling would be a bare variable ("got"), name the
/// function and the case with mls::testing::observe(label, value).
#define MLS_OBSERVE(expr, ...) ::mls::testing::observe(#expr, (expr) __VA_OPT__(, ) __VA_ARGS__)
