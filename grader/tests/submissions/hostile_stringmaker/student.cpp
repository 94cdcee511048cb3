// Attack (issue 25, cause 2: the listener recorded the left side of `CHECK(a == b)` from text
// that student-replaceable code produced): the stubs for mul and sum_to, add wrong (a - b), and
// a strong `Catch::StringMaker<int>::convert` under its linker name that prints every int as
// "3" — the fixed check `REQUIRE(add(1, 2) == 3)` would then read "3 == 3" in the record. The
// link audit rejects it: Catch2's symbols are not the student's.
#include <string>

#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) { return a - b; }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture

std::string forged_convert(int) __asm__("_ZN5Catch11StringMakerIivE7convertEi");
std::string forged_convert(int) { return "3"; }
