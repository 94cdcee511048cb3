#pragma once
/// gradcheck: compares analytic gradients (reverse mode, eager and graph) with central
/// differences, in float64.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mls/autodiff/var.hpp"

namespace mls::autodiff {

/// Which reverse mode(s) gradcheck compares with the numeric gradient.
enum class CheckMode { Eager, Graph, Both };

struct GradcheckOptions {
  CheckMode mode = CheckMode::Both;
  std::uint64_t seed = 0;  // for the random output weights
  /// Step of the central difference; 0 derives it from float64: eps^(1/3) (about 6e-6), the
  /// step that balances truncation error O(h^2) against rounding error O(eps/h).
  double step = 0.0;
  /// Tolerance on |analytic - numeric| / (1 + |numeric|); 0 derives it from float64: the
  /// rounding error of a central difference is about eps/step * |L| = eps^(2/3) * |L|, so
  /// tol = 50 * eps^(2/3) * (1 + sum |f(x)| w), never below 1e-7.
  double tol = 0.0;
};

struct GradcheckResult {
  bool ok = false;
  double max_error = 0.0;  // the largest normalised error over every element checked
  std::string report;      // which input, element and mode was worst, with both values
};

/// f maps the inputs (as Vars: eager leaves or graph placeholders) to one output.
using GradFn = std::function<Var(const std::vector<Var>&)>;

/// Checks d/dx_i of L = sum(f(x) * w) for random fixed weights w, for every floating input x_i
/// (integer inputs, e.g. indices, are passed through as constants). Floating inputs must be
/// float64. Also checks that graph mode computes the same forward value as eager mode.
GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

/// Central-difference gradient of L = sum(f(x) * weight) with respect to input `which`.
Tensor numeric_gradient(const GradFn& f, const std::vector<Tensor>& inputs, std::size_t which, const Tensor& weight,
                        double step);

}  // namespace mls::autodiff
