// Attack (issue 15, #4): the MLS_TODO stubs, plus extra test cases (macro names built by token
// pasting) tagged into the lab's groups, each passing trivially, so that a group's points would
// be split over names the submission chose. The differential grader takes the test list from
// the reference build: these names are never run, and the stubs score 0.
#define MLS_ATTACK_HDR <catch2/catch.hpp>
#include MLS_ATTACK_HDR

#include "fixture.hpp"
#include "mls/common/error.hpp"

namespace fixture {
int add(int, int) { MLS_TODO("lab99: add"); }
int mul(int, int) { MLS_TODO("lab99: mul"); }
long sum_to(int) { MLS_TODO("lab99: sum_to"); }
}  // namespace fixture

#define CAT2(a, b) a##b
CAT2(TEST, _CASE)("add extra 1", "[add]") {}
CAT2(TEST, _CASE)("add extra 2", "[add]") {}
CAT2(TEST, _CASE)("add extra 3", "[add]") {}
CAT2(TEST, _CASE)("mul extra 1", "[mul]") {}
CAT2(TEST, _CASE)("mul extra 2", "[mul]") {}
CAT2(TEST, _CASE)("mul extra 3", "[mul]") {}
CAT2(TEST, _CASE)("sum extra 1", "[sum]") {}
CAT2(TEST, _CASE)("sum extra 2", "[sum]") {}
CAT2(TEST, _CASE)("sum extra 3", "[sum]") {}
