#pragma once
// Helpers of the tensor-expression tests: run a schedule's loop nest or the naive evaluation of
// the definitions on given inputs, and compare results.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "error_check.hpp"
#include "mls/kernels/schedule.hpp"
#include "mls/observe.hpp"
#include "reference.hpp"

namespace kernels_test {

namespace te = mls::kernels::te;

inline std::size_t numel(const te::Tensor& t) {
  std::size_t n = 1;
  for (auto e : t.shape()) n *= static_cast<std::size_t>(e);
  return n;
}

/// Random inputs in [-1, 1), one named stream per tensor, as many floats as the tensor spans (a
/// strided placeholder's gaps included).
inline std::vector<std::vector<float>> random_inputs(const std::vector<te::Tensor>& inputs, std::uint64_t seed) {
  std::vector<std::vector<float>> v;
  for (const auto& t : inputs)
    v.push_back(random_vec(t.buffer() ? static_cast<std::size_t>(te::buffer_span(*t.buffer())) : numel(t), seed,
                           t.name().c_str()));
  return v;
}

/// The outputs of `run(bindings)` with `inputs` bound to `in` and `outputs` to fresh buffers that
/// start as NaN (every element must be written).
template <class Run>
std::vector<std::vector<float>> run_bound(const std::vector<te::Tensor>& inputs, std::vector<std::vector<float>>& in,
                                          const std::vector<te::Tensor>& outputs, Run&& run) {
  std::vector<std::vector<float>> out;
  for (const auto& t : outputs) out.emplace_back(numel(t), std::numeric_limits<float>::quiet_NaN());
  te::Bindings b;
  for (std::size_t i = 0; i < inputs.size(); ++i) b.bind(inputs[i], in[i]);
  for (std::size_t i = 0; i < outputs.size(); ++i) b.bind(outputs[i], out[i]);
  run(b);
  return out;
}

/// The outputs of `f` interpreted on `in`.
inline std::vector<std::vector<float>> run_lowered(const te::LoweredFunc& f, const std::vector<te::Tensor>& inputs,
                                                   std::vector<std::vector<float>> in,
                                                   const std::vector<te::Tensor>& outputs) {
  return run_bound(inputs, in, outputs, [&](te::Bindings& b) { te::interpret(f, b); });
}

inline std::vector<std::vector<float>> run_schedule(const te::Schedule& s, const std::vector<te::Tensor>& inputs,
                                                    const std::vector<std::vector<float>>& in) {
  return run_lowered(te::lower(s), inputs, in, s.outputs());
}

/// evaluate_naive's outputs on `in`.
inline std::vector<std::vector<float>> run_naive(const std::vector<te::Tensor>& inputs,
                                                 std::vector<std::vector<float>> in,
                                                 const std::vector<te::Tensor>& outputs) {
  return run_bound(inputs, in, outputs, [&](te::Bindings& b) { te::evaluate_naive(outputs, b); });
}

/// Observes the values of each output (`got[i]` of `outputs[i]`) for mls-grader as "<what> <name>",
/// equal to the reference build's within |s - r| <= tol + tol |r| (0: bit for bit).
inline void observe_outputs(const std::string& what, const std::vector<te::Tensor>& outputs,
                            const std::vector<std::vector<float>>& got, double tol = 0) {
  for (std::size_t i = 0; i < outputs.size() && i < got.size(); ++i)
    mls::testing::observe(what + " " + outputs[i].name(), got[i], {tol, tol});
}

/// Whether two float arrays are equal bit for bit (NaN equal to NaN).
inline bool identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// The oracle check (compiled out of the grading build: call it in MLS_ORACLE_CHECK):
/// |got - want| <= tol * (1 + |want|) everywhere (and no NaN).
inline void require_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                          const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i] << ", tol " << tol);
    REQUIRE(std::isfinite(got[i]));
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}
inline void require_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                          const std::string& what) {
  require_close(got, std::vector<double>(want.begin(), want.end()), tol, what);
}

/// The rounding bound of a float32 reduction of n terms of magnitude <= 1 each (Higham 3.1), with a
/// factor 4 of room for the other roundings of a row (exp, division, rsqrt).
inline double reduction_tol(std::int64_t n) {
  return 4.0 * static_cast<double>(n + 2) * std::numeric_limits<float>::epsilon();
}

}  // namespace kernels_test
