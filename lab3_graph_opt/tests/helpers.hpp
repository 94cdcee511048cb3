#pragma once
// Shared helpers of the lab 3 tests.
#include <catch2/catch.hpp>

#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

#include <string>

#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/models.hpp"
#include "mls/graph_opt/passes.hpp"

namespace graph_opt_test {

using namespace mls;
using namespace mls::graph_opt;

using mls::testing::require_error;

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

/// Applies `pass` to a copy of `p`, requires the copy to verify and to compute the same outputs
/// as `p` on random inputs (tolerance from the dtype); returns the copy and the pass's count.
template <class Pass>
std::pair<Program, int> apply_checked(const Program& p, Pass pass) {
  Program q = clone(p);
  const int n = pass(q);
  verify(q);
  for (std::uint64_t seed : {11u, 12u}) {
    const auto feeds = random_feeds(p, seed);
    const std::vector<Tensor> got = run(q, feeds);
    observe_outputs("after the pass", got);
    const double err = max_rel_error(got, run(p, feeds));
    INFO("error / tolerance = " << err << "\nbefore:\n" << print(p) << "after:\n" << print(q));
    REQUIRE(err <= 1.0);
  }
  return {std::move(q), n};
}

}  // namespace graph_opt_test
