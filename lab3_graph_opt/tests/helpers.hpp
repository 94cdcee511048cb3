#pragma once
// Shared helpers of the lab 3 tests.
#include <catch2/catch.hpp>

#include "mls/testing.hpp"

#include <string>

#include "mls/graphopt/memory.hpp"
#include "mls/graphopt/models.hpp"
#include "mls/graphopt/passes.hpp"

namespace lab3test {

using namespace mls;
using namespace mls::opt;

using mls::testing::require_error;

/// Applies `pass` to a copy of `p`, requires the copy to verify and to compute the same outputs
/// as `p` on random inputs (tolerance from the dtype); returns the copy and the pass's count.
template <class Pass>
std::pair<Program, int> apply_checked(const Program& p, Pass pass) {
  Program q = clone(p);
  const int n = pass(q);
  verify(q);
  for (std::uint64_t seed : {11u, 12u}) {
    const auto feeds = random_feeds(p, seed);
    const double err = max_rel_error(run(q, feeds), run(p, feeds));
    INFO("error / tolerance = " << err << "\nbefore:\n" << print(p) << "after:\n" << print(q));
    REQUIRE(err <= 1.0);
  }
  return {std::move(q), n};
}

}  // namespace lab3test
