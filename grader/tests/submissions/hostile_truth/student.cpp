// Attack (issue 25, cause 3: a test whose observations are all truth values scored): add
// computes nothing, it returns a large number, so `CHECK(add(a, 5) > a)` comes out true; mul and
// sum_to are the stubs. Before: the truth-only test scored. After: a test with no strong
// observation gives no points to anyone.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int, int) { return 1 << 30; }
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
