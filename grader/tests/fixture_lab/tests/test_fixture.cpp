// Tests of the grader fixture lab. One test name has characters Catch2 treats specially, to
// check that the grader escapes names. Each test keeps its Catch2 check (the student's local
// messages) and observes what the code produced on inputs drawn from mls::Rng, so under
// mls-grader the inputs depend on the grading's secret salt and no answer can be precomputed.
// The drawn inputs never include a check's fixed input, nor give its answer (or 0, or 1): an
// attack that hard-codes those can never be right by chance.
#include <catch2/catch.hpp>

#include "fixture.hpp"
#ifdef MLS_FIXTURE_BROKEN_REFERENCE
#error "the fixture's reference does not build, on purpose (exit code 3: grader/tests/test_exit_codes.cpp)"
#endif
#include "mls/common/rng.hpp"
#include "mls/observe.hpp"

namespace {
int draw(const char* stream, int lo, int hi) { return static_cast<int>(mls::Rng(7, stream).randint(lo, hi)); }
}  // namespace

TEST_CASE("add small", "[add]") {
  REQUIRE(fixture::add(1, 2) == 3);
  const int a = draw("add a", 10, 1000), b = draw("add b", 10, 1000);
  MLS_OBSERVE(fixture::add(a, b));
}
TEST_CASE("add negative", "[add]") {
  REQUIRE(fixture::add(-4, 1) == -3);
  MLS_OBSERVE(fixture::add(-draw("neg", 20, 1000), draw("pos", 0, 10)));
}
TEST_CASE("mul small", "[mul]") {
  REQUIRE(fixture::mul(3, 4) == 12);
  MLS_OBSERVE(fixture::mul(draw("mul a", 5, 100), draw("mul b", -100, -5)));
}
TEST_CASE("mul zero", "[mul]") {
  REQUIRE(fixture::mul(0, 7) == 0);
  MLS_OBSERVE(fixture::mul(draw("mul c", 1, 100), draw("mul d", -100, -1)));
}
TEST_CASE("sum to ten", "[sum]") {
  REQUIRE(fixture::sum_to(10) == 55);
  MLS_OBSERVE(fixture::sum_to(draw("sum n", 11, 1000)));
}
TEST_CASE("sum, with [brackets] and \"quotes\"", "[sum]") {
  REQUIRE(fixture::sum_to(3) == 6);
  MLS_OBSERVE(fixture::sum_to(draw("sum m", 11, 100)));
}
// A GPU-style test, like lab 4's: it finds no GPU (the fixture never has one), says so and
// returns. The grader reports it SKIPPED where it sees no GPU, and FAIL where it sees one.
TEST_CASE("gpu kernel", "[gpu]") { WARN("SKIPPED: no GPU (the fixture lab has no GPU code)"); }
