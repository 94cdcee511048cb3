#pragma once
/// Helpers of lab 5's tests: per-rank inputs and the direct (naive) reference of every collective.
///
/// Catch2 assertions are not thread-safe: a test collects what every simulated rank computed
/// (indexed by rank) and checks it on the main thread after run_simulated returns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "mls/observe_tensor.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/testing.hpp"

namespace mls::parallel::testing {

/// Simulated ranks that give up waiting after `ms` milliseconds (the error tests' deadlocks end fast).
inline SimOptions quick(int ms = 2000) {
  SimOptions o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod};
  return ops;
}
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {DType::Float32, DType::Float64, DType::Int64};
  return d;
}
/// Sizes not divisible by N, smaller than N, and 0.
inline std::vector<std::int64_t> sizes_for(int n) {
  std::vector<std::int64_t> s = {0, 1, std::max(1, n - 1), n + 1, 2 * n + 3, 37};
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

/// Rank r's input of n elements: small integers for int64 (so prod stays exact), values in
/// [0.5, 1.5) for floats (so prod stays well conditioned). Same on every call.
inline Tensor input_of(int rank, std::int64_t n, DType dt, std::uint64_t seed = 7) {
  Rng rng(seed, "input" + std::to_string(rank));
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dt == DType::Int64 ? static_cast<double>(rng.randint(-3, 4)) : rng.uniform(0.5, 1.5);
  return Tensor::from_vector(v, Shape{n}).to(dt);
}

#ifndef MLS_GRADED_BUILD
/// The direct reduction of inputs[0..N) in double (exact for the small integers).
inline std::vector<double> reduce_ref(const std::vector<Tensor>& inputs, ReduceOp op) {
  std::vector<double> acc = inputs[0].to_vector<double>();
  for (std::size_t r = 1; r < inputs.size(); ++r) {
    std::vector<double> x = inputs[r].to_vector<double>();
    for (std::size_t i = 0; i < acc.size(); ++i) {
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: acc[i] += x[i]; break;
        case ReduceOp::Prod: acc[i] *= x[i]; break;
        case ReduceOp::Max: acc[i] = std::max(acc[i], x[i]); break;
        case ReduceOp::Min: acc[i] = std::min(acc[i], x[i]); break;
      }
    }
  }
  if (op == ReduceOp::Avg) {
    const bool integral = inputs[0].dtype() == DType::Int64;
    for (auto& a : acc) a = integral ? std::trunc(a / static_cast<double>(inputs.size())) : a / static_cast<double>(inputs.size());
  }
  return acc;
}

/// Elementwise comparison with a tolerance from the dtype and the reduction length.
inline bool close_to(const std::vector<double>& got, const std::vector<double>& want, DType dt, int n, std::string* why) {
  if (got.size() != want.size()) {
    *why = "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return false;
  }
  const double eps = dt == DType::Float32 ? 1.2e-7 : dt == DType::Float64 ? 2.3e-16 : 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = 4 * n * eps * std::max(1.0, std::abs(want[i]));
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      *why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
      return false;
    }
  }
  return true;
}
#endif  // MLS_GRADED_BUILD

/// The tolerance close_to accepts (4 n eps, relative and absolute), on both sides, as an
/// observation's: a student's value and the reference build's may each be that far from `want`.
inline ::mls::testing::Tolerance tol_of(DType dt, int n) {
  const double eps = dt == DType::Float32 ? 1.2e-7 : dt == DType::Float64 ? 2.3e-16 : 0.0;
  return {8 * n * eps, 8 * n * eps};
}

/// Records `got` with that tolerance and, outside the grading build, CHECKs it against `want`
/// (close_to), an oracle's value: `want` is evaluated only inside the oracle check.
#define MLS_CHECK_CLOSE(got, want, dt, n, ctx)                 \
  do {                                                          \
    ::mls::testing::observe(#got, got, ::mls::parallel::testing::tol_of(dt, n)); \
    MLS_ORACLE_CHECK(std::string why_;                          \
                     const bool ok_ = ::mls::parallel::testing::close_to(got, want, dt, n, &why_); \
                     INFO(ctx << ": " << why_); CHECK(ok_));    \
  } while (0)

inline std::string ctx(int n, std::int64_t size, DType dt, const char* what) {
  return std::string(what) + " N=" + std::to_string(n) + " n=" + std::to_string(size) + " " + std::string(dtype_name(dt));
}

}  // namespace mls::parallel::testing
