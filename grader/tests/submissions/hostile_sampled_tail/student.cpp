// Attack (issue 25, cause 4): the baseline, except that add goes wrong after its 199997th call
// of a process: only the big test calls it that often, and its last three values were not in
// the old sample (every 4th from element 0). Every value is compared now: the big test fails.
#include "fixture.hpp"
#include "mls/common/error.hpp"
namespace fixture {
int add(int a, int b) {
  static long calls = 0;
  return calls++ < 199997 ? a + b : a - b;
}
int mul(int, int) { MLS_TODO("lab97: mul"); }
long sum_to(int) { MLS_TODO("lab97: sum_to"); }
}  // namespace fixture
