#pragma once
// Shared helpers of the lab 2 tests.
#include <catch2/catch.hpp>

#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

#include <string>

#include "mls/autodiff/examples.hpp"
#include "mls/autodiff/forward.hpp"
#include "mls/autodiff/gradcheck.hpp"
#include "mls/autodiff/graph.hpp"
#include "mls/autodiff/nn.hpp"

namespace autodiff_test {

using mls::testing::require_error;

/// Random float64 tensor, N(0, 1) or U(lo, hi).
inline mls::Tensor randn(const mls::Shape& s, std::uint64_t seed) {
  mls::Rng rng(seed, "lab2-test");
  return mls::Tensor::randn(s, rng, 0.0, 1.0, mls::DType::Float64);
}
inline mls::Tensor randu(const mls::Shape& s, std::uint64_t seed, double lo, double hi) {
  mls::Rng rng(seed, "lab2-test");
  return mls::Tensor::rand(s, rng, lo, hi, mls::DType::Float64);
}

/// Catch's default Approx accepts a relative difference of 100 float epsilons (about 1.2e-5) from
/// the expected value; a student's value and the reference build's may each be that far off.
inline constexpr mls::testing::Tolerance kApprox{2.4e-5, 0.0};

/// mls::allclose's defaults (rtol 1e-5, atol 1e-8), doubled: both builds may be that far off.
inline constexpr mls::testing::Tolerance kAllclose{2e-5, 2e-8};

/// Records the value of `v` (dtype, shape, values), or "undefined".
inline void observe_var(std::string_view label, const mls::autodiff::Var& v, mls::testing::Tolerance tol = kApprox) {
  if (!mls::testing::observing()) return;
  mls::testing::observe_values(label, v.defined() ? v.value() : mls::Tensor(), tol);
}

/// Records what `f` computes in eager mode on `inputs`: its value and the gradient of
/// sum(f(x) * w) (w random, fixed by the seed) with respect to every floating input, within a
/// float64 tolerance. Only while observing (graded mode); a throw is recorded as such.
inline void observe_grad(const mls::autodiff::GradFn& f, const std::vector<mls::Tensor>& inputs) {
  if (!mls::testing::observing()) return;
  try {
    std::vector<mls::autodiff::Var> leaves;
    for (const mls::Tensor& t : inputs) leaves.emplace_back(t, mls::is_floating(t.dtype()));
    const mls::autodiff::Var out = f(leaves);
    mls::testing::observe_values("f(x)", out.value(), {1e-9, 1e-12});
    mls::Rng rng(97, "lab2-test-observe-grad");
    out.backward(mls::Tensor::randn(out.shape(), rng, 0.0, 1.0, out.value().dtype()));
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i].requires_grad()) continue;
      const mls::autodiff::Var g = leaves[i].grad();
      mls::testing::observe_values("d/dx" + std::to_string(i), g.defined() ? g.value() : mls::Tensor(), {1e-7, 1e-10});
    }
  } catch (...) {
    mls::testing::observe("observe_grad threw", std::string("an exception"));
  }
}

/// gradcheck in both modes, with the report shown on failure. Records f's value and gradients.
inline void check_grad(const mls::autodiff::GradFn& f, const std::vector<mls::Tensor>& inputs) {
  observe_grad(f, inputs);
  const mls::autodiff::GradcheckResult r = mls::autodiff::gradcheck(f, inputs);
  INFO(r.report);
  CHECK(r.ok);
}

}  // namespace autodiff_test
