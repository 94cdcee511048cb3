#pragma once
// Shared helpers of the lab 2 tests.
#include <catch2/catch.hpp>

#include <string>

#include "mls/autodiff/examples.hpp"
#include "mls/autodiff/forward.hpp"
#include "mls/autodiff/gradcheck.hpp"
#include "mls/autodiff/graph.hpp"
#include "mls/autodiff/nn.hpp"

namespace lab2test {

/// Runs `f` and requires an mls::Error whose message contains `needle`. A NotImplemented error
/// (a student function not written yet) is passed on, so the test fails with "not implemented".
template <class F>
void require_error(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const mls::NotImplemented&) {
    throw;
  } catch (const mls::Error& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    return;
  }
  FAIL("expected an mls::Error containing '" << needle << "'");
}

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
