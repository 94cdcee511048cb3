// A hidden test of the grader fixture lab (manifest lab_hidden.json lists it in hidden_files):
// no submission may read this text. MLS-HIDDEN-TEST-SECRET
#include <catch2/catch.hpp>

#include "fixture.hpp"

TEST_CASE("hidden sum", "[hidden]") { REQUIRE(fixture::sum_to(4) == 10); }
