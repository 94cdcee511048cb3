// Tests of the grader's hostile-submission suite (lab_hostile.json, issue 25): a test that
// records only truth values, which must give no points (a submission can make a truth come out
// "true" without computing anything), and a test whose observation holds far more values than the
// old every-k-th sample kept (every value must be compared).
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "fixture.hpp"
#include "mls/common/rng.hpp"
#include "mls/observe.hpp"
#include "mls/testing.hpp"

TEST_CASE("add, truth only", "[weak]") {
  mls::Rng rng(7, "weak");
  const int a = static_cast<int>(rng.randint(10, 1000));
  CHECK(fixture::add(a, 5) > a);  // an ordering: only its truth is recorded (weak)
}

TEST_CASE("add, many values", "[big]") {
  mls::Rng rng(7, "big");
  std::vector<long> sums(200000);
  for (auto& s : sums) s = fixture::add(static_cast<int>(rng.randint(-1000, 1000)), static_cast<int>(rng.randint(-1000, 1000)));
  mls::testing::observe("sums", sums);
}

TEST_CASE("mul, checked against an oracle the grading build leaves out", "[oracle]") {
  mls::Rng rng(7, "oracle");
  for (int i = 0; i < 20; ++i) {
    const int a = static_cast<int>(rng.randint(-1000, 1000)), b = static_cast<int>(rng.randint(-1000, 1000));
    // The expected product, marked ("MLS_WANT") and forced onto the stack, where a submission
    // can find it (hostile_stack_want does); in the grading build it does not exist.
    MLS_ORACLE(volatile std::int64_t want[2] = {0x4d4c535f57414e54, std::int64_t{a} * b};)
    const int got = fixture::mul(a, b);
    MLS_OBSERVE(got);
    MLS_ORACLE_CHECK(CHECK(got == want[1]));
  }
}
