#pragma once
// Shared helpers of the lab 3 tests.
#include <catch2/catch.hpp>

#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/models.hpp"
#include "mls/graph_opt/passes.hpp"

namespace graph_opt_test {

using namespace mls;
using namespace mls::graph_opt;

using mls::testing::require_error;

/// An int64 scalar constant in `v`'s program (a loop counter's bound or step).
inline Var int_like(const Var& v, std::int64_t x) {
  return autodiff::constant_like(v, Tensor::scalar(static_cast<double>(x), DType::Int64));
}
/// A float64 tensor of N(0, 0.3²) values, from `seed` on the named stream.
inline Tensor randn64(const Shape& s, std::uint64_t seed, const char* stream) {
  Rng rng(seed, stream);
  return Tensor::randn(s, rng, 0.0, 0.3, DType::Float64);
}

/// Records a program's outputs: values within twice max_rel_error's tolerance (1024 units of
/// roundoff of the dtype, relative and absolute), or exactly.
inline void observe_outputs(const std::string& label, const std::vector<Tensor>& outs, bool exact = false) {
  if (!mls::testing::observing()) return;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const double tol = exact ? 0.0 : 2048 * (outs[i].dtype() == DType::Float64 ? 2.220446049250313e-16 : 1.1920929e-7);
    mls::testing::observe_values(label + " output " + std::to_string(i), outs[i], {tol, tol});
  }
}

/// Where node `n` stands in p's schedule (-1 if nowhere): a node identity that both builds agree on.
inline std::int64_t node_index(const Program& p, const Node* n) {
  const auto s = p.schedule();
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] == n) return static_cast<std::int64_t>(i);
  return -1;
}

/// The name of node n's op, for observations ("matmul", "gemm", ...).
inline std::string op_of(const Node& n) { return autodiff::op_name(n.op); }

/// The shapes of the constant second inputs of p's `op` nodes (the ones p's outputs need), sorted:
/// a value that does not depend on the order a pass made its nodes in.
inline std::string constant_operand_shapes(const Program& p, Op op) {
  std::vector<std::string> shapes;
  for (const Node* n : p.schedule())
    if (n->op == op && n->inputs.size() > 1 && n->inputs[1]->op == Op::Constant) shapes.push_back(shape_str(n->inputs[1]->shape));
  std::sort(shapes.begin(), shapes.end());
  std::string out;
  for (const std::string& s : shapes) out += (out.empty() ? "" : ", ") + s;
  return out;
}

#ifndef MLS_GRADED_BUILD  // oracles: compiled out of the grading build (mls/testing.hpp)
/// The largest error of `got` against what program `p` computes on `feeds` (lab 2's executor), in
/// units of max_rel_error's tolerance. An oracle: `p` is the program before the code under test
/// rewrote it, evaluated for its outputs; call it in MLS_ORACLE / MLS_ORACLE_CHECK only, after
/// `got` is observed.
inline double error_against(const std::vector<Tensor>& got, const Program& p, const std::vector<Tensor>& feeds) {
  return max_rel_error(got, run(p, feeds));
}
#endif  // MLS_GRADED_BUILD

/// Applies `pass` to a copy of `p`, requires the copy to verify, and observes what it computes on
/// random inputs; outside the grading build, also requires the same outputs as `p` (tolerance from
/// the dtype; `p` is evaluated after the pass ran, in MLS_ORACLE_CHECK). Returns the copy and the
/// pass's count.
template <class Pass>
std::pair<Program, int> apply_checked(const Program& p, Pass pass) {
  Program q = clone(p);
  const int n = pass(q);
  verify(q);
  for (std::uint64_t seed : {11u, 12u}) {
    const auto feeds = random_feeds(p, seed);
    const std::vector<Tensor> got = run(q, feeds);
    observe_outputs("after the pass", got);
    MLS_ORACLE_CHECK(const double err = error_against(got, p, feeds);
                     INFO("error / tolerance = " << err << "\nbefore:\n" << print(p) << "after:\n" << print(q));
                     REQUIRE(err <= 1.0));
  }
  return {std::move(q), n};
}

}  // namespace graph_opt_test
