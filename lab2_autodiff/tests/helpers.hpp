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

/// Records what `f` computes on `inputs`, in eager mode and in define-then-run mode: its value and
/// the gradient of sum(f(x) * w) (w random, fixed by the seed) with respect to every floating
/// input, within a float64 tolerance. Only while observing (graded mode). These are check_grad's
/// observations: gradcheck (the numeric oracle) runs only outside the grading build, so both
/// reverse modes it compares are observed here. An exception (mls::NotImplemented from a stub, an
/// mls::Error) propagates and fails the test with its own message, as gradcheck's did. Each label
/// starts with the name of f's last op ("sin: d/dx0").
inline void observe_grad(const mls::autodiff::GradFn& f, const std::vector<mls::Tensor>& inputs) {
  if (!mls::testing::observing()) return;
  std::string op;
  {
    std::vector<mls::autodiff::Var> leaves;
    for (const mls::Tensor& t : inputs) leaves.emplace_back(t, mls::is_floating(t.dtype()));
    const mls::autodiff::Var out = f(leaves);
    // Labels name f's last op ("sin: d/dx0"): a student's feedback names the gradient that differs.
    op = out.node() ? std::string(mls::autodiff::op_name(out.node()->op)) + ": " : std::string();
    mls::testing::observe_values(op + "f(x)", out.value(), {1e-9, 1e-12});
    mls::Rng rng(97, "lab2-test-observe-grad");
    out.backward(mls::Tensor::randn(out.shape(), rng, 0.0, 1.0, out.value().dtype()));
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i].requires_grad()) continue;
      const mls::autodiff::Var g = leaves[i].grad();
      mls::testing::observe_values(op + "d/dx" + std::to_string(i), g.defined() ? g.value() : mls::Tensor(), {1e-7, 1e-10});
    }
  }
  // The same in a graph: placeholders fed with the inputs, gradients() of sum(f(x) * w), the same w.
  mls::autodiff::Graph g;
  mls::autodiff::Feeds feeds;
  std::vector<mls::autodiff::Var> ph, wrt;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ph.push_back(g.placeholder("x" + std::to_string(i), inputs[i].shape(), inputs[i].dtype()));
    feeds.emplace_back(ph.back(), inputs[i]);
    if (mls::is_floating(inputs[i].dtype())) wrt.push_back(ph.back());
  }
  const mls::autodiff::Var out = f(ph);
  mls::Rng rng(97, "lab2-test-observe-grad");
  const mls::Tensor w = mls::Tensor::randn(out.shape(), rng, 0.0, 1.0, out.dtype());
  const std::vector<mls::autodiff::Var> grads = mls::autodiff::gradients(mls::autodiff::sum(out * g.constant(w)), wrt);
  std::vector<mls::autodiff::Var> fetch{out};
  fetch.insert(fetch.end(), grads.begin(), grads.end());
  const std::vector<mls::Tensor> vals = mls::autodiff::Executor(g).run(fetch, feeds);
  mls::testing::observe_values(op + "graph f(x)", vals.at(0), {1e-9, 1e-12});
  std::size_t k = 1;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (mls::is_floating(inputs[i].dtype()))
      mls::testing::observe_values(op + "graph d/dx" + std::to_string(i), vals.at(k++), {1e-7, 1e-10});
}

/// Observes f's value and gradients in both reverse modes (observe_grad); outside the grading
/// build, also runs gradcheck (both modes against central differences: the oracle), with the
/// report shown on failure.
inline void check_grad(const mls::autodiff::GradFn& f, const std::vector<mls::Tensor>& inputs) {
  observe_grad(f, inputs);
  MLS_ORACLE_CHECK(const mls::autodiff::GradcheckResult r = mls::autodiff::gradcheck(f, inputs); INFO(r.report);
                   CHECK(r.ok));
}

}  // namespace autodiff_test
