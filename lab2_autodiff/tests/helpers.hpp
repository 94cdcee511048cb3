#pragma once
// Shared helpers of the lab 2 tests.
#include <catch2/catch.hpp>

#include "mls/testing.hpp"

#include <string>

#include "mls/autodiff/examples.hpp"
#include "mls/autodiff/forward.hpp"
#include "mls/autodiff/gradcheck.hpp"
#include "mls/autodiff/graph.hpp"
#include "mls/autodiff/nn.hpp"

namespace lab2test {

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

/// gradcheck in both modes, with the report shown on failure.
inline void check_grad(const mls::ad::GradFn& f, const std::vector<mls::Tensor>& inputs) {
  const mls::ad::GradcheckResult r = mls::ad::gradcheck(f, inputs);
  INFO(r.report);
  CHECK(r.ok);
}

}  // namespace lab2test
