// Tests of the grader fixture lab. One test name has characters Catch2 treats specially, to
// check that the grader escapes names.
#include <catch2/catch.hpp>

#include "fixture.hpp"

TEST_CASE("add small", "[add]") { REQUIRE(fixture::add(1, 2) == 3); }
TEST_CASE("add negative", "[add]") { REQUIRE(fixture::add(-4, 1) == -3); }
TEST_CASE("mul small", "[mul]") { REQUIRE(fixture::mul(3, 4) == 12); }
TEST_CASE("mul zero", "[mul]") { REQUIRE(fixture::mul(0, 7) == 0); }
TEST_CASE("sum to ten", "[sum]") { REQUIRE(fixture::sum_to(10) == 55); }
TEST_CASE("sum, with [brackets] and \"quotes\"", "[sum]") { REQUIRE(fixture::sum_to(3) == 6); }
