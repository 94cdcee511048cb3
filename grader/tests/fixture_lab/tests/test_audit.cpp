// Tests of `mls-grader audit` (lab_audit.json): what may and may not differ between two runs of
// the reference with the same salt. A file the test made, named in an observation, reads the same
// in every run (each run has its own TMPDIR; without a PID namespace, another pid); a comparison of
// pointers records only its truth (an address differs from run to run); a value drawn from
// std::random_device differs, and `audit --fail-on nondeterministic` must say so.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"

TEST_CASE("a file the test made, named in an error, and a pointer comparison", "[paths]") {
  const std::string path = mls::testing::fresh_temp_path("sum.txt");
  mls::testing::require_error(
      [&] { throw mls::Error("sum_to: cannot open '" + path + "' for " + std::to_string(fixture::sum_to(4))); },
      "cannot open '" + path + "' for 10");
  const long total = fixture::sum_to(3);
  const long* p = &total;
  const long* q = &total;
  CHECK(p == q);  // Catch2 prints an address: recorded as a truth value
}

TEST_CASE("a value from std::random_device", "[random]") {
  std::random_device rd;
  mls::testing::observe("std::random_device", static_cast<std::int64_t>(rd()));
  MLS_OBSERVE(fixture::add(2, 3));
}
